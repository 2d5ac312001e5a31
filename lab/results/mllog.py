"""MLLOG logs (``:::MLLOG {json}``, mlperf-logging, v0.7 on and gpulab's runner),
and the run facts of every log whose events carry MLLOG's meaning (also
v0.6's ``:::MLL`` lines, decoded by lab.results.v06log).

Per run (lab.results.logfacts.split_runs: several runs in one file are read one by one)
------------------------------------------------------------------------------
time to train  run_start to run_stop when run_stop's metadata status is
               "success" (the MLLOG and v0.6 clock).
epochs         distinct epoch_start epoch_num, else the epoch_count of the
               block_start events, else the epoch_num of the last eval_accuracy.
throughput     samples per epoch (lab.results.logfacts.samples_per_epoch) x epochs
               timed / their time (epoch_start..epoch_stop, else
               block_start..block_stop), else x epochs / whole run time; a
               logged ``throughput`` event (the runner's throughput mode) wins.
"""

from __future__ import annotations


from lab.results.logfacts import (
    LogFacts,
    check_benchmarks,
    facts_per_run,
    fmt_quality,
    integer,
    num,
    samples_per_epoch,
    split_runs,
    throughput,
    timed_run,
)
from lab.core.mlperf import Rules
from lab.core import plaindata

MLLOG_PREFIX = ":::MLLOG"
_DECODE = plaindata.raw_decode
MAX_TIME_MS = 10**15  # unix time in ms until the year 33658: a larger time_ms is not a time


def decode_mllog(lines: list[str]) -> tuple[list[tuple], list[int]]:
    """(events, unreadable line numbers); an event is (time_s, key, value, metadata)."""
    events, bad = [], []
    seen = set()
    for i, line in enumerate(lines, 1):
        k = line.find(MLLOG_PREFIX)
        if k < 0:
            continue
        tail = line[k:].strip()
        if tail in seen:  # the same event echoed by a second logger
            continue
        seen.add(tail)
        try:
            k += len(MLLOG_PREFIX)
            while line[k] in " \t":
                k += 1
            ev, end = _DECODE(line, k)
            if line[end:].strip():
                raise ValueError("text after the JSON object")
            key = ev["key"]
            t = num(ev["time_ms"])
            if t is None or not 0 <= t < MAX_TIME_MS:
                raise ValueError("time_ms is not a time")
            t /= 1000.0
        except (ValueError, KeyError, TypeError, IndexError):
            bad.append(i)
            continue
        md = ev.get("metadata")
        events.append((t, str(key), ev.get("value"), md if isinstance(md, dict) else {}))
    return events, bad


def parse_mllog(lines: list[str], rules: Rules) -> list[LogFacts]:
    events, bad = decode_mllog(lines)
    return runs_from_events(events, bad, len(lines), rules, "mllog")


def runs_from_events(events, bad, nlines, rules: Rules, fmt: str) -> list[LogFacts]:
    """One LogFacts per run of an MLLOG-style event list."""
    bench = check_benchmarks([e[2] for e in events if e[1] == "submission_benchmark"], rules)
    platform = next((str(e[2]) for e in events if e[1] == "submission_platform" and e[2]), None)
    org = next((str(e[2]) for e in events if e[1] == "submission_org" and e[2]), None)
    seed = next((integer(e[2]) for e in events if e[1] == "seed"), None)
    spe_logged = next((e[2] for e in reversed(events) if e[1] == "train_samples"), None)

    def facts_of(evs, start, stop) -> LogFacts:
        f = _facts(evs, start, stop, bench, samples_per_epoch(bench, spe_logged, rules), fmt)
        f.platform, f.seed, f.submitter = platform, seed, org
        return f

    return facts_per_run(split_runs(events, bad, nlines), bad, nlines, facts_of)


def _facts(evs, start, stop, bench, spe, fmt) -> LogFacts:
    t0, t1 = start[0], stop[0]
    window = [e for e in evs if t0 <= e[0] <= t1]
    status = stop[3].get("status")
    success = status == "success"
    evals = [e for e in window if e[1] == "eval_accuracy"]
    quality = evals[-1][2] if evals else None
    if success:
        outcome, reason = "success", "run_stop status success"
        if quality is not None:
            reason += f" (last eval_accuracy {fmt_quality(quality)})"
    elif status is None:
        outcome, reason = "failed", "run_stop carries no status"
    else:
        outcome = "aborted" if status == "aborted" else "target_missed"
        reason = f"run_stop status {status}"

    ep_nums = {e[3].get("epoch_num") for e in window if e[1] == "epoch_start" and "epoch_num" in e[3]}
    blocks = {}
    for e in window:
        if e[1] == "block_start":
            cnt = num(e[3].get("epoch_count"))
            if cnt is not None:
                blocks[e[3].get("first_epoch_num")] = cnt
    if ep_nums:
        epochs = float(len(ep_nums))
    elif blocks:
        epochs = float(sum(blocks.values()))
    else:
        last = next((e for e in reversed(evals) if "epoch_num" in e[3]), None)
        epochs = num(last[3]["epoch_num"]) if last else None

    timed_epochs, timed_s = 0.0, 0.0
    opened = {}
    if ep_nums:
        for e in window:
            if e[1] == "epoch_start" and "epoch_num" in e[3]:
                opened[e[3]["epoch_num"]] = e[0]
            elif e[1] == "epoch_stop" and e[3].get("epoch_num") in opened:
                timed_s += e[0] - opened.pop(e[3]["epoch_num"])
                timed_epochs += 1
    elif blocks:
        for e in window:
            if e[1] == "block_start" and e[3].get("first_epoch_num") in blocks:
                opened[e[3]["first_epoch_num"]] = e[0]
            elif e[1] == "block_stop" and e[3].get("first_epoch_num") in opened:
                first = e[3]["first_epoch_num"]
                timed_s += e[0] - opened.pop(first)
                timed_epochs += blocks[first]
    sps, basis = throughput(spe, timed_epochs, timed_s, epochs, t1 - t0)
    unit = None
    logged = next((e for e in reversed(window) if e[1] == "throughput" and num(e[2])), None)
    if logged is not None:  # the runner's throughput mode logs samples/s itself
        sps, basis = num(logged[2]), "logged throughput event"
        unit = str(logged[3]["unit"]) if logged[3].get("unit") else None
    return timed_run(fmt, bench, t0, t1, (success, outcome, reason), epochs, quality, (sps, basis), sample_unit=unit)
