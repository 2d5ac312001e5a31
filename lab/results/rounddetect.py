"""The round of a published MLPerf Training result tree, read from its logs.

Used when no round is named (``--round``) and no folder of the input path is named
as a round's results repository (lab.results.roundtree). The logs carry no field
that names their round or ruleset (mlperf-logging's compliance checker and
result_summarizer are told the ruleset by their caller), so two things in the tree
decide, and the report says which in one line:

1. The benchmark folders ``results/<system>/<benchmark>/`` that hold ``result_*.txt``
   MLLOG files (the names result_summarizer scores and the logs' submission_benchmark):
   the rounds of lab/data/rounds.yml whose ``benchmarks`` hold all of them. One such
   round: that round. None, while every benchmark is of some round: the tree mixes
   rounds, and it is refused (ConfigError: report each round's folders apart, or name
   one with --round).
2. Several such rounds (a benchmark run in several rounds): the logs' dates. Each
   result file's first ``:::MLLOG`` line has ``time_ms``; their median (a submitter's
   wrong clock moves it little) is dated against the rounds' ``published`` days: the
   first of those rounds published on or after it; logs newer than the newest such
   round's results are read as that round, and the line says so.

Only the first HEAD_BYTES (8 KiB, else 1 MiB) of at most DATED_PER_FOLDER result files per benchmark
folder are read (lab.core.bounded: regular files inside the input root). A tree
with no such MLLOG file has no round here (v0.5/v0.6 logs are scored by their format).
"""

from __future__ import annotations

import calendar
import re
import statistics
from dataclasses import dataclass
from datetime import date, datetime, timezone
from fnmatch import fnmatchcase
from pathlib import Path

from lab.core import bounded
from lab.core.errors import ConfigError

HEAD_BYTES = (8 << 10, 1 << 20)  # read first; read again where the first MLLOG line is further on
DATED_PER_FOLDER = 5
MAX_FOLDERS = 20000
_MARK = b":::MLLOG"
_TIME = re.compile(rb'"time_ms"\s*:\s*([0-9]{9,16})(?![0-9])')
MAX_TIME_MS = 10**15  # lab.results.mllog's bound: a larger time_ms is not a time


@dataclass(frozen=True)
class Detected:
    round: str | None
    line: str  # what was found and from which field; "" when the tree has no round's logs


def published_day(text: str) -> date:
    """``YYYY-MM-DD``, or the last day of ``YYYY-MM``."""
    parts = [int(x) for x in str(text).split("-")]
    if len(parts) == 2:
        parts.append(calendar.monthrange(parts[0], parts[1])[1])
    return date(*parts)


def benchmark_folders(root: Path) -> dict[Path, list[Path]]:
    """results/<system>/<benchmark>/ folders under ``root`` -> their result_*.txt files
    (natural order); nothing below a benchmark folder is listed."""
    out: dict[Path, list[Path]] = {}
    for dirpath, dirnames, filenames in bounded.walk(root):
        here = Path(dirpath)
        depth = _below_results(here)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        if depth == 2:
            dirnames[:] = []
            runs = sorted(
                (here / f for f in filenames if fnmatchcase(f, "result_*.txt")),
                key=lambda p: [int(x) if i % 2 else x for i, x in enumerate(re.split(r"(\d+)", p.name))],
            )
            if runs:
                out[here] = runs
                if len(out) >= MAX_FOLDERS:
                    break
    return out


def _below_results(folder: Path) -> int | None:
    for depth, name in enumerate(reversed(folder.parts)):
        if name == "results":
            return depth
    return None


def first_time_ms(path: Path, root: Path) -> int | None:
    """time_ms of the file's first :::MLLOG line; None: no such line in its head, or unreadable."""
    for limit in HEAD_BYTES:
        try:
            head = bounded.read_head(path, root=root, limit=limit)
        except bounded.Unreadable:
            return None
        k = head.find(_MARK)
        if k >= 0 and head.find(b"\n", k) >= 0:
            break
        if len(head) < limit:
            break
    if k < 0:
        return None
    line = head[k : head.find(b"\n", k) if head.find(b"\n", k) >= 0 else len(head)]
    m = _TIME.search(line)
    t = int(m.group(1)) if m else None
    return t if t is not None and _day(t) is not None and t < MAX_TIME_MS else None


def _day(ms: int) -> date | None:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).date()
    except (OverflowError, OSError, ValueError):
        return None


def _span(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} to {names[-1]}"


def detect(root: Path, rules) -> Detected:
    """The round of the MLLOG result tree under ``root`` (module docstring); ConfigError for a
    tree whose benchmarks are of no one round."""
    root = Path(root)
    scored = {n: t for n, t in rules.rounds.items() if t.get("failed_runs") == "slowest" and t.get("format") == "mllog"}
    folders = benchmark_folders(root) if root.is_dir() else {}
    dated: dict[str, list[int]] = {}
    for folder, files in folders.items():
        name = folder.name
        bench = rules.benchmark(name)
        bench = bench if bench in rules.benchmarks else name
        stamps = [t for t in (first_time_ms(f, root) for f in files[:DATED_PER_FOLDER]) if t is not None]
        if stamps:  # MLLOG result files (v0.5/v0.6 logs have none)
            dated.setdefault(bench, []).extend(stamps)
    known = {b: [n for n, t in scored.items() if b in t["benchmarks"]] for b in dated}
    known = {b: rs for b, rs in known.items() if rs}
    if not known:
        return Detected(None, "")
    benches = sorted(known)
    candidates = [n for n in scored if all(n in known[b] for b in benches)]
    if not candidates:
        groups = "; ".join(f"{b} ({_span(known[b])})" for b in benches)
        raise ConfigError(
            f"{root}: its logs are of several MLPerf rounds (benchmark folders {groups}): "
            "report each round's folders apart, or name the round with --round"
        )
    what = f"benchmark folders {', '.join(benches)}"
    if len(candidates) == 1:
        rnd = candidates[0]
        return Detected(
            rnd,
            f"round {rnd} (training {scored[rnd]['ruleset']} ruleset) detected from the "
            f"logs of {root}: {what}, of {rnd} alone",
        )
    stamps = sorted(t for b in benches for t in dated[b])
    day = _day(statistics.median_low(stamps))
    later = [n for n in candidates if day is not None and published_day(scored[n]["published"]) >= day]
    rnd = later[0] if later else candidates[-1]
    pub = scored[rnd]["published"]
    when = f"the median first time_ms of {len(stamps)} result file(s) is {day}, " + (
        f"before {rnd}'s results ({pub})"
        if later
        else f"after the newest such round's results ({rnd}, {pub}): read as {rnd}"
    )
    return Detected(
        rnd,
        f"round {rnd} (training {scored[rnd]['ruleset']} ruleset) detected from the logs "
        f"of {root}: {what}, of {_span(candidates)}; {when}",
    )
