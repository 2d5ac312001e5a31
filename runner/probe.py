"""``python -m runner probe``: one JSON document describing this host.

Host, OS, kernel, CPU, memory, Python, the NVIDIA stack (driver, CUDA,
cuDNN, NCCL), framework versions and, per GPU, the facts that hardware
validation needs (PCIe link, ECC, retired pages, row remaps, power limit,
temperature, clocks, throttle reasons, NUMA placement).

Rules this module keeps:
- It imports no deep-learning framework. Framework versions come from
  ``importlib.metadata``; torch's own view of cuDNN/NCCL is used only when
  torch is already imported by the caller.
- Where the CUDA toolkit, cuDNN and NCCL headers and libraries are, and how a
  version is read from each, are runner.stackread's rules (shared with the
  audit's Ansible module).
- Every field is read on its own: a call that is not supported (old GPU,
  old driver, old nvidia-ml-py, missing file) gives ``null`` for that field
  and never stops the rest. The reason is kept in the GPU's ``unavailable``
  map unless it is a plain "not supported".
- Without a driver or a GPU the document still comes out, with ``gpus: []``
  and ``nvidia: "no NVIDIA driver/GPU found: <reason>"``. With GPUs,
  ``nvidia`` is ``null``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import socket
import sys
from pathlib import Path
from typing import Any, Callable

from runner import stackread

SCHEMA = 1

# Roots the probe reads; tests point them at a temporary tree.
ROOT = Path(os.environ.get("GPULAB_PROBE_ROOT", "/"))

# Clock event / throttle reason bits (nvml.h). Names are the suffix of
# nvmlClocksEventReason* / nvmlClocksThrottleReason*.
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the GPU is held back by power or heat (not by idling
# or by a clock the operator chose).
THROTTLE_BAD = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


def decode_throttle(mask: int | None) -> list[str] | None:
    """Names of the set bits of an NVML clock-event mask (unknown bits as hex)."""
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_BITS)
    if rest:
        names.append(hex(rest))
    return names


# --------------------------------------------------------------------------
# small readers


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _p(rel: str) -> Path:
    return ROOT / rel


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace").strip("\x00").strip()
    return value


def os_release() -> dict:
    text = _read(_p("etc/os-release")) or _read(_p("usr/lib/os-release"))
    fields: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            fields[key.strip()] = value.strip().strip('"').strip("'")
    return {
        "id": fields.get("ID"),
        "version_id": fields.get("VERSION_ID"),
        "pretty_name": fields.get("PRETTY_NAME"),
        "id_like": fields.get("ID_LIKE"),
    }


def cpu_info() -> dict:
    model = None
    sockets: set[str] = set()
    for line in (_read(_p("proc/cpuinfo")) or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "physical id":
            sockets.add(value.strip())
    return {
        "model": model or platform.processor() or None,
        "logical_cpus": os.cpu_count(),
        "sockets": len(sockets) or None,
        "arch": platform.machine() or None,
    }


def memory_info() -> dict:
    info: dict[str, int] = {}
    for line in (_read(_p("proc/meminfo")) or "").splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if m:
            info[m.group(1)] = int(m.group(2))
    total = info.get("MemTotal")
    avail = info.get("MemAvailable")
    return {
        "total_mib": total // 1024 if total is not None else None,
        "available_mib": avail // 1024 if avail is not None else None,
    }


def dist_version(name: str) -> str | None:
    """Installed version of a distribution, without importing it."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken dist-info must not stop the probe
        return None


def framework_versions() -> dict:
    tf = None
    for dist in ("tensorflow", "tensorflow-gpu", "tensorflow-cpu", "tf-nightly"):
        tf = dist_version(dist)
        if tf:
            break
    return {
        "torch": dist_version("torch"),
        "tensorflow": tf,
        "mlperf_logging": dist_version("mlperf-logging") or dist_version("mlperf_logging"),
        "nvidia_ml_py": dist_version("nvidia-ml-py"),
        "numpy": dist_version("numpy"),
    }


# --------------------------------------------------------------------------
# stack: driver, CUDA, cuDNN, NCCL


def _header_versions(patterns, defines) -> list[dict]:
    return [{"version": v, "source": f"header {path}"} for path, v in stackread.headers(ROOT, patterns, defines)]


def _lib_versions(prefix: str) -> list[dict]:
    """``libX.so.A.B.C`` files -> versions (in the order of stackread.LIB_DIRS)."""
    return [{"version": v, "source": f"library {path}"} for path, v in stackread.libraries(ROOT, prefix)]


def cudnn_versions() -> list[dict]:
    found = []
    torch_mod = sys.modules.get("torch")  # only if the caller imported it
    if torch_mod is not None:
        try:
            v = torch_mod.backends.cudnn.version()
            if v:
                major, minor, patch = (v // 10000, (v % 10000) // 100, v % 100) if v >= 90000 else (v // 1000, (v % 1000) // 100, v % 100)
                found.append({"version": f"{major}.{minor}.{patch}", "source": "torch.backends.cudnn"})
        except Exception:
            pass
    for dist in stackread.DISTS["cudnn"]:
        v = dist_version(dist)
        if v:
            found.append({"version": v, "source": f"python package {dist}"})
    found.extend(_header_versions(stackread.CUDNN_HEADERS, stackread.CUDNN_DEFINES))
    found.extend(_lib_versions("libcudnn"))
    return found


def nccl_versions() -> list[dict]:
    found = []
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None:
        try:
            v = torch_mod.cuda.nccl.version()
            if isinstance(v, tuple):
                found.append({"version": ".".join(map(str, v)), "source": "torch.cuda.nccl"})
            elif v:
                found.append({"version": f"{v // 1000}.{(v % 1000) // 100}.{v % 100}", "source": "torch.cuda.nccl"})
        except Exception:
            pass
    for dist in stackread.DISTS["nccl"]:
        v = dist_version(dist)
        if v:
            found.append({"version": v, "source": f"python package {dist}"})
    found.extend(_header_versions(stackread.NCCL_HEADERS, stackread.NCCL_DEFINES))
    found.extend(_lib_versions("libnccl"))
    return found


def cuda_toolkit_version() -> dict | None:
    version, source = stackread.cuda_version(_p(stackread.CUDA_HOME))
    if version:
        return {"version": version, "source": source}
    # no system toolkit: the CUDA a pip-installed framework brings (PyTorch's build, the runtime wheel)
    torch_mod = sys.modules.get("torch")
    try:
        v = torch_mod.version.cuda if torch_mod is not None else None
    except Exception:
        v = None
    if v:
        return {"version": str(v), "source": "torch.version.cuda"}
    for dist in stackread.DISTS["cuda"]:
        v = dist_version(dist)
        if v:
            return {"version": v, "source": f"python package {dist}"}
    return None


def proc_driver_version() -> str | None:
    text = _read(_p("proc/driver/nvidia/version"))
    if not text:
        return None
    m = re.search(r"Kernel Module(?: for [\w-]+)?\s+([\d.]+)", text) or re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", text)
    return m.group(1) if m else None


# --------------------------------------------------------------------------
# NVML


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why."""


def load_nvml():
    """Import and initialise NVML; raise NvmlUnavailable with a plain reason."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise NvmlUnavailable(f"NVML could not start: {_nvml_reason(exc)}") from None
    return pynvml


def _nvml_reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text


def _is_not_supported(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "not supported" in text or "not_supported" in text or "function not found" in text


class _Reader:
    """Runs NVML calls one field at a time, remembering why a field is null."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.unavailable: dict[str, str] = {}

    def get(self, field: str, fn_name: str | tuple[str, ...], *args, convert: Callable | None = None):
        names = (fn_name,) if isinstance(fn_name, str) else fn_name
        last: BaseException | None = None
        for name in names:
            fn = getattr(self.nvml, name, None)
            if fn is None:
                continue
            try:
                value = fn(*args)
            except Exception as exc:
                last = exc
                continue
            try:
                return convert(value) if convert else _text(value)
            except Exception as exc:
                last = exc
                continue
        if last is None:
            self.unavailable[field] = "not in this nvidia-ml-py"
        elif not _is_not_supported(last):
            self.unavailable[field] = _nvml_reason(last)
        return None


def _const(nvml, name: str, default: int) -> int:
    return getattr(nvml, name, default)


def _sysfs_pci(bus_id: str | None) -> dict:
    if not bus_id:
        return {"numa_node": None, "cpu_affinity": None}
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", bus_id.strip())
    if not m:
        return {"numa_node": None, "cpu_affinity": None}
    domain = int(m.group(1) or "0", 16)
    name = f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"
    base = _p("sys/bus/pci/devices") / name
    node_text = _read(base / "numa_node")
    node = None
    if node_text is not None:
        try:
            node = int(node_text.strip())
        except ValueError:
            node = None
        if node is not None and node < 0:
            node = None  # -1: the platform does not say
    cpus = _read(base / "local_cpulist")
    return {"numa_node": node, "cpu_affinity": cpus.strip() if cpus else None}


def gpu_facts(nvml, index: int) -> dict:
    """All facts of one GPU; every field read on its own."""
    r = _Reader(nvml)
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    C = lambda name, default: _const(nvml, name, default)  # noqa: E731

    mw_to_w = lambda v: round(v / 1000.0, 1)  # noqa: E731
    b_to_mib = lambda v: v // (1024 * 1024)  # noqa: E731

    pci = r.get("pci_bus_id", "nvmlDeviceGetPciInfo", handle, convert=lambda p: _text(getattr(p, "busId", None)))
    mem = r.get("memory_total_mib", "nvmlDeviceGetMemoryInfo", handle, convert=lambda m: m)
    ecc_mode = r.get("ecc", "nvmlDeviceGetEccMode", handle, convert=lambda v: v)

    def ecc_count(field, err_type, counter):
        return r.get(field, "nvmlDeviceGetTotalEccErrors", handle, C(err_type[0], err_type[1]), C(counter[0], counter[1]), convert=int)

    uncorr = ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    corr = ("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    volatile = ("NVML_VOLATILE_ECC", 0)
    aggregate = ("NVML_AGGREGATE_ECC", 1)

    retired_sbe = r.get(
        "retired_pages_sbe", "nvmlDeviceGetRetiredPages", handle,
        C("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0), convert=len,
    )
    retired_dbe = r.get(
        "retired_pages_dbe", "nvmlDeviceGetRetiredPages", handle,
        C("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1), convert=len,
    )
    retired_pending = r.get(
        "retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", handle, convert=lambda v: bool(v)
    )
    remap = r.get("row_remap", "nvmlDeviceGetRemappedRows", handle, convert=lambda v: tuple(v))
    throttle_mask = r.get(
        "throttle_reasons",
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        handle, convert=int,
    )
    numa = _sysfs_pci(pci)
    if numa["numa_node"] is None:
        numa["numa_node"] = r.get("numa_node", "nvmlDeviceGetNumaNodeId", handle, convert=int)

    gpu = {
        "index": index,
        "name": r.get("name", "nvmlDeviceGetName", handle),
        "uuid": r.get("uuid", "nvmlDeviceGetUUID", handle),
        "serial": r.get("serial", "nvmlDeviceGetSerial", handle),
        "board_part_number": r.get("board_part_number", "nvmlDeviceGetBoardPartNumber", handle),
        "vbios": r.get("vbios", "nvmlDeviceGetVbiosVersion", handle),
        "pci_bus_id": pci,
        "memory_total_mib": b_to_mib(mem.total) if mem is not None else None,
        "memory_used_mib": b_to_mib(mem.used) if mem is not None else None,
        "pcie": {
            "gen_current": r.get("pcie.gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", handle, convert=int),
            "gen_max": r.get("pcie.gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", handle, convert=int),
            "gen_gpu_max": r.get("pcie.gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle, convert=int),
            "width_current": r.get("pcie.width_current", "nvmlDeviceGetCurrPcieLinkWidth", handle, convert=int),
            "width_max": r.get("pcie.width_max", "nvmlDeviceGetMaxPcieLinkWidth", handle, convert=int),
        },
        "power": {
            "limit_w": r.get("power.limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle, convert=mw_to_w),
            "default_limit_w": r.get("power.default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit", handle, convert=mw_to_w),
            "max_limit_w": r.get(
                "power.max_limit_w", "nvmlDeviceGetPowerManagementLimitConstraints", handle, convert=lambda v: mw_to_w(v[1])
            ),
            "draw_w": r.get("power.draw_w", "nvmlDeviceGetPowerUsage", handle, convert=mw_to_w),
        },
        "ecc": {
            "enabled": bool(ecc_mode[0]) if ecc_mode is not None else None,
            "pending_enabled": bool(ecc_mode[1]) if ecc_mode is not None else None,
            "uncorrected_volatile": ecc_count("ecc.uncorrected_volatile", uncorr, volatile),
            "uncorrected_aggregate": ecc_count("ecc.uncorrected_aggregate", uncorr, aggregate),
            "corrected_volatile": ecc_count("ecc.corrected_volatile", corr, volatile),
            "corrected_aggregate": ecc_count("ecc.corrected_aggregate", corr, aggregate),
        },
        "retired_pages": {
            "single_bit": retired_sbe,
            "double_bit": retired_dbe,
            "pending": retired_pending,
        },
        "row_remap": {
            "correctable": int(remap[0]) if remap else None,
            "uncorrectable": int(remap[1]) if remap else None,
            "pending": bool(remap[2]) if remap else None,
            "failure": bool(remap[3]) if remap else None,
        },
        "temperature_c": r.get("temperature_c", "nvmlDeviceGetTemperature", handle, C("NVML_TEMPERATURE_GPU", 0), convert=int),
        "temperature_slowdown_c": r.get(
            "temperature_slowdown_c", "nvmlDeviceGetTemperatureThreshold", handle,
            C("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1), convert=int,
        ),
        "temperature_shutdown_c": r.get(
            "temperature_shutdown_c", "nvmlDeviceGetTemperatureThreshold", handle,
            C("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", 0), convert=int,
        ),
        "clocks": {
            "sm_mhz": r.get("clocks.sm_mhz", "nvmlDeviceGetClockInfo", handle, C("NVML_CLOCK_SM", 1), convert=int),
            "mem_mhz": r.get("clocks.mem_mhz", "nvmlDeviceGetClockInfo", handle, C("NVML_CLOCK_MEM", 2), convert=int),
            "sm_max_mhz": r.get("clocks.sm_max_mhz", "nvmlDeviceGetMaxClockInfo", handle, C("NVML_CLOCK_SM", 1), convert=int),
            "mem_max_mhz": r.get("clocks.mem_max_mhz", "nvmlDeviceGetMaxClockInfo", handle, C("NVML_CLOCK_MEM", 2), convert=int),
        },
        "throttle_mask": throttle_mask,
        "throttle_reasons": decode_throttle(throttle_mask),
        "pstate": r.get("pstate", "nvmlDeviceGetPerformanceState", handle, convert=lambda v: f"P{int(v)}"),
        "utilization_pct": r.get("utilization_pct", "nvmlDeviceGetUtilizationRates", handle, convert=lambda u: int(u.gpu)),
        "persistence_mode": r.get("persistence_mode", "nvmlDeviceGetPersistenceMode", handle, convert=lambda v: bool(v)),
        "compute_mode": r.get("compute_mode", "nvmlDeviceGetComputeMode", handle, convert=int),
        "mig_mode": r.get("mig_mode", "nvmlDeviceGetMigMode", handle, convert=lambda v: bool(v[0])),
        "numa_node": numa["numa_node"],
        "cpu_affinity": numa["cpu_affinity"],
    }
    gpu["unavailable"] = dict(sorted(r.unavailable.items()))
    return gpu


def _parse_indices(gpu_indices, count: int) -> list[int]:
    if gpu_indices is None:
        return list(range(count))
    out = []
    for i in gpu_indices:
        i = int(i)
        if not 0 <= i < count:
            raise ValueError(f"GPU index {i} does not exist on this host ({count} GPU(s))")
        out.append(i)
    return out


# --------------------------------------------------------------------------
# the document


def collect(gpu_indices=None, nvml=None) -> dict:
    """The probe document. ``gpu_indices``: which GPUs (default all).

    ``nvml`` is an initialised NVML module; by default it is loaded here.
    """
    uname = platform.uname()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "collected_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "host": {"hostname": socket.gethostname(), "fqdn": None},
        "os": os_release(),
        "kernel": uname.release,
        "cpu": cpu_info(),
        "memory": memory_info(),
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "stack": {},
        "frameworks": framework_versions(),
        "nvidia": None,
        "gpu_count": 0,
        "gpus": [],
    }
    try:
        doc["host"]["fqdn"] = socket.getfqdn()
    except Exception:
        pass

    cudnn = cudnn_versions()
    nccl = nccl_versions()
    toolkit = cuda_toolkit_version()
    stack = {
        "driver": None,
        "driver_source": None,
        "cuda_driver": None,
        "cuda_toolkit": toolkit["version"] if toolkit else None,
        "cuda_toolkit_source": toolkit["source"] if toolkit else None,
        "cudnn": cudnn[0]["version"] if cudnn else None,
        "cudnn_found": cudnn,
        "nccl": nccl[0]["version"] if nccl else None,
        "nccl_found": nccl,
        "nvml": None,
    }
    doc["stack"] = stack

    owned = nvml is None
    try:
        if nvml is None:
            nvml = load_nvml()
    except NvmlUnavailable as exc:
        stack["driver"] = proc_driver_version()
        stack["driver_source"] = "/proc/driver/nvidia/version" if stack["driver"] else None
        doc["nvidia"] = f"no NVIDIA driver/GPU found: {exc}"
        return doc
    try:
        r = _Reader(nvml)
        stack["driver"] = r.get("driver", "nvmlSystemGetDriverVersion")
        if stack["driver"]:
            stack["driver_source"] = "NVML"
        else:
            stack["driver"] = proc_driver_version()
            stack["driver_source"] = "/proc/driver/nvidia/version" if stack["driver"] else None
        stack["cuda_driver"] = r.get(
            "cuda_driver",
            ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
            convert=lambda v: f"{int(v) // 1000}.{(int(v) % 1000) // 10}",
        )
        stack["nvml"] = r.get("nvml", "nvmlSystemGetNVMLVersion")
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            doc["nvidia"] = f"no NVIDIA driver/GPU found: NVML cannot count GPUs: {_nvml_reason(exc)}"
            return doc
        doc["gpu_count"] = count
        if count == 0:
            doc["nvidia"] = "no NVIDIA driver/GPU found: the driver reports 0 GPUs"
            return doc
        for i in _parse_indices(gpu_indices, count):
            try:
                doc["gpus"].append(gpu_facts(nvml, i))
            except Exception as exc:  # the handle itself failed (GPU fell off the bus)
                doc["gpus"].append({"index": i, "error": f"GPU {i} cannot be read: {_nvml_reason(exc)}"})
        return doc
    finally:
        if owned:
            try:
                nvml.nvmlShutdown()
            except Exception:
                pass


# --------------------------------------------------------------------------
# command line (runner/cli.py)


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print compact JSON (default: indented JSON)")
    parser.add_argument("--gpus", default="all", help="all (default) or comma-separated GPU indices")


def parse_gpu_list(text: str) -> list[int] | None:
    from runner.cli import UsageError

    text = (text or "all").strip()
    if text == "all":
        return None
    try:
        out = [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise UsageError(f"runner probe: --gpus {text!r} is not 'all' or a list of indices such as 0,2") from None
    if not out or any(i < 0 for i in out):
        raise UsageError(f"runner probe: --gpus {text!r} is not 'all' or a list of indices such as 0,2")
    return out


def main(args) -> int:
    from runner.cli import UsageError

    indices = parse_gpu_list(getattr(args, "gpus", "all"))
    try:
        doc = collect(indices)
    except ValueError as exc:
        raise UsageError(f"runner probe: {exc}") from None
    if args.json:
        print(json.dumps(doc, sort_keys=True, separators=(",", ":")))
    else:
        print(json.dumps(doc, sort_keys=True, indent=2))
    return 0
