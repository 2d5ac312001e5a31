"""A stand-in for the NVIDIA Management Library, for the probe and sampler tests.

NVML cannot exist on a machine without an NVIDIA driver, so these tests drive
the probe's per-field logic through this object. It answers with the real
pynvml exception classes (so "Not Supported" looks exactly as NVML says it),
models one H200-like GPU and one older GPU where several calls are not
supported, and can be told to fail a call with another error. The probe and
the sampler on a real GPU are covered by tests/gpu/.
"""

from __future__ import annotations

from types import SimpleNamespace

import pynvml


class FakeNvml:
    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

    def __init__(self, gpus):
        self.gpus = gpus  # list of dicts: fact name -> value, or an exception to raise
        self.calls = 0
        self.shutdowns = 0

    # -- helpers
    def _get(self, handle, key):
        self.calls += 1
        value = self.gpus[handle].get(key, pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED))
        if isinstance(value, BaseException):
            raise value
        return value

    # -- system
    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return "550.127.05"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 12040

    def nvmlSystemGetNVMLVersion(self):
        return "12.550.127.05"

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[i].get("lost"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return i

    # -- device
    def nvmlDeviceGetName(self, h):
        return self._get(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._get(h, "uuid")

    def nvmlDeviceGetSerial(self, h):
        return self._get(h, "serial")

    def nvmlDeviceGetVbiosVersion(self, h):
        return self._get(h, "vbios")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._get(h, "bus_id"))

    def nvmlDeviceGetMemoryInfo(self, h):
        total, used = self._get(h, "mem")
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._get(h, "gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._get(h, "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._get(h, "width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._get(h, "width_max")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._get(h, "power_limit_mw")

    def nvmlDeviceGetPowerUsage(self, h):
        return self._get(h, "power_mw")

    def nvmlDeviceGetEccMode(self, h):
        return self._get(h, "ecc_mode")

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return self._get(h, "ecc")[(kind, counter)]

    def nvmlDeviceGetRetiredPages(self, h, cause):
        return self._get(h, "retired")[cause]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._get(h, "retired_pending")

    def nvmlDeviceGetRemappedRows(self, h):
        return self._get(h, "remap")

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._get(h, "temp")

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        return self._get(h, "thresholds")[kind]

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._get(h, "clocks")[clock]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return self._get(h, "max_clocks")[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._get(h, "throttle")

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self._get(h, "pcie_replay")

    def nvmlDeviceGetNvLinkState(self, h, link):
        links = self._get(h, "nvlink")  # list of per-link dicts: up, and counters by NVML number
        if not 0 <= link < len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        state = links[link]["up"]
        if isinstance(state, BaseException):
            raise state
        return pynvml.NVML_FEATURE_ENABLED if state else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        value = self._get(h, "nvlink")[link].get(counter, pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED))
        if isinstance(value, BaseException):
            raise value
        return value

    def nvmlDeviceGetUtilizationRates(self, h):
        g, m = self._get(h, "util")
        return SimpleNamespace(gpu=g, memory=m)


def h200_like(**over):
    facts = {
        "name": "NVIDIA H200",
        "uuid": "GPU-00000000-1111-2222-3333-444444444444",
        "serial": "1650000000001",
        "vbios": "96.00.99.00.01",
        "bus_id": "00000000:1B:00.0",
        "mem": (143771 * 1024 * 1024, 512 * 1024 * 1024),
        "gen": 5,
        "gen_max": 5,
        "width": 16,
        "width_max": 16,
        "power_limit_mw": 700000,
        "power_mw": 74321,
        "ecc_mode": (1, 1),
        "ecc": {(1, 0): 0, (1, 1): 0, (0, 0): 0, (0, 1): 3},
        "remap": (0, 0, 0, 0),
        "temp": 31,
        "thresholds": {0: 97, 1: 90},
        "clocks": {1: 345, 2: 3201},
        "max_clocks": {1: 1980, 2: 3201},
        "throttle": 0x1,
        "util": (0, 0),
        "pcie_replay": 0,
        # 18 NVLink 4 links, all up, no errors (counters by nvmlNvLinkErrorCounter_t number)
        "nvlink": [{"up": True, 0: 0, 1: 0, 2: 0, 3: 0} for _ in range(18)],
    }
    facts.update(over)
    return facts


def old_gpu(**over):
    """A GPU and driver that support little: most calls answer Not Supported."""
    facts = {
        "name": b"Tesla T4",  # old bindings return bytes
        "uuid": "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "bus_id": b"00000000:3B:00.0",
        "mem": (15360 * 1024 * 1024, 0),
        "temp": 40,
        "serial": pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION),
    }
    facts.update(over)
    return facts
