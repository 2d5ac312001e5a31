"""Energy and average power of a run from its telemetry.csv (runner/README.md):
power_w integrated over time_s (trapezoids) per GPU of the run, summed;
average power = the sum of the per-GPU means. Read with bounds (lab.core.bounded): at most
limits.TELEMETRY_BYTES, and only where no line is longer than ROW_BYTES and there are at most ROWS lines,
so that what parsing holds stays near the file's size (a 1 GiB file of one line held 12 GiB, and past 128 KiB
a line was csv's traceback).
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from pathlib import Path

import numpy as np

from lab.core import bounded
from lab.core import limits

ROW_BYTES = 4 << 10  # a row of the runner's 13 columns is about 150 bytes
ROWS = 1 << 24  # one row per GPU per second: 8 GPUs for 24 days

# --------------------------------------------------------------------------
# Telemetry
# --------------------------------------------------------------------------


def read_telemetry(
    path: Path, gpus: list[int] | None = None, data: bytes | None = None
) -> tuple[float | None, float | None, str | None]:
    """(energy J, average power W, note) from a telemetry.csv.

    Energy is the trapezoid integral of power_w over time_s for each GPU, summed
    over the GPUs of the run (all GPUs in the file when none of the run's
    indices appear there). Average power is the sum of each GPU's energy over
    its sampled span. A GPU with fewer than two samples contributes nothing;
    rows with a missing or non-numeric time or power are left out.
    """
    if data is None:
        try:
            data = bounded.read_bytes(path, root=Path(path).parent, limit=limits.TELEMETRY_BYTES)
        except bounded.Unreadable as exc:
            return None, None, f"telemetry.csv {exc.reason}"
    shape = _shape_problem(data)
    if shape:
        return None, None, f"telemetry.csv {shape}: not read"
    first, _, _ = data.partition(b"\n")
    header = [h.strip() for h in first.decode("utf-8", errors="replace").strip().split(",")]
    if header == [""]:
        return None, None, None
    if not {"time_s", "gpu", "power_w"} <= set(header):
        return None, None, "telemetry.csv lacks time_s, gpu or power_w"
    cols = (header.index("time_s"), header.index("gpu"), header.index("power_w"))
    series = _telemetry_numpy(data, cols)
    if series is None:
        try:
            series = _telemetry_python(data, cols)
        except csv.Error as exc:  # Python 3.10's "line contains NUL", say
            return None, None, f"telemetry.csv is not CSV ({exc}): not read"
    if gpus:
        wanted = {str(g) for g in gpus}
        if wanted & series.keys():
            series = {g: s for g, s in series.items() if g in wanted}
    energy = power = 0.0
    used = 0
    for t, p in series.values():
        if len(t) < 2:
            continue
        order = np.argsort(t, kind="stable")
        t, p = t[order], p[order]
        span = float(t[-1] - t[0])
        if span <= 0:
            continue
        e = float(np.sum(np.diff(t) * (p[1:] + p[:-1]) / 2.0))
        energy += e
        power += e / span
        used += 1
    if not used:
        return None, None, None
    return energy, power, None


def _shape_problem(data: bytes, chunk: int = 8 << 20) -> str | None:
    """Why ``data`` is no telemetry to parse: more than ROWS lines, or a line longer than ROW_BYTES (looked for
    ``chunk`` bytes at a time, so that the search itself holds little)."""
    rows = data.count(b"\n")
    if rows > ROWS:
        return f"has {rows} lines, more than the {ROWS} of telemetry"
    arr, start = np.frombuffer(data, dtype=np.uint8), 0  # start: where the line being measured began
    longest = 0
    for lo in range(0, arr.size, chunk):
        ends = np.flatnonzero(arr[lo : lo + chunk] == 10) + lo
        if ends.size:
            longest = max(longest, int((ends - np.concatenate(([start], ends[:-1] + 1))).max()))
            start = int(ends[-1]) + 1
        if max(longest, min(lo + chunk, arr.size) - start) > ROW_BYTES:
            return f"has a line longer than the {ROW_BYTES} bytes of a telemetry row"
    return None


def _gpu_key(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _telemetry_numpy(data: bytes, cols) -> dict | None:
    """Fast path: every row numeric in the three columns. None when not so."""
    it, ig, ip = cols
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.loadtxt(
                io.BytesIO(data), delimiter=",", skiprows=1, usecols=(it, ig, ip), ndmin=2, quotechar='"', dtype=float
            )
    except (ValueError, IndexError):
        return None
    a = a[np.isfinite(a).all(axis=1)]
    out = {}
    for g in np.unique(a[:, 1]):
        rows = a[a[:, 1] == g]
        out[_gpu_key(g)] = (rows[:, 0], rows[:, 2])
    return out


def _telemetry_python(data: bytes, cols) -> dict:
    it, ig, ip = cols
    need = max(cols)
    series: dict[str, tuple[list, list]] = {}
    reader = csv.reader(line.decode("utf-8", errors="replace") for line in io.BytesIO(data))  # a line at a time
    next(reader, None)
    for row in reader:
        if len(row) <= need:
            continue
        try:
            t, p = float(row[it]), float(row[ip])
        except ValueError:
            continue
        if not (math.isfinite(t) and math.isfinite(p)):
            continue
        g = row[ig].strip()
        try:
            g = _gpu_key(float(g))
        except ValueError:
            pass
        ts, ps = series.setdefault(g, ([], []))
        ts.append(t)
        ps.append(p)
    return {g: (np.array(ts), np.array(ps)) for g, (ts, ps) in series.items()}
