"""Fabric Manager in `invoke validate`, on hosts whose stack profile says they have
NVSwitches (``nvswitch: true``): without Fabric Manager running, CUDA does not
start there, and a Fabric Manager of another version than the driver's does
not start at all.

``gather`` reads, on the host (lab.hosts.remote), the version
`nv-fabricmanager --version` prints and the service's state: systemd's word
for nvidia-fabricmanager where systemd runs, else whether an nv-fabricmanager
process runs (the rule of the audit's gpulab_stack_facts module). ``checks``
(pure) judges it against the driver the host runs (the probe's), else the
profile's driver version: the same release (lab.core.versions), nothing less.

A running service is not enough: each GPU must have finished its fabric registration
(NVML's GPU fabric info, what `nvidia-smi -q` shows under "Fabric": State and Status;
read by the probe, runner.probe_gpu.fabric_facts). ``gpu_checks`` judges it per GPU on
an NVSwitch host: completed with status 0 PASS; completed with an error, not started or
in progress FAIL (CUDA work across the fabric fails on that GPU); not readable (an
older driver or nvidia-ml-py) WARN, saying why; a GPU that reports no registration at
all (state "not supported": before Hopper) gives no record, its host's service check
stands for it.
"""

from __future__ import annotations

import re

from lab.core import versions
from lab.validate.verdict import FAIL, PASS, WARN, check

SERVICE = "nvidia-fabricmanager"
VERSION = re.compile(r"Fabric Manager version is\s*:\s*([0-9][0-9.]*)")
# one shell command: the version line, then "service: <state>"
PROBE = (
    "nv-fabricmanager --version 2>/dev/null; "
    "if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then "
    f'echo "service: $(systemctl is-active {SERVICE})"; '
    "elif grep -qx nv-fabricmanage /proc/[0-9]*/comm 2>/dev/null; then echo 'service: active'; "
    "else echo 'service: inactive'; fi"
)


def gather(remote) -> dict:
    """{'version': ... or None, 'service': 'active'|'inactive'|'failed'|...} of this host."""
    res = remote.run(PROBE, check=False, timeout=60)
    m = VERSION.search(res.stdout)
    state = re.search(r"^service: (\S*)", res.stdout, re.M)
    return {"version": m.group(1) if m else None, "service": (state.group(1) if state else None) or "unknown"}


def checks(gathered: dict | None, nvswitch: bool, driver: str | None) -> list[dict]:
    """Host records: Fabric Manager installed at the driver's version, and its service active."""
    if not nvswitch or not isinstance(gathered, dict):
        return []
    have = gathered.get("version")
    if have is None:
        return [
            check(
                "Fabric Manager",
                FAIL,
                None,
                f"nv-fabricmanager {driver or ''}".strip(),
                "not installed: the stack profile says this host has NVSwitches, and CUDA does not start "
                "there without Fabric Manager",
                source="fabricmanager",
            )
        ]
    out = []
    if driver and versions.release(have) == versions.release(driver):
        out.append(
            check(
                "Fabric Manager version",
                PASS,
                have,
                driver,
                f"Fabric Manager {have} as the driver",
                source="fabricmanager",
            )
        )
    else:
        out.append(
            check(
                "Fabric Manager version",
                FAIL,
                have,
                driver or "the driver's version",
                f"Fabric Manager is {have}, the driver {driver or 'unknown'}: it must be exactly the driver's version",
                source="fabricmanager",
            )
        )
    state = gathered.get("service") or "unknown"
    out.append(
        check(
            "Fabric Manager service",
            PASS if state == "active" else FAIL,
            state,
            "active",
            f"{SERVICE} is {state}"
            + ("" if state == "active" else ": CUDA does not start on an NVSwitch system without it"),
            source="fabricmanager",
        )
    )
    return out


def gpu_checks(gpu: dict, nvswitch: bool) -> list[dict]:
    """One GPU's fabric registration on an NVSwitch host (the rule above); [] elsewhere."""
    if not nvswitch:
        return []
    info = gpu.get("fabric")
    exp = "registration completed, status 0"
    if not isinstance(info, dict):
        why = (gpu.get("unavailable") or {}).get("fabric") or "not in the probe"
        return [
            check(
                "Fabric registration",
                WARN,
                None,
                exp,
                f"not judged: NVML's GPU fabric info: {why}",
                source="fabricmanager",
            )
        ]
    state, status = info.get("state"), info.get("status")
    name = info.get("state_name") or f"state {state}"
    if state == 0:
        return []
    if state == 3 and status == 0:
        return [
            check(
                "Fabric registration",
                PASS,
                name,
                exp,
                f"fabric registration completed (clique {info.get('clique_id')})",
                source="fabricmanager",
            )
        ]
    why = (
        f"completed with NVML status {status}"
        if state == 3
        else f"{name}: Fabric Manager has not brought this GPU into the fabric"
    )
    return [
        check(
            "Fabric registration",
            FAIL,
            name,
            exp,
            f"fabric registration {why}; CUDA work across the NVSwitch fabric fails on this GPU",
            source="fabricmanager",
        )
    ]
