"""NVML sampling into ``telemetry.csv``: one row per GPU per sample.

    sampler = Sampler([0, 1], run_dir / "telemetry.csv", interval_s=1.0)
    sampler.start()
    ...                       # the work
    sampler.stop()            # takes a last sample, closes the file

Columns (runner/README.md): ``time_s, gpu, uuid, power_w, temp_c,
sm_clock_mhz, mem_clock_mhz, util_gpu_pct, util_mem_pct, mem_used_mib,
throttle_reasons, pcie_gen, pcie_width``.

- ``time_s``: Unix time in seconds (3 decimals), so that samples line up
  with MLLOG ``time_ms`` and with the kernel log.
- ``gpu``: the index as the host numbers it (NVML order).
- ``throttle_reasons``: the active clock-event reasons, names as in
  ``runner.probe_gpu.THROTTLE_BITS`` joined by ``|``; empty when none.
- A value NVML cannot give (not supported, GPU gone) is an empty field.
- On a host without GPUs (or without a driver) the file holds the header
  only and the sampler does nothing else.

The sampler runs in a daemon thread and never raises into the caller: a
failure to read a GPU leaves empty fields, a failure to write stops sampling
and is kept in ``error``.
"""

from __future__ import annotations

import csv
import math
import statistics
import threading
import time
from pathlib import Path

from runner import rundir
from runner.probe_gpu import THROTTLE_BAD, NvmlUnavailable, decode_throttle, load_nvml

COLUMNS = [
    "time_s",
    "gpu",
    "uuid",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "util_gpu_pct",
    "util_mem_pct",
    "mem_used_mib",
    "throttle_reasons",
    "pcie_gen",
    "pcie_width",
]


def _call(nvml, name: str, *args):
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:
        return None


def _first(nvml, names: tuple[str, ...], *args):
    for name in names:
        value = _call(nvml, name, *args)
        if value is not None:
            return value
    return None


def sample_gpu(nvml, index: int, handle, uuid: str | None, now: float) -> dict:
    """One row for one GPU; each field on its own, None when unreadable."""
    power = _call(nvml, "nvmlDeviceGetPowerUsage", handle)
    util = _call(nvml, "nvmlDeviceGetUtilizationRates", handle)
    mem = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    mask = _first(nvml, ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), handle)
    reasons = decode_throttle(int(mask)) if mask is not None else None
    return {
        "time_s": round(now, 3),
        "gpu": index,
        "uuid": uuid,
        "power_w": round(power / 1000.0, 1) if power is not None else None,
        "temp_c": _call(nvml, "nvmlDeviceGetTemperature", handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)),
        "sm_clock_mhz": _call(nvml, "nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1)),
        "mem_clock_mhz": _call(nvml, "nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_MEM", 2)),
        "util_gpu_pct": getattr(util, "gpu", None) if util is not None else None,
        "util_mem_pct": getattr(util, "memory", None) if util is not None else None,
        "mem_used_mib": mem.used // (1024 * 1024) if mem is not None else None,
        "throttle_reasons": "|".join(reasons) if reasons is not None else None,
        "pcie_gen": _call(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "pcie_width": _call(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
    }


class Sampler:
    """Sample ``gpu_indices`` (None: all GPUs) every ``interval_s`` into ``path``."""

    def __init__(self, gpu_indices, path, interval_s: float = 1.0, nvml=None):
        if interval_s <= 0:
            raise ValueError(f"telemetry interval must be > 0 s, got {interval_s}")
        self.gpu_indices = None if gpu_indices is None else [int(i) for i in gpu_indices]
        self.path = Path(path)
        self.interval_s = float(interval_s)
        self._nvml = nvml
        self._owned = nvml is None
        self._handles: list[tuple[int, object, str | None]] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._file = None
        self._writer = None
        self.samples = 0  # sampling rounds written
        self.note: str | None = None  # why nothing is sampled, if so
        self.error: str | None = None  # why sampling stopped early, if so

    # -- life cycle
    def start(self) -> "Sampler":
        if self._thread is not None or self._file is not None:
            raise RuntimeError("Sampler already started")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = rundir.open_file(self.path, newline="")
        self._writer = csv.writer(self._file)
        self._writer.writerow(COLUMNS)
        self._file.flush()
        try:
            if self._nvml is None:
                self._nvml = load_nvml()
            count = int(self._nvml.nvmlDeviceGetCount())
            wanted = range(count) if self.gpu_indices is None else self.gpu_indices
            for i in wanted:
                if not 0 <= i < count:
                    self.note = f"GPU {i} does not exist ({count} GPU(s)); not sampled"
                    continue
                handle = self._nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _call(self._nvml, "nvmlDeviceGetUUID", handle)
                if isinstance(uuid, bytes):
                    uuid = uuid.decode()
                self._handles.append((i, handle, uuid))
            if not self._handles and self.note is None:
                self.note = "no GPU to sample"
        except NvmlUnavailable as exc:
            self.note = f"no NVIDIA driver/GPU found: {exc}"
            self._nvml = None
        except Exception as exc:
            self.note = f"no NVIDIA driver/GPU found: {exc}"
        if self._handles:
            self._sample_once()
            self._thread = threading.Thread(target=self._loop, name="gpulab-telemetry", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self.interval_s))
            self._thread = None
            if self.error is None and self._handles:
                self._sample_once()  # the state at the end of the work
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None
        if self._owned and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- work
    def _loop(self) -> None:
        next_t = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            if not self._sample_once():
                return
            next_t += self.interval_s
            if next_t < time.monotonic():  # we fell behind: do not burst
                next_t = time.monotonic() + self.interval_s

    def _sample_once(self) -> bool:
        now = time.time()
        try:
            for i, handle, uuid in self._handles:
                row = sample_gpu(self._nvml, i, handle, uuid, now)
                self._writer.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
            self._file.flush()
            self.samples += 1
            return True
        except Exception as exc:  # disk full, file closed...
            self.error = f"telemetry stopped: {exc}"
            return False


# --------------------------------------------------------------------------
# reading back


def _num(text: str):
    if text == "" or text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and "." not in text else value


def read_csv(path) -> list[dict]:
    """Rows of a telemetry.csv with numbers as numbers and empty fields as None."""
    rows = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row = {}
            for key in COLUMNS:
                value = raw.get(key)
                if key in ("uuid", "throttle_reasons"):
                    row[key] = value if value not in (None, "") else None
                else:
                    row[key] = _num(value)
            rows.append(row)
    return rows


def summarize(rows: list[dict], since: float | None = None, until: float | None = None) -> dict:
    """Per GPU: samples, power/temperature/clock statistics, throttle reasons seen.

    ``since``/``until`` (Unix seconds) keep only the samples of a window, such
    as the time a load test ran. Reasons in ``throttle_bad`` are those that
    mean power or heat held the GPU back (``runner.probe_gpu.THROTTLE_BAD``).
    """
    per: dict[int, list[dict]] = {}
    for row in rows:
        t = row.get("time_s")
        if since is not None and (t is None or t < since):
            continue
        if until is not None and (t is None or t > until):
            continue
        if row.get("gpu") is None:
            continue
        per.setdefault(int(row["gpu"]), []).append(row)

    def vals(rs, key):
        return [r[key] for r in rs if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]

    out = {}
    for gpu, rs in sorted(per.items()):
        power, temp, sm, mem = (
            vals(rs, "power_w"),
            vals(rs, "temp_c"),
            vals(rs, "sm_clock_mhz"),
            vals(rs, "mem_clock_mhz"),
        )
        util = vals(rs, "util_gpu_pct")
        reasons: dict[str, int] = {}
        for r in rs:
            for name in (r.get("throttle_reasons") or "").split("|"):
                if name:
                    reasons[name] = reasons.get(name, 0) + 1
        out[gpu] = {
            "uuid": next((r["uuid"] for r in rs if r.get("uuid")), None),
            "samples": len(rs),
            "power_w_max": max(power) if power else None,
            "power_w_mean": round(statistics.fmean(power), 1) if power else None,
            "temp_c_max": max(temp) if temp else None,
            "sm_clock_mhz_min": min(sm) if sm else None,
            "sm_clock_mhz_median": statistics.median(sm) if sm else None,
            "mem_clock_mhz_median": statistics.median(mem) if mem else None,
            "util_gpu_pct_mean": round(statistics.fmean(util), 1) if util else None,
            "pcie_gen_max": max(vals(rs, "pcie_gen")) if vals(rs, "pcie_gen") else None,
            "pcie_width_min": min(vals(rs, "pcie_width")) if vals(rs, "pcie_width") else None,
            "throttle_reasons": reasons,  # name -> number of samples it was active in
            "throttle_bad": sorted(n for n in reasons if n in THROTTLE_BAD),
            "throttle_bad_fraction": round(
                sum(1 for r in rs if set((r.get("throttle_reasons") or "").split("|")) & THROTTLE_BAD) / len(rs), 3
            ),
        }
    return out
