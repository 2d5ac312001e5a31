"""MLPerf v0.5 logs: ``:::MLPv0.5.0 <benchmark> <unix s> (<file>:<line>) <key>[: <value>]``.

Reading
-------
The prefix may sit anywhere in a line. A line that repeats an earlier event
word for word from the prefix on (NVIDIA's MXNet logs print every event twice,
the second time behind ``INFO:mlperf_compliance::`` or ``DEBUG:...``) is that
event, not a second one. A file may hold several runs (lab.results.logfacts.split_runs). Only the events the rules
below read are kept (hyperparameter and model-shape events are thousands per log).

The v0.5 rules (training_rules.adoc of the v0.5 round)
------------------------------------------------------
clock      "All official run results will be extracted from the log based on
           the start and end tags": run_start to run_stop.
success    run_stop's {"success": ...} flag (true/false, also as the strings
           "true"/"false"); without a flag, an eval_accuracy up to run_stop
           that meets eval_target (the logged one, else lab/data/benchmarks.yml).
epochs     distinct train_epoch values up to the end (the eval that met the
           target, else run_stop), or that eval's epoch + 1 (epochs count from 0)
           where that is more.
throughput samples per epoch (lab.results.logfacts.samples_per_epoch) x epochs run /
           the time from the first train_epoch to the end, less the time
           spent between eval_start and eval_stop; where the train_epoch events
           do not mark time (absent, or all logged at one moment after the run),
           x epochs / the whole run (its basis says so).
"""

from __future__ import annotations

import json
import re

from lab.results.logfacts import (
    LogFacts,
    check_benchmarks,
    facts_per_run,
    fmt_quality,
    integer,
    looks_structured,
    num,
    samples_per_epoch,
    split_runs,
    timed_run,
    value_of,
)
from lab.core.mlperf import Rules

V05_PREFIX = ":::MLPv0.5.0"
_LINE = re.compile(
    r":::MLPv0\.5\.0\s+(\S+)\s+([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s+\(([^)]*)\)\s+(\w+)"
    r"(?:\s*:\s*(.*?))?\s*$"
)
_TRUE, _FALSE = (True, "true", "True"), (False, "false", "False")
# The keys whose values the rules read; other events keep only their time and key.
READ_KEYS = {
    "run_start",
    "run_stop",
    "eval_accuracy",
    "eval_target",
    "train_epoch",
    "eval_start",
    "eval_stop",
    "run_set_random_seed",
    "preproc_num_train_examples",
}


_TAIL = re.compile(r":::MLPv0\.5\.0[^\n]*")


def decode_v05(text: str) -> tuple[list[tuple], list[str], list[int], int]:
    """(events, benchmark names, unreadable line numbers, last line with the prefix)."""
    events, bad = [], []
    names: set[str] = set()
    seen = set()
    last_pos = -1
    for m0 in _TAIL.finditer(text):
        last_pos = m0.start()
        tail = m0.group(0).strip()
        if tail in seen:
            continue
        seen.add(tail)
        close = tail.find(") ")
        if close > 0:
            key = tail[close + 2 :].split(":", 1)[0].strip()
            if key not in READ_KEYS and key.isidentifier():
                # An event the rules do not read (hyperparameters, model shapes): only its
                # benchmark name counts, for the one-benchmark-per-file check.
                names.add(tail[len(V05_PREFIX) :].split(None, 1)[0] if len(tail) > len(V05_PREFIX) else "")
                continue
        m = _LINE.match(tail)
        if not m:
            bad.append(text.count("\n", 0, m0.start()) + 1)
            continue
        key = m.group(4)
        value = None
        if key in READ_KEYS:
            value, ok = value_of(m.group(5))
            if not ok and looks_structured(m.group(5)):
                bad.append(text.count("\n", 0, m0.start()) + 1)
                continue
        names.add(m.group(1))
        events.append((float(m.group(2)), key, value, {"src": m.group(3)}))
    last = text.count("\n", 0, last_pos) + 1 if last_pos >= 0 else 0
    return events, sorted(names), bad, last


def parse_v05(text: str, rules: Rules) -> list[LogFacts]:
    events, names, bad, last = decode_v05(text)
    return runs_from_events(events, names, bad, last or text.count("\n") + 1, rules)


def runs_from_events(events, names, bad, nlines, rules: Rules, fmt: str = "v0.5", target=None) -> list[LogFacts]:
    """One LogFacts per run of a list of events in v0.5's vocabulary. ``target``: the round's
    quality target where the log logs none (default: lab/data/benchmarks.yml's)."""
    bench = check_benchmarks(names, rules)
    runs = split_runs(events, bad, nlines)
    logged_target = next((e[2] for e in reversed(events) if e[1] == "eval_target"), None)
    target = logged_target if logged_target is not None else target
    if target is None and bench in rules.benchmarks:
        target = rules.benchmarks[bench].target
    spe = samples_per_epoch(
        bench, next((e[2] for e in reversed(events) if e[1] == "preproc_num_train_examples"), None), rules
    )

    def facts_of(evs, start, stop) -> LogFacts:
        f = _facts(evs, start, stop, bench, target, spe, rules)
        f.fmt = fmt
        return f

    return facts_per_run(runs, bad, nlines, facts_of)


def _facts(evs, start, stop, bench, target, spe, rules: Rules) -> LogFacts:
    t0, t1 = start[0], stop[0]
    window = [e for e in evs if t0 <= e[0] <= t1]
    evals = []  # (time, epoch, value, position in window)
    for pos, e in enumerate(window):
        if e[1] != "eval_accuracy":
            continue
        if isinstance(e[2], dict) and "value" in e[2]:
            evals.append((e[0], e[2].get("epoch"), e[2]["value"], pos))
        else:
            evals.append((e[0], None, e[2], pos))
    quality = evals[-1][2] if evals else None
    met = next((ev for ev in evals if rules.meets(ev[2], target)), None) if target is not None else None
    success, outcome, reason, cut = _outcome(stop, evals, met, quality, target, len(window))
    done = window[:cut]
    train_epochs = [e for e in done if e[1] == "train_epoch"]
    # Epochs: the distinct train_epoch values, or the evaluated epoch (numbered from 0) + 1
    # where that is more (Google's TPU logs mark only epoch 0 with train_epoch).
    counted = float(len({json.dumps(e[2], sort_keys=True) for e in train_epochs})) if train_epochs else None
    ref = met if (success and met) else (evals[-1] if evals else None)
    evaluated = num(ref[1]) if ref else None
    evaluated = evaluated + 1.0 if evaluated is not None and evaluated >= 0 else None
    epochs = max((x for x in (counted, evaluated) if x is not None), default=None)
    sps, basis = _throughput(done, train_epochs, spe, epochs, t0, t1)
    seed = next((integer(e[2]) for e in evs if e[1] == "run_set_random_seed"), None)
    return timed_run(
        "v0.5", bench, t0, t1, (success, outcome, reason), epochs, quality, (sps, basis), seed=seed, target=target
    )


def _outcome(stop, evals: list, met, quality, target, n_window: int) -> tuple[bool, str, str, int]:
    """(success, outcome, reason, how many events of the run's window count): run_stop's success flag where
    it has one, else the first eval_accuracy that meets the target (the run ends there)."""
    flag = stop[2].get("success") if isinstance(stop[2], dict) else None
    cut = met[3] + 1 if met else n_window
    if flag in _TRUE or flag in _FALSE:
        success = flag in _TRUE
        outcome = "success" if success else "target_missed"
        reason = f"run_stop success {str(flag).lower()}"
        if quality is not None:
            reason += f" (last eval_accuracy {fmt_quality(quality)})"
        return success, outcome, reason, cut if success else n_window
    if met is not None:
        at = f" at epoch {met[1]}" if met[1] is not None else ""
        return True, "success", f"eval_accuracy {fmt_quality(met[2])} met target {fmt_quality(target)}{at}", cut
    if target is None:
        reason = "run_stop has no success flag and no target is known"
    elif not evals:
        reason = f"no eval_accuracy logged (target {fmt_quality(target)})"
    else:
        reason = f"no eval_accuracy met target {fmt_quality(target)} (last {fmt_quality(quality)})"
    return False, "target_missed", reason, cut


def _throughput(done: list, train_epochs: list, spe, epochs, t0: float, t1: float) -> tuple[float | None, str | None]:
    """(samples per second, its basis): from the first train_epoch with evaluation time excluded, else over
    the whole run; (None, None) without samples per epoch or epochs."""
    end_t = done[-1][0] if done else t1
    sps = basis = None
    if spe and train_epochs and epochs and len({e[0] for e in train_epochs}) > 1:
        first = train_epochs[0][0]
        in_eval = _eval_time(done, first, end_t)
        span = end_t - first - in_eval
        if span > 0:
            sps = spe * epochs / span
            basis = (
                f"{epochs:g} epochs of {spe:,.0f} samples in {span:,.0f} s from the first "
                f"train_epoch, {in_eval:,.0f} s of evaluation excluded"
            )
    if sps is None and spe and epochs and end_t > t0:
        # Epoch events missing, or logged after the fact (all at one time): whole-run rate.
        sps = spe * epochs / (end_t - t0)
        basis = (
            f"{epochs:g} epochs of {spe:,.0f} samples over the whole run ({end_t - t0:,.0f} s, "
            "initialization and evaluation included)"
        )
    return sps, basis


def _eval_time(events, t_from: float, t_to: float) -> float:
    total, opened = 0.0, None
    for e in events:
        if e[0] < t_from or e[0] > t_to:
            continue
        if e[1] == "eval_start" and opened is None:
            opened = e[0]
        elif e[1] == "eval_stop" and opened is not None:
            total += e[0] - opened
            opened = None
    if opened is not None:  # the evaluation that ends the run
        total += t_to - opened
    return total
