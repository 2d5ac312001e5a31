"""XID events of the burn-in: NVIDIA's Xid lines of the kernel log, matched to the
probed GPUs by PCI bus id, read before and after the load (runner.burnin).
"""

from __future__ import annotations

import re
import shutil
import subprocess


# ---------------------------------------------------------------- XID events

# The driver's line (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c,
# XID_PRINT_WITH_ATTR): "NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, [pid=%s, name=%s, ]msg";
# a GPU in MIG mode names its GPU instance and compute instance in the parenthesis (tests/samples/xid).
XID_RE = re.compile(
    r"(?:\[\s*(?P<uptime>\d+\.\d+)\]\s*)?.*?NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?"
    r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): "
    r"(?P<xid>\d+),\s*(?P<text>.*)$"
)


def pci_key(bus_id: str | None):
    """(domain, bus, device) of '00000000:1B:00.0' or '0000:1b:00' style ids."""
    if not bus_id:
        return None
    m = re.match(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})", bus_id.strip())
    if not m:
        return None
    return (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16))


def parse_xids(text: str, gpus: list[dict] | None = None) -> list[dict]:
    """XID events of a kernel log; ``gpus`` (probe entries) maps PCI ids to indices."""
    by_pci = {pci_key(g.get("pci_bus_id")): g.get("index") for g in (gpus or []) if g.get("pci_bus_id")}
    events = []
    for line in text.splitlines():
        m = XID_RE.search(line)
        if not m:
            continue
        events.append(
            {
                "xid": int(m.group("xid")),
                "pci": m.group("pci").lower(),
                "gpu": by_pci.get(pci_key(m.group("pci"))),
                "uptime_s": float(m.group("uptime")) if m.group("uptime") else None,
                "text": m.group("text").strip()[:300],
                **(
                    {
                        "mig": {
                            "gpu_instance": int(m.group("gi")),
                            **({"compute_instance": int(m.group("ci"))} if m.group("ci") else {}),
                        }
                    }
                    if m.group("gi")
                    else {}
                ),
            }
        )
    return events


def read_kernel_log() -> tuple[str | None, str | None, str | None]:
    """(text, source, error): the kernel messages since boot.

    Tries ``journalctl -k -b`` (complete since boot) and then ``dmesg`` (the
    ring buffer, may have wrapped); ``dmesg`` may be refused to non-root users
    (kernel.dmesg_restrict), in which case the error says so.
    """
    errors = []
    for argv, source in (
        (["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"], "journalctl -k -b"),
        (["dmesg"], "dmesg"),
    ):
        if shutil.which(argv[0]) is None:
            errors.append(f"{argv[0]} not found")
            continue
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60, errors="replace")
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{source}: {exc}")
            continue
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout, source, None
        msg = (out.stderr.strip().splitlines() or [f"exit {out.returncode}, no output"])[-1]
        errors.append(f"{source}: {msg}")
    return None, None, "; ".join(errors)


def xid_scan(gpus: list[dict]) -> dict:
    text, source, error = read_kernel_log()
    events = parse_xids(text, gpus) if text is not None else []
    return {"source": source, "error": error, "events": events}
