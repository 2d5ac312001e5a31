"""MLPerf v0.6 logs: ``:::MLL <unix s> <key>: {"value": ..., "metadata": {...}}``.

One v0.6 submission (Alibaba's) logged v0.5's vocabulary in another syntax:
``MLPerf: <benchmark> [mm/dd/yy HH:MM:SS], <key>[: <value>]``, whole seconds, accuracy
as "74.316%". Those logs are read with v0.5's meaning (lab.results.v05log: run_stop carries no
flag, so success is an eval_accuracy meeting the v0.6 target of lab/data/rounds.yml)
and scored by the v0.6 rules; the compliance checker, which reads only ``:::MLL``
lines, finds none in them.

The events mean what MLLOG's do (lab.results.mllog): the clock runs from
run_start (v0.6 moved it after initialization, init_start..init_stop) to
run_stop with metadata status "success". The prefix may sit anywhere in a
line; an event repeated word for word is one event.

MiniGo is the exception the v0.6 rules make: its time to train is the time
from run_start at which the first model that reaches the target was saved,
which the evaluation logs afterwards as ``eval_result`` with that time in
metadata ``timestamp`` (seconds); a run without it did not converge.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from lab.results import v05log
from lab.results.logfacts import LogFacts, LogProblem, looks_structured, value_of
from lab.results.mllog import runs_from_events
from lab.core.mlperf import Rules

V06_PREFIX = ":::MLL"
_LINE = re.compile(r":::MLL\s+([0-9]+(?:\.[0-9]*)?)\s+(\w+)\s*:\s*(.*?)\s*$")
_LEGACY = re.compile(r"^MLPerf: (\w+) \[(\d\d/\d\d/\d\d \d\d:\d\d:\d\d)\], (\w+)(?:\s*:\s*(.*?))?\s*$", re.M)
_PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)%")


def is_v06(text: str) -> bool:
    """``:::MLL `` lines that are not ``:::MLLOG`` ones, or the ``MLPerf: `` lines of one v0.6 submission."""
    if _LEGACY.search(text[: 1 << 16]):
        return True
    i = text.find(V06_PREFIX)
    while i >= 0:
        if not text.startswith("OG", i + len(V06_PREFIX)):
            return True
        i = text.find(V06_PREFIX, i + 1)
    return False


def decode_v06(lines: list[str]) -> tuple[list[tuple], list[int], int]:
    events, bad = [], []
    seen = set()
    last = 0
    for i, line in enumerate(lines, 1):
        k = line.find(V06_PREFIX)
        if k < 0 or line.startswith("OG", k + len(V06_PREFIX)):
            continue
        last = i
        tail = line[k:].strip()
        if tail in seen:
            continue
        seen.add(tail)
        m = _LINE.match(tail)
        if not m:
            bad.append(i)
            continue
        raw = m.group(3)
        doc, ok = value_of(raw)
        if not ok and looks_structured(raw) or not isinstance(doc, dict):
            bad.append(i)
            continue
        md = doc.get("metadata")
        events.append((float(m.group(1)), m.group(2), doc.get("value"), md if isinstance(md, dict) else {}))
    return events, bad, last


def parse_v06(lines: list[str], rules: Rules) -> list[LogFacts]:
    if not any(V06_PREFIX in x for x in lines):
        return _parse_legacy(lines, rules)
    events, bad, last = decode_v06(lines)
    minigo = any(e[1] == "submission_benchmark" and rules.benchmark(e[2]) == "minigo" for e in events)
    if minigo and events and not any(e[1] == "run_stop" for e in events):
        # MiniGo's v0.6 runs log no run_stop: the evaluation after training ends the log.
        events = events + [(max(e[0] for e in events), "run_stop", None, {"synthetic": True})]
    facts = runs_from_events(events, bad, last or len(lines), rules, "v0.6")
    for f in facts:
        if f.benchmark == "minigo":
            _minigo_clock(f, events)
    return facts


def _minigo_clock(f: LogFacts, events: list[tuple]):
    """MiniGo's v0.6 clock: eval_result's metadata timestamp, seconds after run_start."""
    res = [e for e in events if e[1] == "eval_result" and f.start_s <= e[0]]
    ts = None
    for e in res:
        t = e[3].get("timestamp")
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0:
            ts = float(t)
            break
    f.clock = "run_start to the saving of the first model that met the target (eval_result timestamp)"
    if ts is None:
        f.success, f.outcome, f.ttt_s = False, "target_missed", None
        f.reason = "no eval_result with a timestamp: no model met the target"
        return
    if ts > f.stop_s - f.start_s + 1e-6 and f.stop_s > f.start_s:
        raise LogProblem("eval_result timestamp lies after run_stop")
    f.success, f.outcome, f.ttt_s = True, "success", ts
    f.reason = f"eval_result: the model saved {ts:,.1f} s after run_start met the target"


def _parse_legacy(lines: list[str], rules: Rules) -> list[LogFacts]:
    events, names, bad, last = [], set(), [], 0
    seen = set()
    for i, line in enumerate(lines, 1):
        if not line.startswith("MLPerf: "):
            continue
        last = i
        m = _LEGACY.match(line.strip())
        if not m:
            bad.append(i)
            continue
        key, raw = m.group(3), m.group(4)
        t = datetime.strptime(m.group(2), "%m/%d/%y %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        value = None
        if key in v05log.READ_KEYS:
            value, ok = value_of(_PERCENT.sub(lambda p: repr(float(p.group(1)) / 100.0), raw) if raw else raw)
            if not ok and looks_structured(raw):
                bad.append(i)
                continue
        if (t, key, raw) in seen and key not in ("run_start",):
            continue
        seen.add((t, key, raw))
        names.add(m.group(1))
        events.append((t, key, value, {}))
    bench = next(iter(names), None)
    canon = rules.benchmark(bench) if bench else None
    target = rules.rounds.get("v0.6", {}).get("targets", {}).get(canon)
    facts = v05log.runs_from_events(events, sorted(names), bad, last or len(lines), rules, "v0.6", target)
    for f in facts:
        f.warnings.append("v0.5 log syntax ('MLPerf: <benchmark> [date], key'), whole-second times")
    return facts
