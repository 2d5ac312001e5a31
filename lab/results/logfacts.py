"""What one training run's log says, whatever the log format: ``LogFacts``.

The parsers (lab.results.logreader for MLLOG, lab.results.v05log for ``:::MLPv0.5.0``,
lab.results.v06log for ``:::MLL``) turn a log's text into events ``(time_s, key,
value, metadata)`` and events into one ``LogFacts`` per run. This module holds
what they share: the model, the reasons a log gives no run (``LogProblem``),
the split of a file into runs and the throughput rule.

Throughput (samples/s) is the data set's samples per epoch x the epochs timed
/ the time of those epochs, from the log's own epoch events; failing those,
x the epochs to converge / the whole run time. The samples per epoch are what the
log states of its training set (preproc_num_train_examples, train_samples),
else the data set's real size (lab/data/benchmarks.yml train_samples); where
neither is known the throughput is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lab.core import limits, plaindata
from lab.core.mlperf import Rules


class LogProblem(Exception):
    """Why a log cannot give a run (becomes a Skipped reason)."""


@dataclass
class LogFacts:
    fmt: str  # "mllog", "v0.5" or "v0.6"
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
    run_in_file: int = 1  # 1-based position of the run in its file
    runs_in_file: int = 1
    clock: str = "run_start to run_stop"
    submitter: str | None = None  # as the log names it (submission_org)
    notes: list[str] = field(default_factory=list)


def num(v) -> float | None:
    """A finite float from a number or numeric string, else None (never a bool)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    try:
        f = float(str(v).strip())
    except ValueError:
        return None
    return f if math.isfinite(f) else None


def integer(v) -> int | None:
    f = num(v)
    return int(f) if f is not None and f == int(f) else None


def fmt_quality(q) -> str:
    if isinstance(q, dict):
        return ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in q.items())
    if isinstance(q, float):
        return f"{q:g}"
    return str(q)


def bad_lines_note(bad: list[int], nlines: int) -> str:
    if not bad:
        return ""
    if bad[-1] == nlines and len(bad) == 1:
        return f"; last line (line {nlines}) cut off"
    return f"; {len(bad)} unreadable line(s), first at line {bad[0]}"


def check_benchmarks(names, rules: Rules) -> str | None:
    """The one benchmark a file names (canonical where known); mixed names are a problem."""
    canon = []
    for n in names:
        c = rules.benchmark(n) or str(n)
        if c not in canon:
            canon.append(c)
    if len(canon) > 1:
        raise LogProblem(f"mixed benchmarks in one file: {', '.join(canon)}")
    return canon[0] if canon else None


def split_runs(events: list[tuple], bad: list[int], nlines: int) -> list[tuple[list, tuple, tuple]]:
    """The runs of one file: [(events of the run, run_start, run_stop), ...].

    A file may hold several runs one after the other: each run_start opens a
    run that its run_stop closes. run_start events that follow each other with
    no run_stop between (every rank of a job logging it) open one run, at the
    first of them. Events before the first run_start (eval_target, seeds)
    belong to every run of the file. A run with no run_stop is a LogProblem
    when it is the only one; among several, a later unclosed one is reported
    by the caller through the count.
    """
    note = bad_lines_note(bad, nlines)
    if not any(e[1] == "run_start" for e in events):
        raise LogProblem("no run_start" + note)
    preamble: list = []
    runs: list[list] = []
    current: list | None = None
    closed = True
    for e in events:
        if e[1] == "run_start":
            if current is not None and not closed:
                current.append(e)  # another rank's run_start: the same run
                continue
            current = list(preamble) + [e] if not runs else [e]
            runs.append(current)
            closed = False
        elif current is None:
            preamble.append(e)
        else:
            current.append(e)
            if e[1] == "run_stop" and not closed:
                closed = True
    out = []
    for evs in runs:
        start = next(e for e in evs if e[1] == "run_start")
        stops = [e for e in evs if e[1] == "run_stop"]
        if not stops:
            if len(runs) == 1:
                raise LogProblem("no run_stop: the log is truncated or the run did not finish" + note)
            out.append((evs, start, None))
            continue
        stop = stops[0]
        if stop[0] < start[0]:
            raise LogProblem("run_stop is earlier than run_start")
        out.append((evs, start, stop))
    return out


def facts_per_run(runs: list[tuple], bad: list[int], nlines: int, facts_of) -> list[LogFacts]:
    """One LogFacts per run of ``split_runs``' list, by ``facts_of(events, start, stop)``: each with the
    file's unreadable-lines warning and its place in the file; a run without run_stop is a LogProblem."""
    warnings = [bad_lines_note(bad, nlines).lstrip("; ")] if bad else []
    out = []
    for n, (evs, start, stop) in enumerate(runs, 1):
        if stop is None:
            raise LogProblem(f"run {n} of {len(runs)} in the file has no run_stop")
        f = facts_of(evs, start, stop)
        f.warnings = list(warnings)
        f.run_in_file, f.runs_in_file = n, len(runs)
        out.append(f)
    return out


def timed_run(
    fmt: str,
    bench,
    t0: float,
    t1: float,
    verdict: tuple,
    epochs,
    quality,
    speed: tuple,
    *,
    seed=None,
    target=None,
    sample_unit: str | None = None,
) -> LogFacts:
    """The facts of a run clocked run_start (``t0``) to run_stop (``t1``): its time to train is that span where it
    succeeded. ``verdict``: (success, outcome, reason); ``speed``: (samples/s, its basis); seed, target and
    sample_unit where the log gives them."""
    success, outcome, reason = verdict
    sps = limits.measurement(speed[0])  # a count of 1e308 samples per epoch makes no figure (nor an inf to plot)
    return LogFacts(
        fmt=fmt,
        benchmark=bench,
        platform=None,
        seed=seed,
        start_s=t0,
        stop_s=t1,
        success=success,
        outcome=outcome,
        reason=reason,
        ttt_s=(t1 - t0) if success else None,
        epochs=epochs,
        quality=quality,
        target=target,
        samples_per_s=sps,
        throughput_basis=speed[1] if sps is not None else None,
        warnings=[],
        sample_unit=sample_unit,
    )


def throughput(spe, timed_epochs, timed_s, epochs, elapsed):
    """(samples/s, basis) or (None, None) when it cannot be computed."""
    if spe and timed_epochs and timed_s > 0:
        return spe * timed_epochs / timed_s, "logged epoch times"
    if spe and epochs and elapsed > 0:
        return spe * epochs / elapsed, "epochs / whole run time"
    return None, None


def samples_per_epoch(bench: str | None, logged, rules: Rules) -> float | None:
    """Samples in one training epoch: the count the log states (its implementation's own
    training set), else the data set's real size in benchmarks.yml, else None."""
    v = num(logged)
    if v and v > 0:
        return v
    b = rules.benchmarks.get(bench) if bench else None
    return float(b.train_samples) if b is not None and b.train_samples else None


def value_of(raw: str | None):
    """A v0.5/v0.6 value: JSON, else a Python literal, else the raw text; (value, parsed)."""
    if raw is None or raw == "":
        return None, True
    try:
        return plaindata.loads(raw), True
    except ValueError:
        pass
    try:
        return plaindata.literal(raw), True
    except ValueError:
        return raw, False


def looks_structured(raw: str | None) -> bool:
    """A value that starts like JSON but does not parse was cut off."""
    return bool(raw) and raw.lstrip()[:1] in '{["'
