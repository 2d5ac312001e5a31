"""The probe's GPU facts through NVML: loading NVML, reading each field on its own (a field a
GPU, driver or nvidia-ml-py lacks is null, with its reason kept), the throttle reason bits, and
the NUMA placement from sysfs under a root (``/`` on a host; runner.probe passes its own).
The interconnect facts (NVLink, PCIe replay, AER) are runner.probe_link's."""

from __future__ import annotations

import ctypes

import re
from pathlib import Path
from typing import Any, Callable

from runner import stackread
from runner.probe_link import interconnect_facts

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


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace").strip("\x00").strip()
    return value


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
        raise NvmlUnavailable(f"NVML could not start: {nvml_reason(exc)}") from None
    return pynvml


def nvml_reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text


def _is_not_supported(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "not supported" in text or "not_supported" in text or "function not found" in text


class FieldReader:
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
            self.unavailable[field] = nvml_reason(last)
        return None


def _const(nvml, name: str, default: int) -> int:
    return getattr(nvml, name, default)


def _sysfs_pci(root: Path, bus_id: str | None) -> dict:
    if not bus_id:
        return {"numa_node": None, "cpu_affinity": None}
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", bus_id.strip())
    if not m:
        return {"numa_node": None, "cpu_affinity": None}
    domain = int(m.group(1) or "0", 16)
    name = f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"
    base = root / "sys/bus/pci/devices" / name
    node_text = stackread.read(base / "numa_node")
    node = None
    if node_text is not None:
        try:
            node = int(node_text.strip())
        except ValueError:
            node = None
        if node is not None and node < 0:
            node = None  # -1: the platform does not say
    cpus = stackread.read(base / "local_cpulist")
    return {"numa_node": node, "cpu_affinity": cpus.strip() if cpus else None}


def _mw_to_w(v) -> float:
    return round(v / 1000.0, 1)


def _power(r: FieldReader, handle) -> dict:
    return {
        "limit_w": r.get("power.limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle, convert=_mw_to_w),
        "default_limit_w": r.get(
            "power.default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit", handle, convert=_mw_to_w
        ),
        "max_limit_w": r.get(
            "power.max_limit_w",
            "nvmlDeviceGetPowerManagementLimitConstraints",
            handle,
            convert=lambda v: _mw_to_w(v[1]),
        ),
        "draw_w": r.get("power.draw_w", "nvmlDeviceGetPowerUsage", handle, convert=_mw_to_w),
    }


def _memory_health(r: FieldReader, handle, C) -> dict:
    """ECC mode and counters, retired pages and remapped rows: the ``ecc``, ``retired_pages`` and
    ``row_remap`` fields of a GPU."""
    ecc_mode = r.get("ecc", "nvmlDeviceGetEccMode", handle, convert=lambda v: v)

    def ecc_count(field, err_type, counter):
        return r.get(
            field,
            "nvmlDeviceGetTotalEccErrors",
            handle,
            C(err_type[0], err_type[1]),
            C(counter[0], counter[1]),
            convert=int,
        )

    uncorr = ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    corr = ("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    volatile = ("NVML_VOLATILE_ECC", 0)
    aggregate = ("NVML_AGGREGATE_ECC", 1)

    retired_sbe = r.get(
        "retired_pages_sbe",
        "nvmlDeviceGetRetiredPages",
        handle,
        C("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
        convert=len,
    )
    retired_dbe = r.get(
        "retired_pages_dbe",
        "nvmlDeviceGetRetiredPages",
        handle,
        C("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1),
        convert=len,
    )
    retired_pending = r.get(
        "retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", handle, convert=lambda v: bool(v)
    )
    remap = r.get("row_remap", "nvmlDeviceGetRemappedRows", handle, convert=lambda v: tuple(v))
    return {
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
    }


def _clocks(r: FieldReader, handle, C) -> dict:
    return {
        "sm_mhz": r.get("clocks.sm_mhz", "nvmlDeviceGetClockInfo", handle, C("NVML_CLOCK_SM", 1), convert=int),
        "mem_mhz": r.get("clocks.mem_mhz", "nvmlDeviceGetClockInfo", handle, C("NVML_CLOCK_MEM", 2), convert=int),
        "sm_max_mhz": r.get(
            "clocks.sm_max_mhz", "nvmlDeviceGetMaxClockInfo", handle, C("NVML_CLOCK_SM", 1), convert=int
        ),
        "mem_max_mhz": r.get(
            "clocks.mem_max_mhz", "nvmlDeviceGetMaxClockInfo", handle, C("NVML_CLOCK_MEM", 2), convert=int
        ),
    }


def gpu_facts(nvml, index: int, root: Path = Path("/")) -> dict:
    """All facts of one GPU; every field read on its own."""
    r = FieldReader(nvml)
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    C = lambda name, default: _const(nvml, name, default)  # noqa: E731

    b_to_mib = lambda v: v // (1024 * 1024)  # noqa: E731

    pci = r.get("pci_bus_id", "nvmlDeviceGetPciInfo", handle, convert=lambda p: _text(getattr(p, "busId", None)))
    mem = r.get("memory_total_mib", "nvmlDeviceGetMemoryInfo", handle, convert=lambda m: m)
    memory_health = _memory_health(r, handle, C)
    throttle_mask = r.get(
        "throttle_reasons",
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        handle,
        convert=int,
    )
    numa = _sysfs_pci(root, pci)
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
        "power": _power(r, handle),
        **memory_health,
        "temperature_c": r.get(
            "temperature_c", "nvmlDeviceGetTemperature", handle, C("NVML_TEMPERATURE_GPU", 0), convert=int
        ),
        "temperature_slowdown_c": r.get(
            "temperature_slowdown_c",
            "nvmlDeviceGetTemperatureThreshold",
            handle,
            C("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1),
            convert=int,
        ),
        "temperature_shutdown_c": r.get(
            "temperature_shutdown_c",
            "nvmlDeviceGetTemperatureThreshold",
            handle,
            C("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", 0),
            convert=int,
        ),
        "clocks": _clocks(r, handle, C),
        "throttle_mask": throttle_mask,
        "throttle_reasons": decode_throttle(throttle_mask),
        "pstate": r.get("pstate", "nvmlDeviceGetPerformanceState", handle, convert=lambda v: f"P{int(v)}"),
        "utilization_pct": r.get(
            "utilization_pct", "nvmlDeviceGetUtilizationRates", handle, convert=lambda u: int(u.gpu)
        ),
        "persistence_mode": r.get(
            "persistence_mode", "nvmlDeviceGetPersistenceMode", handle, convert=lambda v: bool(v)
        ),
        "compute_mode": r.get("compute_mode", "nvmlDeviceGetComputeMode", handle, convert=int),
        "mig_mode": r.get("mig_mode", "nvmlDeviceGetMigMode", handle, convert=lambda v: bool(v[0])),
        "numa_node": numa["numa_node"],
        "cpu_affinity": numa["cpu_affinity"],
    }
    link = interconnect_facts(nvml, handle, pci, root, r.unavailable)
    gpu["pcie"]["replay_count"] = link["pcie_replay_count"]
    gpu["nvlink"] = link["nvlink"]
    gpu["aer"] = link["aer"]
    gpu["fabric"] = fabric_facts(nvml, handle, r.unavailable)
    gpu["unavailable"] = dict(sorted(r.unavailable.items()))
    return gpu


# NVML's GPU fabric registration (nvml.h nvmlGpuFabricInfo_t: state NOT_SUPPORTED 0, NOT_STARTED 1,
# IN_PROGRESS 2, COMPLETED 3; status, an nvmlReturn_t, "must be checked only if state returns complete"):
# on an NVSwitch system a GPU whose registration did not complete cannot run CUDA work across the fabric.
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


def fabric_facts(nvml, handle, unavailable: dict) -> dict | None:
    """{state, state_name, status, clique_id} of the GPU's fabric registration; None where NVML has none
    (an older driver or nvidia-ml-py: the reason in ``unavailable['fabric']``)."""
    try:
        info = nvml.c_nvmlGpuFabricInfo_t()
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except AttributeError:
        unavailable["fabric"] = "not in this nvidia-ml-py"
        return None
    except Exception as exc:  # NVML's errors, each said as a reason
        unavailable["fabric"] = nvml_reason(exc)
        return None
    state = int(info.state) & 0xFF
    return {
        "state": state,
        "state_name": FABRIC_STATES.get(state, f"state {state}"),
        "status": int(info.status),
        "clique_id": int(info.cliqueId),
    }


def parse_indices(gpu_indices, count: int) -> list[int]:
    if gpu_indices is None:
        return list(range(count))
    out = []
    for i in gpu_indices:
        i = int(i)
        if not 0 <= i < count:
            raise ValueError(f"GPU index {i} does not exist on this host ({count} GPU(s))")
        out.append(i)
    return out
