"""The probe's interconnect facts of one GPU: NVLink link state and error counters and the
PCIe replay counter through NVML, and the PCIe AER error counters of the GPU's PCI device
(and of the port above it) from sysfs under a root (``/`` on a host).

Counters are what the driver and the kernel hold since they loaded: the probe reads, the
controller (lab's validate checks) judges. Every read stands on its own: a GPU without
NVLink has ``nvlink: null``; a link or counter NVML will not give is ``null`` with its
reason kept; a kernel without AER statistics gives ``aer: null`` and says why.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from runner import stackread

# nvmlNvLinkErrorCounter_t (nvml.h) -> the probe's name of the counter
NVLINK_COUNTERS = (
    ("NVML_NVLINK_ERROR_DL_REPLAY", 0, "replay"),
    ("NVML_NVLINK_ERROR_DL_RECOVERY", 1, "recovery"),
    ("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2, "crc_flit"),
    ("NVML_NVLINK_ERROR_DL_CRC_DATA", 3, "crc_data"),
)
MAX_LINKS_DEFAULT = 18  # NVLink 4 (H100/H200); newer nvidia-ml-py names a larger bound

# sysfs AER statistics of a PCI device (Documentation/ABI/testing/sysfs-bus-pci-devices-aer-stats)
AER_FILES = (
    ("correctable", "aer_dev_correctable", "TOTAL_ERR_COR"),
    ("nonfatal", "aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    ("fatal", "aer_dev_fatal", "TOTAL_ERR_FATAL"),
)

BDF_RE = re.compile(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")


def _reason(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


def _absent(exc: BaseException) -> bool:
    """NVML's answer for a link the GPU does not have (or no NVLink at all)."""
    text = str(exc).lower()
    return any(w in text for w in ("not supported", "not_supported", "invalid argument", "function not found"))


def nvlink_facts(nvml, handle, unavailable: dict) -> dict | None:
    """Per link: up, and the replay, recovery, CRC flit and CRC data counters; with totals.

    None when the GPU has no NVLink (NVML answers "not supported" for its first link)."""
    get_state = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    if get_state is None:
        unavailable["nvlink"] = "not in this nvidia-ml-py"
        return None
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", MAX_LINKS_DEFAULT))
    get_err = getattr(nvml, "nvmlDeviceGetNvLinkErrorCounter", None)
    links = []
    for link in range(max_links):
        try:
            up = int(get_state(handle, link)) == int(getattr(nvml, "NVML_FEATURE_ENABLED", 1))
        except Exception as exc:
            if _absent(exc):
                continue
            links.append({"link": link, "up": None, "error": _reason(exc)})
            continue
        entry: dict = {"link": link, "up": up}
        for const, default, name in NVLINK_COUNTERS:
            entry[name] = None
            if get_err is None:
                continue
            try:
                entry[name] = int(get_err(handle, link, getattr(nvml, const, default)))
            except Exception as exc:
                if not _absent(exc):
                    entry.setdefault("errors", {})[name] = _reason(exc)
        links.append(entry)
    if not links:
        return None
    totals = {}
    for _c, _d, name in NVLINK_COUNTERS:
        values = [x[name] for x in links if x.get(name) is not None]
        totals[name] = sum(values) if values else None
    return {
        "links_present": len(links),
        "links_up": sum(1 for x in links if x.get("up")),
        "links_down": [x["link"] for x in links if x.get("up") is False],
        "errors": totals,
        "links": links,
    }


def pcie_replay(nvml, handle, unavailable: dict) -> int | None:
    fn = getattr(nvml, "nvmlDeviceGetPcieReplayCounter", None)
    if fn is None:
        unavailable["pcie.replay_count"] = "not in this nvidia-ml-py"
        return None
    try:
        return int(fn(handle))
    except Exception as exc:
        if not _absent(exc):
            unavailable["pcie.replay_count"] = _reason(exc)
        return None


def sysfs_name(bus_id: str | None) -> str | None:
    """'00000000:1B:00.0' (NVML) -> '0000:1b:00.0' (sysfs); None when it is no PCI address."""
    m = BDF_RE.fullmatch((bus_id or "").strip())
    if not m:
        return None
    return f"{int(m.group(1) or '0', 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def parse_aer(text: str, total_key: str) -> dict | None:
    """{total, counts (the non-zero ones)} of one aer_dev_* file; None when it holds no counter."""
    counts = {}
    total = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            continue
        if parts[0] == total_key:
            total = int(parts[1])
        else:
            counts[parts[0]] = int(parts[1])
    if total is None and not counts:
        return None
    if total is None:
        total = sum(counts.values())
    return {"total": total, "counts": {k: v for k, v in counts.items() if v}}


def aer_counters(device_dir: Path) -> tuple[dict | None, str | None]:
    """({correctable, nonfatal, fatal}, None) of one PCI device directory, or (None, why)."""
    if not device_dir.is_dir():
        return None, f"{device_dir} does not exist"
    out = {}
    for name, fname, total_key in AER_FILES:
        text = stackread.read(device_dir / fname)
        if text is None:
            return None, (
                f"no {fname} in {device_dir} (kernel without PCIe AER statistics, or the device does not report AER)"
            )
        parsed = parse_aer(text, total_key)
        if parsed is None:
            return None, f"{device_dir / fname} holds no counter"
        out[name] = parsed
    return out, None


def _upstream(root: Path, name: str) -> Path | None:
    """The port above the device (the parent in the PCI hierarchy), when sysfs shows one."""
    link = root / "sys/bus/pci/devices" / name
    try:
        target = Path(os.path.realpath(link))
    except OSError:
        return None
    parent = target.parent
    return parent if BDF_RE.fullmatch(parent.name) and parent != target else None


def aer_facts(root: Path, bus_id: str | None, unavailable: dict) -> dict | None:
    """The AER counters of the GPU's PCI device and of its upstream port; None and a reason
    in ``unavailable`` when sysfs has none for the GPU."""
    name = sysfs_name(bus_id)
    if name is None:
        unavailable["aer"] = f"no PCI address to look up ({bus_id!r})"
        return None
    device, why = aer_counters(root / "sys/bus/pci/devices" / name)
    if device is None:
        unavailable["aer"] = why
        return None
    out = {"device": name, **device, "upstream": None}
    up = _upstream(root, name)
    if up is not None:
        counters, _why = aer_counters(up)
        if counters is not None:
            out["upstream"] = {"device": up.name, **counters}
    return out


def interconnect_facts(nvml, handle, bus_id: str | None, root: Path, unavailable: dict) -> dict:
    """The interconnect part of a GPU's probe record."""
    return {
        "nvlink": nvlink_facts(nvml, handle, unavailable),
        "pcie_replay_count": pcie_replay(nvml, handle, unavailable),
        "aer": aer_facts(root, bus_id, unavailable),
    }


def counters(probe_doc: dict) -> dict:
    """The interconnect counters of a probe document, per GPU index: what the burn-in reads
    again after the load, so that the controller can tell errors of the load window apart
    from older ones (``collected_at`` and the probe's own give the window)."""
    gpus = {}
    for g in probe_doc.get("gpus") or []:
        if "error" in g:
            continue
        nv = g.get("nvlink")
        aer = g.get("aer")
        gpus[str(g.get("index"))] = {
            "nvlink_links_up": nv["links_up"] if nv else None,
            "nvlink_errors": dict(nv["errors"]) if nv else None,
            "pcie_replay_count": (g.get("pcie") or {}).get("replay_count"),
            "aer": {k: aer[k]["total"] for k in ("correctable", "nonfatal", "fatal")} if aer else None,
        }
    return {"collected_at": probe_doc.get("collected_at"), "gpus": gpus}
