"""Find training runs in any tree of logs and read each into one ``Run``.

What is read
------------
- gpulab run directories (runner/README.md): a folder with ``status.json`` (and
  ``manifest.json``, ``mllog.log``, ``telemetry.csv``, ``SHA256SUMS``). The
  folder is not searched further.
- Plain MLPerf result files anywhere else: every ``*.log``, ``*.txt``, ``*.out``,
  ``*.err`` or extension-less file that holds ``:::MLLOG {json}`` lines (the
  mlperf-logging format) or ``:::MLPv0.5.0 <benchmark> <time> (<file>:<line>)
  <key>[: <json>]`` lines (the v0.5 format). The prefix may sit anywhere in a
  line (ranks and timestamps in front are fine).
- ``sweep.json`` of a sweep directory ``results/<sweep>/``: host facts for its
  run directories ``<host>/<run id>/``, and planned runs that left no run
  directory (listed as skipped).

Per run
-------
time to train  MLLOG: run_start to run_stop when run_stop's status is
               "success". v0.5: run_start to run_stop when run_stop carries
               {"success": true}; without that flag, run_start to the first
               eval_accuracy that meets eval_target (the logged one, else the
               target in lab/data/benchmarks.yml).
epochs         to converge (or done, for a failed run): the number of distinct
               epochs started up to that point (MLLOG epoch_start epoch_num, or
               the epoch_count of block_start; v0.5 train_epoch); failing those,
               the epoch number of the last eval_accuracy as logged.
throughput     samples/s: status.json result.samples_per_s for a run directory;
               else samples per epoch (train_samples / preproc_num_train_examples,
               else benchmarks.yml) x epochs timed / training time of those
               epochs (epoch_start..epoch_stop, block_start..block_stop, v0.5
               train_epoch..eval_start); else x epochs / whole run time. The
               basis is recorded with each run.
energy         telemetry.csv: power_w integrated over time_s (trapezoids) per
               GPU of the run, summed; average power = sum of per-GPU means.

System facts (device, GPU count, stack)
---------------------------------------
run directory  device: the probe's GPU names in manifest.json (of the run's GPU
               indices), else sweep.json's host gpu_model, else folder names;
               GPU count: status.json gpus x nnodes (no GPUs: "CPU", 0); stack:
               a stack profile name in the probe's stack facts, else sweep.json's
               host stack (the inventory's gpulab_stack), else the probe's
               versions ("driver D, cuda C, torch T"). All versions are kept per
               run (stack_versions) and shown by --compare. host: the sweep's
               <host>/ folder, else the probe's hostname. Directories of nodes
               other than 0 of a multi-host run are listed as skipped (node 0's
               directory is the run).
plain log      an MLPerf submission's ``systems/<system>.json`` next to
               ``results/<system>/...`` (accelerator_model_name,
               accelerators_per_node x number_of_nodes, framework), else the log's
               submission_platform ("4xNVIDIA T4"), else the folder names from the
               file up to the input path ("4xT4", "T4_x4", "v100-3gpu", "2gpus").
               Stack: the systems file's framework, else "unknown".

Bad input never stops a report: a file or folder that cannot be used becomes a
``Skipped`` entry with a one-line reason. A path that does not exist, or holds
no run directory and no log file at all, is a ``ConfigError``.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
import math
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from lab import bounded, checksums, limits, paths
from lab.errors import ConfigError
from lab.mlperf import Rules, default_rules

MLLOG_PREFIX = ":::MLLOG"
V05_PREFIX = ":::MLPv0.5.0"
LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ""}
MAX_LOG_BYTES = limits.LOG_BYTES
KEEP_BYTES = {"mllog.log": limits.LOG_BYTES, "telemetry.csv": limits.TELEMETRY_BYTES}

_JSON = json.JSONDecoder()
_V05_RE = re.compile(
    r":::MLPv0\.5\.0\s+(\S+)\s+([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s+\(([^)]*)\)\s+(\w+)"
    r"(?:\s*:\s*(.*?))?\s*$")


@dataclass
class Run:
    """One training run, as read from its log (and run directory)."""

    source: str
    fmt: str                      # "rundir", "mllog" or "v0.5"
    benchmark: str                # canonical name (benchmarks.yml) or as logged
    device: str
    gpus: int | None
    stack: str
    scale: str | None = None      # runner scale (full / small / tiny); None for plain logs
    mode: str = "ttt"             # ttt or throughput (runner --mode)
    host: str | None = None
    seed: int | None = None
    start_s: float | None = None  # run_start, unix seconds
    success: bool = False
    outcome: str = "failed"       # success / target_missed / failed / aborted
    reason: str = ""
    ttt_s: float | None = None
    elapsed_s: float | None = None
    epochs: float | None = None
    quality: object = None
    target: object = None
    samples_per_s: float | None = None
    throughput_basis: str | None = None
    sample_unit: str | None = None  # of samples_per_s where the run says (runner throughput mode)
    stack_versions: str | None = None
    energy_j: float | None = None
    avg_power_w: float | None = None
    facts_from: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def bench_label(self) -> str:
        """Benchmark name as grouped: runs of a reduced scale never mix with full ones."""
        if self.scale and self.scale != "full":
            return f"{self.benchmark} [{self.scale}]"
        return self.benchmark

    @property
    def system(self) -> str:
        return system_label(self.device, self.gpus, self.stack)

    @property
    def perf_per_watt(self) -> float | None:
        if self.samples_per_s and self.avg_power_w:
            return self.samples_per_s / self.avg_power_w
        return None

    @property
    def energy_to_train_wh(self) -> float | None:
        if self.ttt_s is not None and self.avg_power_w:
            return self.avg_power_w * self.ttt_s / 3600.0
        return None

    def row(self) -> dict:
        d = asdict(self)
        d["benchmark"] = self.bench_label
        d["system"] = self.system
        d["ttt_minutes"] = None if self.ttt_s is None else self.ttt_s / 60.0
        d["perf_per_watt"] = self.perf_per_watt
        d["energy_to_train_wh"] = self.energy_to_train_wh
        d["quality"] = _jsonable(self.quality)
        d["target"] = _jsonable(self.target)
        d["notes"] = "; ".join(self.notes)
        return d


def system_label(device: str, gpus: int | None, stack: str) -> str:
    count = "?" if gpus is None else str(gpus)
    label = f"{count}x {device}"
    if stack and stack != "unknown":
        label += f" / {stack}"
    return label


@dataclass
class Skipped:
    source: str
    reason: str


@dataclass
class Collection:
    runs: list[Run]
    skipped: list[Skipped]
    inputs: list[str]


class LogProblem(Exception):
    """Why a log cannot give a run (becomes a Skipped reason)."""


@dataclass
class LogFacts:
    fmt: str
    benchmark: str | None
    platform: str | None
    seed: int | None
    start_s: float
    stop_s: float
    success: bool
    outcome: str
    reason: str
    ttt_s: float | None
    epochs: float | None
    quality: object
    target: object
    samples_per_s: float | None
    throughput_basis: str | None
    warnings: list[str]
    sample_unit: str | None = None


def _jsonable(v):
    if v is None or isinstance(v, (int, float, str, bool)):
        return v
    return json.dumps(v, sort_keys=True)


def _num(v) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    try:
        f = float(str(v).strip())
    except ValueError:
        return None
    return f if math.isfinite(f) else None


def _int(v) -> int | None:
    f = _num(v)
    return int(f) if f is not None and f == int(f) else None


# --------------------------------------------------------------------------
# Log parsing
# --------------------------------------------------------------------------

def detect_format(text: str) -> str | None:
    has_mllog = MLLOG_PREFIX in text
    has_v05 = V05_PREFIX in text
    if has_mllog and has_v05:
        return "mixed"
    return "mllog" if has_mllog else "v0.5" if has_v05 else None


def parse_log(text: str, rules: Rules | None = None) -> LogFacts:
    """Read one run from the text of a log; ``LogProblem`` says why not."""
    rules = rules or default_rules()
    fmt = detect_format(text)
    if fmt is None:
        raise LogProblem("no :::MLLOG or :::MLPv0.5.0 lines")
    if fmt == "mixed":
        raise LogProblem("mixed log formats: both :::MLLOG and :::MLPv0.5.0 lines")
    lines = text.splitlines()
    if fmt == "mllog":
        return _parse_mllog(lines, rules)
    return _parse_v05(lines, rules)


def _bad_lines_note(bad: list[int], nlines: int) -> str:
    if not bad:
        return ""
    if bad[-1] == nlines and len(bad) == 1:
        return f"; last line (line {nlines}) cut off"
    return f"; {len(bad)} unreadable line(s), first at line {bad[0]}"


def _check_benchmarks(names: list[str], rules: Rules) -> str | None:
    canon = []
    for n in names:
        c = rules.benchmark(n) or str(n)
        if c not in canon:
            canon.append(c)
    if len(canon) > 1:
        raise LogProblem(f"mixed benchmarks in one file: {', '.join(canon)}")
    return canon[0] if canon else None


def _start_stop(events, bad, nlines):
    starts = [e for e in events if e[1] == "run_start"]
    stops = [e for e in events if e[1] == "run_stop"]
    note = _bad_lines_note(bad, nlines)
    if not starts:
        raise LogProblem("no run_start" + note)
    if len(starts) > 1:
        raise LogProblem(f"{len(starts)} run_start events: several runs in one file")
    if not stops:
        raise LogProblem("no run_stop: the log is truncated or the run did not finish" + note)
    if len(stops) > 1:
        raise LogProblem(f"{len(stops)} run_stop events in one file")
    start, stop = starts[0], stops[0]
    if stop[0] < start[0]:
        raise LogProblem("run_stop is earlier than run_start")
    return start, stop


def _parse_mllog(lines: list[str], rules: Rules) -> LogFacts:
    events = []   # (time_s, key, value, metadata)
    bad = []
    decode = _JSON.raw_decode
    for i, line in enumerate(lines, 1):
        k = line.find(MLLOG_PREFIX)
        if k < 0:
            continue
        try:
            k += len(MLLOG_PREFIX)
            while line[k] in " \t":
                k += 1
            ev, end = decode(line, k)
            if line[end:].strip():
                raise ValueError("text after the JSON object")
            key = ev["key"]
            t = float(ev["time_ms"]) / 1000.0
        except (ValueError, KeyError, TypeError, IndexError):
            bad.append(i)
            continue
        md = ev.get("metadata")
        events.append((t, str(key), ev.get("value"), md if isinstance(md, dict) else {}))
    nlines = len(lines)
    bench = _check_benchmarks([e[2] for e in events if e[1] == "submission_benchmark"], rules)
    start, stop = _start_stop(events, bad, nlines)
    t0, t1 = start[0], stop[0]
    window = [e for e in events if t0 <= e[0] <= t1]
    warnings = []
    if bad:
        warnings.append(_bad_lines_note(bad, nlines).lstrip("; "))

    status = stop[3].get("status")
    success = status == "success"
    evals = [e for e in window if e[1] == "eval_accuracy"]
    quality = evals[-1][2] if evals else None
    if success:
        outcome, reason = "success", "run_stop status success"
        if quality is not None:
            reason += f" (last eval_accuracy {_fmt_quality(quality)})"
    elif status is None:
        outcome, reason = "failed", "run_stop carries no status"
    else:
        outcome = "aborted" if status == "aborted" else "target_missed"
        reason = f"run_stop status {status}"

    # Epochs to converge (or done).
    ep_nums = {e[3].get("epoch_num") for e in window if e[1] == "epoch_start" and "epoch_num" in e[3]}
    blocks = {}
    for e in window:
        if e[1] == "block_start":
            cnt = _num(e[3].get("epoch_count"))
            if cnt is not None:
                blocks[e[3].get("first_epoch_num")] = cnt
    if ep_nums:
        epochs = float(len(ep_nums))
    elif blocks:
        epochs = float(sum(blocks.values()))
    else:
        last = next((e for e in reversed(evals) if "epoch_num" in e[3]), None)
        epochs = _num(last[3]["epoch_num"]) if last else None

    # Throughput.
    spe = next((_num(e[2]) for e in reversed(events) if e[1] == "train_samples"), None)
    spe = spe or (rules.benchmarks[bench].train_samples if bench in rules.benchmarks else None)
    timed_epochs, timed_s = 0.0, 0.0
    if ep_nums:
        opened = {}
        for e in window:
            if e[1] == "epoch_start" and "epoch_num" in e[3]:
                opened[e[3]["epoch_num"]] = e[0]
            elif e[1] == "epoch_stop" and e[3].get("epoch_num") in opened:
                timed_s += e[0] - opened.pop(e[3]["epoch_num"])
                timed_epochs += 1
    elif blocks:
        opened = {}
        for e in window:
            if e[1] == "block_start" and e[3].get("first_epoch_num") in blocks:
                opened[e[3]["first_epoch_num"]] = e[0]
            elif e[1] == "block_stop" and e[3].get("first_epoch_num") in opened:
                first = e[3]["first_epoch_num"]
                timed_s += e[0] - opened.pop(first)
                timed_epochs += blocks[first]
    sps, basis = _throughput(spe, timed_epochs, timed_s, epochs, t1 - t0)
    unit = None
    logged = next((e for e in reversed(window) if e[1] == "throughput" and _num(e[2])), None)
    if logged is not None:   # the runner's throughput mode logs samples/s itself
        sps, basis = _num(logged[2]), "logged throughput event"
        unit = str(logged[3]["unit"]) if logged[3].get("unit") else None

    seed = next((_int(e[2]) for e in events if e[1] == "seed"), None)
    platform = next((str(e[2]) for e in events if e[1] == "submission_platform" and e[2]), None)
    return LogFacts(
        fmt="mllog", benchmark=bench, platform=platform, seed=seed, start_s=t0, stop_s=t1,
        success=success, outcome=outcome, reason=reason, ttt_s=(t1 - t0) if success else None,
        epochs=epochs, quality=quality, target=None, samples_per_s=sps,
        throughput_basis=basis, warnings=warnings, sample_unit=unit)


def _throughput(spe, timed_epochs, timed_s, epochs, elapsed):
    if spe and timed_epochs and timed_s > 0:
        return spe * timed_epochs / timed_s, "logged epoch times"
    if spe and epochs and elapsed > 0:
        return spe * epochs / elapsed, "epochs / whole run time"
    return None, None


def _fmt_quality(q) -> str:
    if isinstance(q, dict):
        return ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in q.items())
    if isinstance(q, float):
        return f"{q:g}"
    return str(q)


def _v05_value(raw: str | None):
    if raw is None or raw == "":
        return None, True
    try:
        return json.loads(raw), True
    except ValueError:
        pass
    try:
        return ast.literal_eval(raw), True
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw, False


def _parse_v05(lines: list[str], rules: Rules) -> LogFacts:
    events = []   # (time_s, key, value)
    names = []
    bad = []
    last_prefixed = 0
    for i, line in enumerate(lines, 1):
        if V05_PREFIX not in line:
            continue
        last_prefixed = i
        m = _V05_RE.search(line)
        if not m:
            bad.append(i)
            continue
        value, ok = _v05_value(m.group(5))
        if not ok and raw_looks_structured(m.group(5)):
            bad.append(i)
            continue
        names.append(m.group(1))
        events.append((float(m.group(2)), m.group(4), value))
    nlines = last_prefixed or len(lines)
    bench = _check_benchmarks(names, rules)
    start, stop = _start_stop(events, bad, nlines)
    t0, t1 = start[0], stop[0]
    window = [e for e in events if t0 <= e[0] <= t1]
    warnings = [_bad_lines_note(bad, nlines).lstrip("; ")] if bad else []

    logged_target = next((e[2] for e in reversed(events) if e[1] == "eval_target"), None)
    target = logged_target
    if target is None and bench in rules.benchmarks:
        target = rules.benchmarks[bench].target
    evals = []   # (time, epoch, value, position in window)
    for pos, e in enumerate(window):
        if e[1] != "eval_accuracy":
            continue
        if isinstance(e[2], dict) and "value" in e[2]:
            evals.append((e[0], e[2].get("epoch"), e[2]["value"], pos))
        else:
            evals.append((e[0], None, e[2], pos))
    quality = evals[-1][2] if evals else None
    met = None
    if target is not None:
        met = next((ev for ev in evals if rules.meets(ev[2], target)), None)

    flag = stop[2].get("success") if isinstance(stop[2], dict) else None
    cut = len(window)   # events up to here count towards epochs to converge
    if isinstance(flag, bool):
        success = flag
        end_t = t1
        outcome = "success" if flag else "target_missed"
        reason = f"run_stop success {str(flag).lower()}"
        if quality is not None:
            reason += f" (last eval_accuracy {_fmt_quality(quality)})"
    elif met is not None:
        success, end_t, outcome = True, met[0], "success"
        cut = met[3]
        at = f" at epoch {met[1]}" if met[1] is not None else ""
        reason = f"eval_accuracy {_fmt_quality(met[2])} met target {_fmt_quality(target)}{at}"
    else:
        success, end_t = False, t1
        outcome = "target_missed"
        if target is None:
            reason = "run_stop has no success flag and no target is known"
        elif not evals:
            reason = f"no eval_accuracy logged (target {_fmt_quality(target)})"
        else:
            reason = (f"no eval_accuracy met target {_fmt_quality(target)} "
                      f"(last {_fmt_quality(quality)})")

    train_epochs = [e for e in window[:cut] if e[1] == "train_epoch"]
    if train_epochs:
        epochs = float(len({json.dumps(e[2]) for e in train_epochs}))
    else:
        ref = met if (success and met) else (evals[-1] if evals else None)
        epochs = _num(ref[1]) if ref else None

    spe = next((_num(e[2]) for e in reversed(events) if e[1] == "preproc_num_train_examples"), None)
    spe = spe or (rules.benchmarks[bench].train_samples if bench in rules.benchmarks else None)
    timed_epochs, timed_s = 0.0, 0.0
    ends = {"eval_start", "train_epoch", "run_stop", "eval_accuracy"}
    for idx, e in enumerate(window):
        if e[1] != "train_epoch":
            continue
        nxt = next((f for f in window[idx + 1:] if f[1] in ends and f[0] >= e[0]), None)
        if nxt is not None and nxt[0] > e[0]:
            timed_s += nxt[0] - e[0]
            timed_epochs += 1
    sps, basis = _throughput(spe, timed_epochs, timed_s, epochs, (end_t - t0))

    seed = next((_int(e[2]) for e in events if e[1] == "run_set_random_seed"), None)
    return LogFacts(
        fmt="v0.5", benchmark=bench, platform=None, seed=seed, start_s=t0, stop_s=t1,
        success=success, outcome=outcome, reason=reason,
        ttt_s=(end_t - t0) if success else None, epochs=epochs, quality=quality,
        target=target, samples_per_s=sps, throughput_basis=basis, warnings=warnings)


def raw_looks_structured(raw: str | None) -> bool:
    """A value that starts like JSON but does not parse was cut off."""
    return bool(raw) and raw.lstrip()[:1] in "{[\""


# --------------------------------------------------------------------------
# Telemetry
# --------------------------------------------------------------------------

def read_telemetry(path: Path, gpus: list[int] | None = None, data: bytes | None = None
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
    first, _, _ = data.partition(b"\n")
    header = [h.strip() for h in first.decode("utf-8", errors="replace").strip().split(",")]
    if header == [""]:
        return None, None, None
    if not {"time_s", "gpu", "power_w"} <= set(header):
        return None, None, "telemetry.csv lacks time_s, gpu or power_w"
    cols = (header.index("time_s"), header.index("gpu"), header.index("power_w"))
    series = _telemetry_numpy(data, cols)
    if series is None:
        series = _telemetry_python(data, cols)
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


def _gpu_key(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _telemetry_numpy(data: bytes, cols) -> dict | None:
    """Fast path: every row numeric in the three columns. None when not so."""
    it, ig, ip = cols
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.loadtxt(io.BytesIO(data), delimiter=",", skiprows=1, usecols=(it, ig, ip),
                           ndmin=2, quotechar='"', dtype=float)
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
    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace"), newline=""))
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


# --------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------

class _Context:
    def __init__(self, rules: Rules):
        self.rules = rules
        self.runs: list[Run] = []
        self.skipped: list[Skipped] = []
        self._sweeps: dict[Path, dict | None] = {}
        self._systems_dirs: dict[Path, bool] = {}
        self._json_cache: dict[Path, dict | None] = {}
        self._seen: set[Path] = set()
        self.repeats = 0
        self.planned: dict[Path, dict] = {}

    def planned_dir(self, path: Path) -> dict | None:
        """The sweep.json entry whose run directory ``path`` is, if any."""
        return self.planned.get(path.resolve()) if self.planned else None

    def first_visit(self, path: Path) -> bool:
        """False for a file or folder already read (overlapping input paths)."""
        key = path.resolve()
        if key in self._seen:
            self.repeats += 1
            return False
        self._seen.add(key)
        return True

    def skip(self, source, reason):
        self.skipped.append(Skipped(str(source), reason))

    # sweep.json ----------------------------------------------------------
    def sweep(self, sweep_dir: Path) -> dict | None:
        if sweep_dir not in self._sweeps:
            self._sweeps[sweep_dir] = _load_sweep(sweep_dir / "sweep.json")
        return self._sweeps[sweep_dir]

    # MLPerf systems/<name>.json --------------------------------------------
    def systems_file(self, log: Path, root: Path) -> tuple[dict, str] | None:
        anchors = [*[p for p in log.parents if _is_within(p, root)], root.parent]
        for anchor in anchors:
            sysdir = anchor / "systems"
            if sysdir not in self._systems_dirs:
                self._systems_dirs[sysdir] = sysdir.is_dir()
            if not self._systems_dirs[sysdir]:
                continue
            try:
                parts = log.relative_to(anchor).parts[:-1]
            except ValueError:
                continue
            for part in parts:
                f = sysdir / f"{part}.json"
                if f not in self._json_cache:
                    self._json_cache[f] = _read_json(f) if f.is_file() else None
                if isinstance(self._json_cache[f], dict):
                    return self._json_cache[f], f"{f.name}"
        return None


def _is_within(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def _read_json(path: Path, root: Path | None = None):
    """A JSON file read with bounds (a regular file inside ``root``, default its folder); None if not."""
    try:
        return bounded.read_json(path, root=root or Path(path).parent, limit=limits.JSON_BYTES)
    except bounded.Unreadable:
        return None


def _load_sweep(path: Path) -> dict | None:
    doc = _read_json(path)
    if not isinstance(doc, dict):
        return None
    hosts = {}
    raw_hosts = doc.get("hosts") or {}
    if isinstance(raw_hosts, list):
        raw_hosts = {str(h.get("name") or h.get("host")): h for h in raw_hosts if isinstance(h, dict)}
    if isinstance(raw_hosts, dict):
        for name, facts in raw_hosts.items():
            if isinstance(facts, dict):
                hosts[str(name)] = facts
    runs = []
    raw_runs = doc.get("runs", doc.get("plan")) or []
    if isinstance(raw_runs, dict):
        raw_runs = [dict(v, id=v.get("id", k)) for k, v in raw_runs.items() if isinstance(v, dict)]
    for entry in raw_runs if isinstance(raw_runs, list) else []:
        if isinstance(entry, dict) and (entry.get("id") or entry.get("run_id")) and entry.get("host"):
            runs.append(entry)
    return {"hosts": hosts, "runs": runs, "name": doc.get("name") or path.parent.name}


def _first(d: dict, *keys):
    for k in keys:
        v = d.get(k)
        if v not in (None, "", "auto"):
            return v
    return None


def collect(paths, rules: Rules | None = None) -> Collection:
    """Every run under ``paths`` (folders or files), and everything skipped, with reasons."""
    rules = rules or default_rules()
    ctx = _Context(rules)
    inputs = []
    for p in paths:
        p = Path(p)
        inputs.append(str(p))
        if not p.exists():
            raise ConfigError(f"{p}: no such file or directory")
        before = len(ctx.runs) + len(ctx.skipped) + ctx.repeats
        if p.is_file():
            _read_plain(ctx, p, p.parent, explicit=True)
        else:
            _walk(ctx, p)
        if len(ctx.runs) + len(ctx.skipped) + ctx.repeats == before:
            raise ConfigError(f"{p}: no run directories or MLPerf log files found")
    ctx.runs.sort(key=lambda r: (r.bench_label, r.device, r.gpus or 0, r.stack,
                                 r.start_s if r.start_s is not None else 0.0, r.source))
    return Collection(runs=ctx.runs, skipped=ctx.skipped, inputs=inputs)


def _is_rundir(names: set[str]) -> bool:
    return "status.json" in names or ("manifest.json" in names and "mllog.log" in names)


def _walk(ctx: _Context, root: Path):
    try:
        names = set(os.listdir(root))
    except OSError as exc:
        raise ConfigError(f"{root}: cannot read ({exc.strerror or exc})") from None
    if _is_rundir(names):
        _read_rundir(ctx, root)
        return
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: ctx.skip(
            e.filename, f"cannot list folder ({e.strerror})")):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        here = Path(dirpath)
        names = set(filenames)
        if here != root and (_is_rundir(names) or ctx.planned_dir(here)):
            _read_rundir(ctx, here)
            dirnames[:] = []
            continue
        if "sweep.json" in names:
            _missing_planned_runs(ctx, here)
        for name in sorted(filenames):
            path = here / name
            if name.endswith(".launch.log") and (here / name[: -len(".launch.log")]).is_dir():
                continue   # a sweep's launch log beside its run directory: not a training log
            if path.suffix.lower() in LOG_SUFFIXES or "log" in name.lower():
                _read_plain(ctx, path, root, explicit=False)


def _missing_planned_runs(ctx: _Context, sweep_dir: Path):
    sweep = ctx.sweep(sweep_dir)
    if sweep is None:
        ctx.skip(sweep_dir / "sweep.json", "sweep.json is not a readable JSON object; "
                 "its run directories are read without host facts")
        return
    for i, entry in enumerate(sweep["runs"]):
        run_id = entry.get("id") or entry.get("run_id")
        rundir = paths.child(sweep_dir, entry["host"], run_id,
                             what=f"{sweep_dir / 'sweep.json'}: runs[{i}] (host {entry['host']!r}, run {run_id!r})")
        ctx.planned[rundir.resolve()] = entry
        if rundir.exists():
            continue
        state = entry.get("state") or "unknown"
        why = entry.get("reason")
        ctx.skip(rundir, f"planned run has no run directory (sweep state: {state}"
                 + (f"; {why}" if why else "") + ")")


def _read_text(ctx: _Context, path: Path, root: Path | None = None) -> str | None:
    """A log read with bounds (lab.bounded: a regular file inside ``root``, capped); skipped if not."""
    try:
        return bounded.read_text(path, root=root or path.parent, limit=MAX_LOG_BYTES, errors="replace")
    except bounded.Unreadable as exc:
        ctx.skip(path, exc.reason)
        return None


def _read_plain(ctx: _Context, path: Path, root: Path, explicit: bool):
    if not (path.is_file() or path.is_symlink() or explicit) or not ctx.first_visit(path):
        return
    text = _read_text(ctx, path, root)
    if text is None:
        return
    fmt = detect_format(text)
    if fmt is None:
        # Only files named like logs are worth a line in the report.
        if explicit or path.suffix.lower() == ".log" or re.match(r"result.*\.txt$", path.name, re.I):
            ctx.skip(path, "empty file" if not text.strip() else "no :::MLLOG or :::MLPv0.5.0 lines")
        return
    try:
        facts = parse_log(text, ctx.rules)
    except LogProblem as exc:
        ctx.skip(path, str(exc))
        return
    rules = ctx.rules
    folders = [path.stem, *[p.name for p in path.parents if _is_within(p, root)]]
    bench = facts.benchmark
    if bench is None:
        bench = next((rules.benchmark(n) for n in folders if rules.benchmark(n)), None)
        if bench is None:
            ctx.skip(path, "benchmark not named in the log (submission_benchmark) or its folder names")
            return
    device = count = stack = None
    sources = {}
    sysfile = ctx.systems_file(path, root)
    if sysfile:
        doc, fname = sysfile
        if doc.get("accelerator_model_name"):
            device = rules.device(doc["accelerator_model_name"])
            sources["device"] = fname
        per_node = _int(doc.get("accelerators_per_node"))
        if per_node is not None:
            count = per_node * (_int(doc.get("number_of_nodes")) or 1)
            sources["GPUs"] = fname
        if doc.get("framework"):
            stack = str(doc["framework"])
            sources["stack"] = fname
    if facts.platform and (device is None or count is None):
        d, c = rules.find_system(facts.platform)
        if device is None and d:
            device, sources["device"] = d, "log submission_platform"
        if count is None and c is not None:
            count, sources["GPUs"] = c, "log submission_platform"
    for name in folders:
        if device is not None and count is not None:
            break
        d, c = rules.find_system(name)
        if device is None and d:
            device, sources["device"] = d, f"folder name {name!r}"
        if count is None and c is not None:
            count, sources["GPUs"] = c, f"folder name {name!r}"
    notes = list(facts.warnings)
    if device is None:
        device = "unknown"
        notes.append("device not found in the log or its folder names")
    if count is None:
        notes.append("GPU count not found in the log or its folder names")
    ctx.runs.append(Run(
        source=str(path), fmt=facts.fmt, benchmark=bench, device=device, gpus=count,
        stack=stack or "unknown", seed=facts.seed, start_s=facts.start_s,
        success=facts.success, outcome=facts.outcome, reason=facts.reason, ttt_s=facts.ttt_s,
        elapsed_s=facts.stop_s - facts.start_s, epochs=facts.epochs, quality=facts.quality,
        target=facts.target, samples_per_s=facts.samples_per_s,
        throughput_basis=facts.throughput_basis, sample_unit=facts.sample_unit,
        facts_from=", ".join(f"{k}: {v}" for k, v in sources.items()), notes=notes))


def verify_sums(rundir: Path, keep: tuple[str, ...] = ()) -> tuple[str | None, dict[str, bytes]]:
    """(None, kept) when SHA256SUMS verifies, else (why not, {}).

    ``kept`` holds the bytes of the files named in ``keep`` that were verified,
    so that they are read once.
    """
    sums = rundir / "SHA256SUMS"
    kept: dict[str, bytes] = {}
    try:
        lines = bounded.read_text(sums, root=rundir, limit=limits.SUMS_BYTES).splitlines()
    except bounded.Missing:
        return "no SHA256SUMS: incomplete run directory", {}
    except bounded.Unreadable as exc:
        return f"SHA256SUMS {exc.reason}", {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        m = checksums.LINE.match(line)   # the one SHA256SUMS grammar
        if not m:
            return f"SHA256SUMS line {n} is malformed", {}
        rel = m.group(2)
        target = rundir / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            return f"SHA256SUMS line {n} points outside the run directory", {}
        try:
            if rel in keep:
                data = bounded.read_bytes(target, root=rundir, limit=KEEP_BYTES.get(rel, MAX_LOG_BYTES))
                digest = hashlib.sha256(data).hexdigest()
                kept[rel] = data
            else:
                digest = bounded.sha256(target, root=rundir)
        except bounded.Missing:
            return f"{rel} is listed in SHA256SUMS but missing", {}
        except bounded.Unreadable as exc:
            return f"{rel} {exc.reason}", {}
        if digest != m.group(1).lower():
            return f"{rel} does not match SHA256SUMS (changed after the run)", {}
    return None, kept


def _iso_to_unix(s) -> float | None:
    if not isinstance(s, str):
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _manifest_gpus(manifest: dict) -> list[dict]:
    """The per-GPU records of the probe (manifest.json's own ``gpus`` are indices)."""
    for holder in (manifest.get("probe"), manifest, manifest.get("host")):
        if isinstance(holder, dict) and isinstance(holder.get("gpus"), list):
            gpus = [g for g in holder["gpus"] if isinstance(g, dict)]
            if gpus:
                return gpus
    return []


def _manifest_stack(manifest: dict) -> tuple[str | None, str | None, str | None]:
    """(profile name, short version label, all versions) of the manifest's stack facts.

    The runner's manifest holds the probe document: ``probe.stack`` (driver,
    cuda_toolkit, cudnn, nccl) and ``probe.frameworks`` (torch, tensorflow).
    A stack with a ``profile`` or ``name`` (a provisioned stack profile) is
    named by it.
    """
    probe = manifest.get("probe") if isinstance(manifest.get("probe"), dict) else {}
    stack = manifest.get("stack", probe.get("stack"))
    if isinstance(stack, str):
        return stack, None, None
    stack = stack if isinstance(stack, dict) else {}
    name = _first(stack, "profile", "name", "id")
    parts = []   # every version; the label keeps driver, CUDA and framework
    for key, label in (("driver", "driver"), ("cuda_toolkit", "cuda"), ("cuda", "cuda"),
                       ("cudnn", "cudnn"), ("nccl", "nccl")):
        v = stack.get(key)
        if isinstance(v, dict):
            v = v.get("version")
        if v and not any(p.startswith(label + " ") for p in parts):
            parts.append(f"{label} {v}")
    frameworks = manifest.get("frameworks", probe.get("frameworks"))
    for fw in ("torch", "tensorflow"):
        v = (frameworks or {}).get(fw) if isinstance(frameworks, dict) else None
        v = v or stack.get(fw)
        if v:
            parts.append(f"{fw} {v}")
    short = [p for p in parts if p.split(" ")[0] in ("driver", "cuda", "torch", "tensorflow")]
    return (str(name) if name else None), (", ".join(short) or None), (", ".join(parts) or None)


def _manifest_host(manifest: dict) -> str | None:
    for holder in (manifest, manifest.get("probe") if isinstance(manifest.get("probe"), dict) else {}):
        h = holder.get("host")
        if isinstance(h, dict):
            h = _first(h, "hostname", "name", "fqdn")
        elif h is None:
            h = holder.get("hostname")
        if h:
            return str(h)
    return None


def _read_rundir(ctx: _Context, rundir: Path):
    if not ctx.first_visit(rundir):
        return
    rules = ctx.rules
    if not os.path.lexists(rundir / "status.json"):
        entry = ctx.planned_dir(rundir)
        why = "incomplete run directory: no status.json (still running or interrupted)"
        if entry:
            why += f"; sweep state: {entry.get('state') or 'unknown'}"
            if entry.get("reason"):
                why += f": {entry['reason']}"
        ctx.skip(rundir, why)
        return
    try:
        status = json.loads(bounded.read_text(rundir / "status.json", root=rundir, limit=limits.JSON_BYTES))
    except bounded.Unreadable as exc:
        ctx.skip(rundir, f"status.json {exc.reason}")
        return
    except (ValueError, RecursionError):
        status = None
    if not isinstance(status, dict):
        ctx.skip(rundir, "status.json is not a readable JSON object")
        return
    if status.get("outcome") not in ("success", "target_missed", "failed", "aborted"):
        ctx.skip(rundir, f"status.json: outcome {status.get('outcome')!r} is not one of "
                 "success, target_missed, failed, aborted")
        return
    problem, kept = verify_sums(rundir, keep=("mllog.log", "telemetry.csv"))
    if problem:
        ctx.skip(rundir, problem)
        return
    node_rank = _int(status.get("node_rank")) or 0
    if node_rank > 0:
        ctx.skip(rundir, f"node {node_rank} of a {_int(status.get('nnodes')) or '?'}-node run: "
                 "the run is reported from node 0's run directory")
        return
    manifest = _read_json(rundir / "manifest.json")
    notes = []
    if not isinstance(manifest, dict):
        if (rundir / "manifest.json").exists():
            notes.append("manifest.json unreadable")
        manifest = {}
    sweep = ctx.sweep(rundir.parent.parent) if (rundir.parent.parent / "sweep.json").is_file() else None
    host = _manifest_host(manifest)
    host_facts = {}
    if sweep:
        # In a sweep, <host>/ is the inventory name: the name the lab uses.
        host_facts = sweep["hosts"].get(rundir.parent.name) or (sweep["hosts"].get(host) if host else None) or {}
        if rundir.parent.name in sweep["hosts"] or not host:
            host = rundir.parent.name

    result = status.get("result") if isinstance(status.get("result"), dict) else {}
    log_facts, log_problem = None, None
    if "mllog.log" in kept:
        text = kept["mllog.log"].decode("utf-8", errors="replace")
    else:
        text = _read_text(ctx, rundir / "mllog.log") if os.path.lexists(rundir / "mllog.log") else None
    if text is None:
        log_problem = "no mllog.log"
    else:
        try:
            log_facts = parse_log(text, rules)
        except LogProblem as exc:
            log_problem = f"mllog.log: {exc}"
    if log_problem and status["outcome"] == "success" and status.get("mode", "ttt") == "ttt":
        ctx.skip(rundir, f"status.json says success but {log_problem}")
        return

    bench = rules.benchmark(status.get("benchmark")) or rules.benchmark(status.get("workload"))
    if bench is None and log_facts and log_facts.benchmark:
        bench = log_facts.benchmark
    bench = bench or str(status.get("benchmark") or status.get("workload") or "unknown")

    # GPU count and device.
    idx = status.get("gpus") if isinstance(status.get("gpus"), list) else None
    nnodes = _int(status.get("nnodes")) or 1
    sources = {}
    count = len(idx) * nnodes if idx is not None else _int(status.get("world_size"))
    if count is not None:
        sources["GPUs"] = "status.json"
    device = None
    if idx == []:
        device, sources["device"] = "CPU", "status.json (no GPUs)"
    else:
        names = []
        for g in _manifest_gpus(manifest):
            gi = _int(g.get("index"))
            if idx is None or gi is None or gi in idx:
                n = _first(g, "name", "model", "product_name")
                if n:
                    names.append(rules.device(n))
        names = sorted(set(names))
        if names:
            device = names[0] if len(names) == 1 else "mixed(" + "+".join(names) + ")"
            sources["device"] = "manifest.json"
        elif host_facts and _first(host_facts, "gpu_model", "gpulab_gpu_model", "device", "model"):
            device = rules.device(_first(host_facts, "gpu_model", "gpulab_gpu_model", "device", "model"))
            sources["device"] = "sweep.json"
        else:
            for name in [rundir.name, rundir.parent.name, rundir.parent.parent.name]:
                d, c = rules.find_system(name)
                if d:
                    device, sources["device"] = d, f"folder name {name!r}"
                    break
    if device is None:
        device = "unknown"
        notes.append("device not in manifest.json, sweep.json or folder names")

    profile, versions, all_versions = _manifest_stack(manifest)
    sweep_stack = _first(host_facts, "stack", "gpulab_stack", "stack_profile") if host_facts else None
    if profile:
        stack, sources["stack"] = profile, "manifest.json"
    elif sweep_stack:
        stack, sources["stack"] = str(sweep_stack), "sweep.json"
    elif versions:
        stack, sources["stack"] = versions, "manifest.json"
    else:
        stack = "unknown"
    stack_versions = all_versions

    tele = rundir / "telemetry.csv"
    energy = power = None
    if "telemetry.csv" in kept or os.path.lexists(tele):
        energy, power, tnote = read_telemetry(tele, idx, kept.get("telemetry.csv"))
        if tnote:
            notes.append(tnote)

    run = Run(source=str(rundir), fmt="rundir", benchmark=bench, device=device, gpus=count,
              stack=stack, scale=status.get("scale"), mode=status.get("mode") or "ttt",
              host=host, seed=_int(status.get("seed")), outcome=status["outcome"],
              stack_versions=stack_versions,
              reason=str(status.get("reason") or ""), energy_j=energy, avg_power_w=power,
              facts_from=", ".join(f"{k}: {v}" for k, v in sources.items()), notes=notes)
    if log_facts:
        run.start_s = log_facts.start_s
        run.elapsed_s = log_facts.stop_s - log_facts.start_s
        run.success = log_facts.success
        run.ttt_s = log_facts.ttt_s
        run.epochs = log_facts.epochs
        run.quality = log_facts.quality
        run.samples_per_s = log_facts.samples_per_s
        run.throughput_basis = log_facts.throughput_basis
        run.sample_unit = log_facts.sample_unit
        run.notes.extend(log_facts.warnings)
        if log_facts.seed is not None and run.seed is None:
            run.seed = log_facts.seed
        if log_facts.success != (status["outcome"] == "success") and run.mode == "ttt":
            run.notes.append(f"mllog.log says {log_facts.outcome}, status.json says {status['outcome']}: "
                             "the log's clock is used")
            run.outcome = log_facts.outcome
            run.reason = log_facts.reason
    else:
        run.notes.append(log_problem)
        run.start_s = _iso_to_unix(status.get("start"))
        end = _iso_to_unix(status.get("end"))
        if run.start_s is not None and end is not None:
            run.elapsed_s = end - run.start_s
        run.success = status["outcome"] == "success"
    if run.mode != "ttt":
        run.ttt_s = None
        run.success = status["outcome"] == "success"
        run.outcome = status["outcome"]
        run.reason = str(status.get("reason") or "")
    if result:
        if _num(result.get("epochs")) is not None:
            run.epochs = _num(result["epochs"])
        if _num(result.get("samples_per_s")):
            run.samples_per_s = _num(result["samples_per_s"])
            run.throughput_basis = "status.json result.samples_per_s"
            if result.get("sample_unit"):
                run.sample_unit = str(result["sample_unit"])
        if result.get("quality") is not None and run.quality is None:
            run.quality = result["quality"]
        if result.get("target") is not None:
            run.target = result["target"]
    ctx.runs.append(run)
