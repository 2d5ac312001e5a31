"""GPU topology of a host, and which GPUs a run of N GPUs gets.

The facts come from the runner's probe (``python -m runner probe --json``:
per GPU its index, PCI bus id and NUMA node) plus the sysfs path of each GPU's
PCI device, whose first component (``pci0000:3a``) is its PCIe root complex.
``choose(topology, n)`` picks N GPUs that share a PCIe root when possible,
else a NUMA node, else the fewest NUMA nodes; lowest indices first. The choice
is recorded in sweep.json and passed to the runner as explicit indices.

A GPU the probe lists with an ``error`` (NVML answered with an error for it) is left out of the subsets
and kept in the topology's ``unreadable`` (``left_out`` says it, one line each: the host, the index, the
error). A host without a usable GPU whose inventory declares GPUs (lab.validate.hostchecks.expects_gpus),
or whose probe lists only unreadable ones, is refused (``NoGpuFound``): its runs never fall back to the CPU
and pass for the device's.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from lab.hosts import remote as rmt
from lab.hosts.inventory import Host
from lab.core import advice, limits, plaindata
from lab.core.errors import ConfigError, RunError, line_of
from lab.validate.hostchecks import expects_gpus


class NoGpuFound(RunError):
    """A GPU host (by its inventory, or by the GPUs its probe lists) with no GPU a run can use: nothing runs
    there, a failed host as an unreachable one is (exit 1): its driver, or its inventory entry, is to be fixed
    before a sweep uses it."""


@dataclass(frozen=True)
class Gpu:
    index: int
    bus_id: str | None = None
    numa: int | None = None
    root: str | None = None
    name: str | None = None


def sysfs_bus_id(bus_id: str) -> str | None:
    """NVML's ``00000000:3B:00.0`` -> sysfs ``0000:3b:00.0``."""
    m = re.fullmatch(r"(?:[0-9A-Fa-f]{4})?([0-9A-Fa-f]{4}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])", bus_id or "")
    if not m:
        return None
    return f"{m.group(1)}:{m.group(2)}:{m.group(3)}.{m.group(4)}".lower()


def pcie_root(sysfs_path: str) -> str | None:
    """``/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0`` -> ``pci0000:3a``."""
    m = re.search(r"/sys/devices/(pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2})(?:/|$)", sysfs_path or "")
    return m.group(1) if m else None


NVIDIA_CHARS = 4096  # the probe's "nvidia": null, or why there is no NVIDIA driver or GPU


def _text_or_none(v, n: int) -> bool:
    return v is None or (isinstance(v, str) and len(v) <= n)


def read_probe(text: str, host: str) -> dict:
    """The probe document a host printed (``runner probe --json``), bounded and checked where the
    topology reads it; RunError naming the host and the fault otherwise."""
    try:
        doc = plaindata.loads(text, finite=True, limit=limits.JSON_BYTES)
    except ValueError as exc:
        raise RunError(f"{host}: `runner probe` printed no usable JSON document ({str(exc)[:120]})") from None
    gpus = doc.get("gpus") if isinstance(doc, dict) else None
    fault = (
        "is not a JSON object"
        if not isinstance(doc, dict)
        else "has no list of GPUs"
        if not isinstance(gpus, list)
        else f"lists more than {limits.GPUS.hi} GPUs"
        if len(gpus) > limits.GPUS.hi
        else "has a 'host' that is not an object"
        if not isinstance(doc.get("host") or {}, dict)
        else "has a host.hostname that is not a name (text of at most 255 characters)"
        if not _text_or_none((doc.get("host") or {}).get("hostname"), 255)
        else f"has an 'nvidia' that is not a short text (at most {NVIDIA_CHARS} characters)"
        if not _text_or_none(doc.get("nvidia"), NVIDIA_CHARS)
        else None
    )
    seen: set[int] = set()
    for g in gpus if fault is None else ():
        if not isinstance(g, dict) or g.get("error"):
            continue
        i = g.get("index")
        if (
            isinstance(i, bool)
            or not isinstance(i, int)
            or not limits.GPU_INDEX.lo <= i <= limits.GPU_INDEX.hi
            or i in seen
        ):
            fault = f"has a GPU index {str(i)[:24]} (a distinct integer {limits.GPU_INDEX.lo}..{limits.GPU_INDEX.hi} expected)"
            break
        seen.add(i)
        numa = g.get("numa_node")
        if not (
            _text_or_none(g.get("pci_bus_id"), 64)
            and _text_or_none(g.get("name"), 256)
            and (numa is None or (isinstance(numa, int) and not isinstance(numa, bool) and -1 <= numa < 4096))
        ):
            fault = f"has GPU {i} with a pci_bus_id, name or numa_node of the wrong type or size"
            break
    if fault:
        raise RunError(f"{host}: the document `runner probe` printed {fault}")
    return doc


def from_probe(doc: dict, roots: dict[str, str | None] | None = None) -> list[Gpu]:
    """GPUs of a probe document; ``roots`` maps a bus id to its PCIe root."""
    gpus = []
    for g in doc.get("gpus") or []:
        if not isinstance(g, dict) or not isinstance(g.get("index"), int) or g.get("error"):
            continue
        bus = g.get("pci_bus_id")
        numa = g.get("numa_node")
        gpus.append(
            Gpu(
                index=g["index"],
                bus_id=bus,
                numa=numa if isinstance(numa, int) and numa >= 0 else None,
                root=(roots or {}).get(bus),
                name=g.get("name"),
            )
        )
    return sorted(gpus, key=lambda g: g.index)


def unreadable(doc: dict) -> list[dict]:
    """The GPUs a probe document lists with an ``error`` (NVML's answer for that GPU): ``{index, error}`` each,
    the index None where it is no GPU index, the error one bounded line."""
    out = []
    for g in doc.get("gpus") or []:
        if isinstance(g, dict) and g.get("error"):
            i = g.get("index")
            ok = isinstance(i, int) and not isinstance(i, bool) and limits.GPU_INDEX.lo <= i <= limits.GPU_INDEX.hi
            out.append({"index": i if ok else None, "error": line_of(g["error"], 200)})
    return out


def _declared(host: Host) -> str:
    count, model = host.gpu_count, host.gpu_model
    if count in (None, "auto"):
        return f"{model} GPUs (gpulab_gpu_model {model}, gpulab_gpu_count auto)"
    return f"{count} GPU(s) (gpulab_gpu_count {count}, gpulab_gpu_model {model})"


def require_gpus(host: Host, usable: int, bad: list[dict], nvidia) -> None:
    """NoGpuFound when ``host`` has no usable GPU (``usable``) although its inventory declares GPUs or its probe
    lists some, each unreadable (``bad``); a CPU host (no GPU declared, none listed) passes."""
    if usable or not (expects_gpus(host) or bad):
        return
    found = (
        "0 usable: " + "; ".join(f"GPU {b['index']}: {b['error']}" for b in bad[:4])
        if bad
        else f"0 ({line_of(nvidia or 'NVML answers but lists no GPU', 200)})"
    )
    what = (
        f"the inventory declares {_declared(host)} but the probe found {found}"
        if expects_gpus(host)
        else f"its probe lists {len(bad)} GPU(s) but found {found}"
    )
    raise NoGpuFound(
        advice.carry(
            f"{host.name}: {what}: nothing is run on it (a GPU host never runs on the "
            f"CPU in its GPUs' place); check its NVIDIA driver and GPUs (`nvidia-smi` there; "
            f"`invoke provision --host {host.name}` installs the stack's driver), or fix its inventory entry"
        )
    )


def left_out(host: str, topology: dict) -> list[str]:
    """One line per GPU the probe listed with an error: the host, the index, NVML's error, and what the plan
    does (the GPUs the runs use instead)."""
    use = ",".join(str(g["index"]) for g in topology.get("gpus") or []) or "none"
    return [
        f"{host}: GPU {b['index']} left out of the plan (NVML: {b['error']}): runs use GPU(s) {use}"
        for b in topology.get("unreadable") or []
    ]


def _groups(gpus: list[Gpu], key) -> list[list[Gpu]]:
    out: dict = {}
    for g in gpus:
        k = key(g)
        if k is not None:
            out.setdefault(k, []).append(g)
    return list(out.values())


def choose(gpus: list[Gpu], n: int) -> list[int]:
    """Indices of N GPUs: one PCIe root, else one NUMA node, else the fewest NUMA nodes.

    Among equal candidates the group with the lowest indices wins, and within
    a group the lowest indices are taken, so the choice is stable.
    """
    if n == 0:
        return []
    if n > len(gpus):
        raise ConfigError(f"{n} GPUs asked but the host has {len(gpus)}")
    for key in (lambda g: g.root, lambda g: g.numa):
        fits = [grp for grp in _groups(gpus, key) if len(grp) >= n]
        if fits:
            best = min(fits, key=lambda grp: (len(grp), grp[0].index))  # the tightest group that fits
            return [g.index for g in best[:n]]
    # spread: whole NUMA nodes, largest first, then GPUs without a known node
    picked: list[Gpu] = []
    numa_groups = sorted(_groups(gpus, lambda g: g.numa), key=lambda grp: (-len(grp), grp[0].index))
    rest = [g for g in gpus if g.numa is None]
    for grp in numa_groups + [rest]:
        for g in grp:
            if len(picked) < n:
                picked.append(g)
    return sorted(g.index for g in picked)


def gpus_arg(indices: list[int]) -> str:
    """The runner's ``--gpus`` value for explicit indices (``0`` for CPU; one index takes a comma)."""
    if not indices:
        return "0"
    return ",".join(str(i) for i in indices) + ("," if len(indices) == 1 else "")


_ROOTS_SCRIPT = 'for b in "$@"; do printf "%s %s\\n" "$b" "$(readlink -f "/sys/bus/pci/devices/$b" 2>/dev/null)"; done'


def discover(remote: rmt.Remote, install: rmt.RunnerInstall, cpu_without_gpus: bool = False) -> dict:
    """The host's topology as recorded in sweep.json: ``{gpu_count, gpus: [Gpu...], unreadable, nvidia}``;
    NoGpuFound for a GPU host without a usable GPU, unless ``cpu_without_gpus`` (gpulab.sweep.cpu_without_gpus:
    it runs on the CPU)."""
    res = remote.run(install.argv("probe", "--json"), check=False, timeout=120)
    try:
        doc = read_probe(res.stdout, remote.name)
    except RunError:
        if res.code == 0:
            raise
        detail = (res.stderr.strip() or res.stdout.strip() or f"exit {res.code}").splitlines()[-1]
        raise RunError(f"{remote.name}: `runner probe` failed: {detail[:300]}") from None
    gpus, bad = from_probe(doc), unreadable(doc)
    if not cpu_without_gpus:
        require_gpus(remote.host, len(gpus), bad, doc.get("nvidia"))  # before anything else is asked of the host
    ids = {g.bus_id: sysfs_bus_id(g.bus_id) for g in gpus if sysfs_bus_id(g.bus_id or "")}
    roots: dict[str, str | None] = {}
    if ids:
        out = remote.run(["sh", "-c", _ROOTS_SCRIPT, "roots", *ids.values()], check=False, timeout=60).stdout
        by_sysfs = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
        roots = {bus: pcie_root(by_sysfs.get(sid, "")) for bus, sid in ids.items()}
        gpus = from_probe(doc, roots)
    return {
        "gpu_count": len(gpus),
        "gpus": [asdict(g) for g in gpus],
        "unreadable": bad,
        "nvidia": doc.get("nvidia"),
        "hostname": (doc.get("host") or {}).get("hostname"),
    }


def gpus_of(topology: dict) -> list[Gpu]:
    return [Gpu(**g) for g in topology.get("gpus", [])]
