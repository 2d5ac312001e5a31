"""What mlperf-logging's result_summarizer reports of a round's result file beyond its time:
the batch size and the point of convergence (its detailed GBS and samples_to_converge
columns), and the energy of the run from the round's power logs (its Energy column).

Batch size and convergence (closed division; the summarizer takes them from its RCP
reader, which reads each result file's ``:::MLLOG`` lines as text, each from its last
marker on):
- batch size: the value of the last line that mentions ``global_batch_size``;
- convergence: where run_stop's status is success, the last eval_accuracy (or eval_error)
  line's ``samples_count`` (llama2_70b_lora, llama31_*, flux1, gpt_oss_20b, deepseekv3_671b
  and the later LLMs), its ``epoch_num`` rounded to 3 places (the others), or for
  stable_diffusion the first eval step whose FID <= 90 and CLIP >= 0.15 (``step_num`` in
  3.1.0, ``samples_count`` after); another status: not converged. A line it cannot decode
  is an error for the whole benchmark folder, as in the summarizer.

Energy (any round whose benchmark folder has ``power/``): for result_N, every
``power/result_N/node_*.txt`` adds conversion_eff x sum(power_reading x the time since the
previous reading, from power_measurement_start to power_measurement_stop) x the run's
time / (stop - start); every ``sw_*.txt`` adds conversion_eff x interconnect_power_est x the
run's time; times in ms, the sum / 1000 in joules. Kept here as joules per millisecond of
the run (``rate``): lab.report.scoring multiplies it by the run's time. Power files are
read through lab.core.bounded (regular files inside the input root, POWER_BYTES each, at
most POWER_FILES of them).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from lab.core import bounded
from lab.core import paths
from lab.core import plaindata

TOKEN = ":::MLLOG "
SAMPLES_COUNT = {
    "llama2_70b_lora",
    "flux1",
    "llama31_405b",
    "llama31_8b",
    "gpt_oss_20b",
    "deepseekv3_671b",
    "qwen35_397b_grpo",
    "dlrmv4",
}
POWER_BYTES = 256 << 20
POWER_FILES = 4096
NOT_CONVERGED = 1e9


@dataclass(frozen=True)
class RcpPoint:
    batch_size: object = -1  # as logged; -1: none logged
    converged: bool = False
    point: float = NOT_CONVERGED  # samples or epochs to converge (NOT_CONVERGED where not)
    benchmark: str | None = None
    error: str = ""  # a line the reader could not take: no figures for the folder


def _json(s: str):
    return plaindata.loads(s)


def rcp_point(text: str, ruleset: str) -> RcpPoint:
    """The batch size and convergence point of one result file, read as the RCP reader reads it."""
    bs, bench, conv, point, converged = -1, None, None, NOT_CONVERGED, False
    sd: dict = {}
    try:
        for raw in text.splitlines():
            k = raw.rfind(TOKEN)
            if k < 0:
                continue
            s = raw[k + len(TOKEN) :].strip()
            if "global_batch_size" in s:
                bs = _json(s)["value"]
            if "submission_benchmark" in s:
                bench = _json(s)["value"]
            evaluated = "eval_error" in s or "eval_accuracy" in s
            if bench == "stable_diffusion" and evaluated:
                doc = _json(s)
                md = doc["metadata"]
                step = md["step_num" if ruleset == "3.1.0" else "samples_count"]
                sd.setdefault(_key(step), {})[md["metric"]] = doc["value"]
            elif bench in SAMPLES_COUNT and evaluated:
                conv = _json(s)["metadata"]["samples_count"]
            elif evaluated:
                conv = round(_json(s)["metadata"]["epoch_num"], 3)
            if "run_stop" in s and _json(s)["key"] == "run_stop":
                if _json(s)["metadata"]["status"] == "success":
                    if bench == "stable_diffusion":
                        passing = [step for step, m in sd.items() if m["FID"] <= 90.0 and m["CLIP"] >= 0.15]
                        conv = min(passing)
                    if conv is None:
                        raise ValueError("run_stop success before any eval_accuracy")
                    converged, point = True, conv
                else:
                    converged, point = False, NOT_CONVERGED
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return RcpPoint(bs, False, NOT_CONVERGED, bench, f"{type(exc).__name__}: {exc}"[:160])
    return RcpPoint(bs, converged, point, bench)


def _key(step):
    return step if isinstance(step, (int, float, str, bool)) or step is None else repr(step)


@dataclass(frozen=True)
class PowerRate:
    rate: float | None  # joules per ms of the run; None: no energy (see why)
    why: str = ""
    files: int = 0


def _events(text: str):
    for raw in text.splitlines():
        k = raw.rfind(TOKEN)
        if k < 0:
            continue
        try:
            doc = _json(raw[k + len(TOKEN) :].strip())
            yield float(doc["time_ms"]), str(doc["key"]), doc.get("value")
        except (ValueError, KeyError, TypeError):
            continue


def _value(v) -> float:
    v = v.get("value") if isinstance(v, dict) else v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"not a number: {v!r}"[:80])
    return float(v)


def node_rate(text: str) -> float:
    """conversion_eff x the readings integrated over time / the measured span / 1000 (per ms of run)."""
    prev = last = start = stop = 0.0
    agg, eff = 0.0, 1.0
    started = stopped = False
    for t, key, value in sorted(_events(text), key=lambda e: e[0]):
        if key == "power_measurement_start":
            start = prev = t
            started = True
        if key == "power_reading" and not stopped and started:
            agg += _value(value) * (t - prev)
            prev = t
            last = max(last, t)
        if key == "power_measurement_stop":
            stop, stopped = t, True
        if key == "conversion_eff":
            eff = _value(value)
    if not started:
        raise ValueError("no power_measurement_start")
    if not stopped:
        stop = last
    if stop == start:
        raise ValueError("power measured over no time")
    return eff * agg / (stop - start) / 1000


def sw_rate(text: str) -> float:
    eff, est = 1.0, 0.0
    for _t, key, value in _events(text):
        if key == "conversion_eff":
            eff = _value(value)
        if key == "interconnect_power_est":
            est = _value(value)
            break
    return eff * est / 1000


def power_rate(bench_dir: Path, result_name: str, root: Path) -> PowerRate:
    """The energy rate of ``result_name`` (``result_3``) from ``bench_dir/power/result_3/``."""
    folder = bench_dir / "power" / result_name
    if not paths.inside(folder, root):
        return PowerRate(None, f"power/{result_name} leads outside {root}; not read")
    try:
        names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []
    except OSError as exc:
        return PowerRate(None, f"power/{result_name} cannot be listed ({exc.strerror or exc})")
    nodes = [n for n in names if fnmatchcase(n, "node_*.txt")]
    sws = [n for n in names if fnmatchcase(n, "sw_*.txt")]
    if not nodes:
        return PowerRate(None, f"power/{result_name} has no node_*.txt (result_summarizer stops here)")
    if len(nodes) + len(sws) > POWER_FILES:
        return PowerRate(None, f"power/{result_name} has more than {POWER_FILES} files; not read")
    total = 0.0
    for name in nodes + sws:
        try:
            text = bounded.read_text(folder / name, root=root, limit=POWER_BYTES, errors="replace")
            total += node_rate(text) if name in nodes else sw_rate(text)
        except bounded.Unreadable as exc:
            return PowerRate(None, f"power/{result_name}/{name} {exc.reason}")
        except ValueError as exc:
            return PowerRate(None, f"power/{result_name}/{name}: {exc} (result_summarizer stops here)")
    return PowerRate(total, "", len(nodes) + len(sws))


def result_name(path: Path) -> str:
    """``result_3`` of ``result_3.txt`` (the summarizer's split at the first dot)."""
    return path.name.split(".")[0]
