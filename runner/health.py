"""``python -m runner health``: the quick health facts a sweep reads before its first run on a host
and after a failed run (one JSON document).

Nothing here reads the hardware in a way of its own: the GPUs are the probe's (runner.probe.gather:
NVML reachable, per GPU uncorrected ECC, retired pages, row remaps), the XID events the burn-in's
(runner.burnin_xid.xid_scan: NVIDIA's Xid lines of the kernel log, matched to GPUs by PCI id). The
document adds the boot id and the uptime, so that the controller can tell the XIDs that came after
its last check (same boot, later uptime) from older ones. The controller judges it
(lab.validate.health); the runner only reports.
"""

from __future__ import annotations

import json
from pathlib import Path

from runner import probe
from runner.burnin_xid import xid_scan

KIND = "gpulab-health"
SCHEMA = 1
GPU_FIELDS = ("index", "name", "uuid", "serial", "pci_bus_id", "ecc", "retired_pages", "row_remap", "error")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace").strip()[:200] or None
    except OSError:
        return None


def boot_mark() -> tuple[str | None, float | None]:
    """(boot id, seconds since boot) of this host's kernel."""
    up = _read("/proc/uptime")
    try:
        uptime = float(up.split()[0]) if up else None
    except (ValueError, IndexError):
        uptime = None
    return _read("/proc/sys/kernel/random/boot_id"), uptime


def gather(nvml=None) -> dict:
    """The health document: the probe's GPU health fields, the kernel log's XIDs, the boot mark."""
    doc = probe.gather(None, nvml)
    boot_id, uptime = boot_mark()
    gpus = [{k: g.get(k) for k in GPU_FIELDS if k in g} for g in doc.get("gpus", [])]
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "collected_at": doc["collected_at"],
        "host": (doc.get("host") or {}).get("hostname"),
        "boot_id": boot_id,
        "uptime_s": uptime,
        "nvidia": doc.get("nvidia"),
        "gpu_count": doc.get("gpu_count", 0),
        "gpus": gpus,
        "xid": xid_scan(doc.get("gpus", [])),
    }


def _key(e: dict):
    return (e.get("pci"), e.get("xid"), e.get("uptime_s"), e.get("text"))


def xid_baseline(gpus) -> dict | None:
    """The kernel log's XIDs when a GPU run starts (None when the scan itself fails)."""
    try:
        return xid_scan(gpus or [])
    except Exception:  # a run never fails for its epilogue
        return None


def epilogue(out: Path, baseline: dict | None, gpus, failed: bool) -> None:
    """What a run leaves of its host's health, before SHA256SUMS: ``xid.json`` when XIDs appeared during a
    GPU run (``baseline`` given), ``health.json`` after a failed or aborted run. Never raises."""
    from runner import rundir

    try:
        if baseline is not None:
            after = xid_scan(gpus or [])
            seen = {_key(e) for e in baseline.get("events", [])}
            new = [e for e in after.get("events", []) if _key(e) not in seen]
            if new:
                rundir.write_json(
                    out / rundir.XIDS, {"source": after.get("source"), "error": after.get("error"), "events": new}
                )
        if failed:
            rundir.write_json(out / rundir.HEALTH, gather())
    except Exception as exc:  # said in the run's log, the run directory still completes
        with open(out / rundir.STDOUT, "a", encoding="utf-8") as f:
            f.write(f"[runner] health epilogue failed: {type(exc).__name__}: {exc}\n")


def add_arguments(parser) -> None:
    pass


def main(args) -> int:
    print(json.dumps(gather(), sort_keys=True, separators=(",", ":")))
    return 0
