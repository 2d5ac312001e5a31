"""gpulab's scores of a published MLPerf Training round (v0.7 on) beside mlperf-logging's
result_summarizer's, row by row.

    python benchmarks/rounds_compare.py TREE [--round v4.0] [--detect] [--show N] [--json FILE]

TREE is a round's result tree (``training_results_v4.0/``: one folder per submitter with
``results/`` and ``systems/``), or the bare git directory of one
(``/work/.mirror/mlcommons+training_results_v4.0/repo`` from a fetch): its results/ and
systems/ files are then unpacked into a temporary folder first (benchmarks/mlperf_scores.py).

Both sides score the same files:
- the summarizer (``summarize_results(<submitter folder>, "training", <the round's ruleset>)``,
  in this process, one submitter at a time, on a scratch copy of the tree: its RCP check
  rewrites a benchmark's scaling.json). A submitter on which it raises is "aborted" (the
  command line tool would stop the whole round there); a system without systems/<name>.json
  it skips;
- gpulab's report (lab.results.logreader.read_runs with the round named, lab.report.analysis.analyse).
  Without --round the round is gpulab's: the folder name, else the logs (lab.results.rounddetect),
  and the summarizer is told that round's ruleset. With --detect gpulab reads a hard-linked copy
  in a folder named neutrally, without the round: it finds the round from the logs (the line it
  printed is shown).

A row is a submitter folder x system folder x benchmark with a score. "matched": the
summarizer's rows that gpulab also scores; "equal": within 0.01 minute or 0.1 %. It prints
the counts, every row that differs or that one side lacks, and how long each side took (wall
and CPU seconds). The summarizer's detailed columns (GBS, samples_to_converge, Energy,
rcp_scaling_factor) are compared with the records' batch_size, samples_to_converge, energy_j
and scaling_factor for every benchmark folder the summarizer reports (equal: 1e-6 relative).
The functions are also what tests/unit/report/test_report_rounds*.py compare with.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ABS_TOL_MIN = 0.01
REL_TOL = 0.001
# The summarizer's detailed columns ("<benchmark>:<column>") and gpulab's record fields.
DETAIL_COLUMNS = {
    "GBS": "batch_size",
    "samples_to_converge": "samples_to_converge",
    "Energy": "energy_j",
    "rcp_scaling_factor": "scaling_factor",
}


@dataclass
class Side:
    rows: dict = field(default_factory=dict)  # (submitter folder, system folder, benchmark) -> minutes
    notes: dict = field(default_factory=dict)  # same key -> gpulab's mark (gpulab side only)
    detail: dict = field(default_factory=dict)  # same key -> {column: value} of DETAIL_COLUMNS
    aborted: dict = field(default_factory=dict)  # submitter folder -> why (summarizer side only)
    skipped: list = field(default_factory=list)  # what the summarizer printed about skipped systems
    found: list = field(default_factory=list)  # gpulab's line on the round it detected (gpulab side)
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def scratch_copy(src: Path, dest: Path) -> Path:
    """``src`` as hard links under ``dest``; scaling.json files as real copies (the summarizer
    deletes and rewrites them)."""
    for dirpath, _dirs, files in os.walk(src):
        here = Path(dirpath)
        out = dest / here.relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        for name in files:
            s, d = here / name, out / name
            if name == "scaling.json" or s.is_symlink():
                if s.is_file():
                    shutil.copyfile(s, d)
                continue
            try:
                os.link(s, d)
            except OSError:
                shutil.copyfile(s, d)
    return dest


def _submitters(tree: Path) -> list[Path]:
    return [p for p in sorted(tree.iterdir()) if p.is_dir() and (p / "systems").exists() and (p / "results").exists()]


@contextlib.contextmanager
def _silenced(buf: io.StringIO):
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            yield
    finally:
        logging.disable(previous)


def summarizer_side(tree: Path, ruleset: str) -> Side:
    """The summarizer's scores of every submitter folder of ``tree`` (run on a scratch copy)."""
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks
    from mlperf_logging.result_summarizer import result_summarizer as rs

    side = Side()
    benchmarks = get_allowed_benchmarks("training", ruleset)
    t0, c0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="summarizer-") as tmp:
        copy = scratch_copy(tree, Path(tmp) / tree.name)
        for org in _submitters(copy):
            buf = io.StringIO()
            try:
                with _silenced(buf):
                    summary = rs.summarize_results(str(org), "training", ruleset)
                    strong, detailed = summary[0], summary[2]
            except Exception as exc:  # the summarizer's own failure on this submitter
                cause = exc.__context__ or exc.__cause__  # its FieldError handler itself raises
                why = " <- ".join(
                    f"{type(e).__name__}: {' '.join(str(e).split())[:120]}" for e in (exc, cause) if e is not None
                )
                side.aborted[org.name] = why
                continue
            finally:
                side.skipped += [
                    f"{org.name}: {line.strip()}"
                    for line in buf.getvalue().splitlines()
                    if line.startswith("ERROR: Missing")
                ]
            for rec in strong.to_dict("records"):
                system = Path(str(rec["details_url"])).name.removesuffix(".json")
                for b in benchmarks:
                    v = rec.get(b)
                    if _value(v) is not None:
                        side.rows[(org.name, system, b)] = float(v)
            for rec in [] if isinstance(detailed, dict) or len(detailed) == 0 else detailed.to_dict("records"):
                system = Path(str(rec["details_url"])).name.removesuffix(".json")
                for b in benchmarks:
                    cols = {c: _value(rec.get(f"{b}:{c}")) for c in DETAIL_COLUMNS}
                    cols = {c: v for c, v in cols.items() if v is not None}
                    if (org.name, system, b) in side.rows or set(cols) - {"rcp_scaling_factor"}:
                        side.detail[(org.name, system, b)] = cols
    side.seconds, side.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    return side


def _value(v):
    """A number of the summarizer's table, None for its empty cells."""
    if v is None or isinstance(v, str) or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def gpulab_side(tree: Path, round_name: str | None) -> Side:
    """gpulab's report scores of ``tree`` read as round ``round_name`` (None: as gpulab finds it)."""
    from lab.report.analysis import analyse
    from lab.results.logreader import read_runs

    side = Side()
    t0, c0 = time.perf_counter(), time.process_time()
    coll = read_runs([tree], round=round_name)
    runs, side.found = coll.runs, list(coll.notes)
    for r in analyse(runs).systems:
        if not r.get("system_key"):
            continue
        parts = Path(r["system_key"]).parts
        key = (parts[0], parts[-1], r["benchmark"])
        side.notes[key] = r.get("mark") or ""
        if r.get("score_minutes") is not None:
            side.rows[key] = r["score_minutes"]
        side.detail[key] = {c: r.get(f) for c, f in DETAIL_COLUMNS.items() if r.get(f) is not None}
    side.seconds, side.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    return side


def equal(a: float, b: float) -> bool:
    return abs(a - b) <= ABS_TOL_MIN or abs(a - b) <= REL_TOL * abs(b)


@dataclass
class Comparison:
    summarizer_rows: int
    matched: int
    equal: int
    differ: list  # (key, summarizer, gpulab)
    summarizer_only: list  # (key, summarizer, gpulab's mark)
    gpulab_only: list  # (key, gpulab, why the summarizer has none)


def compare(s: Side, g: Side) -> Comparison:
    differ, s_only, g_only = [], [], []
    matched = eq = 0
    for key, v in sorted(s.rows.items()):
        if key not in g.rows:
            s_only.append((key, v, g.notes.get(key, "no record")))
            continue
        matched += 1
        if equal(g.rows[key], v):
            eq += 1
        else:
            differ.append((key, v, g.rows[key]))
    for key, v in sorted(g.rows.items()):
        if key not in s.rows:
            why = s.aborted.get(key[0])
            why = f"summarizer aborted on {key[0]} ({why})" if why else "no summarizer score"
            g_only.append((key, v, why))
    return Comparison(len(s.rows), matched, eq, differ, s_only, g_only)


@dataclass
class DetailComparison:
    compared: dict  # column -> values both sides have
    equal: dict  # column -> of those, equal
    differ: list  # (key, column, summarizer, gpulab)
    one_side: list  # (key, column, summarizer or None, gpulab or None)


def detail_equal(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 + 1e-6 * abs(b)


def compare_detail(s: Side, g: Side) -> DetailComparison:
    """The summarizer's detailed columns (GBS, samples_to_converge, Energy, rcp_scaling_factor)
    beside gpulab's, for every benchmark folder the summarizer reports."""
    compared = {c: 0 for c in DETAIL_COLUMNS}
    eq = {c: 0 for c in DETAIL_COLUMNS}
    differ, one = [], []
    for key, cols in sorted(s.detail.items()):
        mine = g.detail.get(key, {})
        for c in DETAIL_COLUMNS:
            a, b = cols.get(c), mine.get(c)
            if a is None and b is None:
                continue
            if a is None or b is None:
                if c != "rcp_scaling_factor" or a is not None:
                    one.append((key, c, a, b))
                continue
            compared[c] += 1
            if detail_equal(a, b):
                eq[c] += 1
            else:
                differ.append((key, c, a, b))
    return DetailComparison(compared, eq, differ, one)


def _unpacked(tree: Path, tmp: str, round_name: str) -> Path:
    if (tree / "HEAD").is_file() and (tree / "objects").is_dir():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from mlperf_scores import unpack

        root = Path(tmp) / (f"training_results_{round_name}" if round_name else "tree")
        unpack(tree, root)
        return root
    return tree


def _round_of(tree: Path, named: str | None) -> tuple[str | None, str]:
    """(round, how it was found): the one named, else gpulab's (a training_results_vX.Y folder,
    else the logs: lab.results.rounddetect)."""
    from lab.core.mlperf import default_rules
    from lab.results import rounddetect, roundtree

    rules = default_rules()
    if named:
        return named, "named with --round"
    rnd = roundtree.round_of_path(tree, rules)
    if rnd:
        return rnd, f"the folder name {tree.name}"
    found = rounddetect.detect(tree, rules)
    return found.round, found.line or "no round found in the logs"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree", type=Path)
    ap.add_argument(
        "--round",
        help="the round of the tree, e.g. v4.0 (lab/data/rounds.yml); default: "
        "as gpulab finds it (the folder name, else the logs)",
    )
    ap.add_argument(
        "--detect",
        action="store_true",
        help="gpulab's side without the round: it finds the round itself, in a folder named "
        "neutrally (the summarizer is still told --round's ruleset)",
    )
    ap.add_argument("--show", type=int, default=20, help="rows of each kind to print (default 20)")
    ap.add_argument("--json", type=Path, help="also write the counts and rows here")
    args = ap.parse_args(argv)
    from lab.core.errors import ConfigError
    from lab.core.mlperf import default_rules

    if not args.tree.is_dir():
        print(f"rounds_compare: {args.tree}: no such folder", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rounds-compare-") as tmp:
        bare = (args.tree / "HEAD").is_file() and (args.tree / "objects").is_dir()
        if bare and not args.round:
            print("rounds_compare: a git directory needs --round", file=sys.stderr)
            return 2
        tree = _unpacked(args.tree, tmp, args.round or "")
        try:
            rnd, how = _round_of(tree, args.round)
        except ConfigError as exc:
            print(f"rounds_compare: {exc}", file=sys.stderr)
            return 2
        table = default_rules().rounds.get(rnd) if rnd else None
        if not table or not table.get("ruleset") or table.get("failed_runs") != "slowest":
            print(
                f"rounds_compare: {rnd or args.tree}: not a round that result_summarizer scores (v0.7 on)",
                file=sys.stderr,
            )
            return 2
        mine = tree
        if args.detect:
            mine = scratch_copy(tree, Path(tmp) / "neutral" / "tree")  # hard links
        s = summarizer_side(tree, table["ruleset"])
        g = gpulab_side(mine, None if args.detect else rnd)
    c = compare(s, g)
    d = compare_detail(s, g)
    print(f"== {args.tree} as {rnd} (ruleset {table['ruleset']}; {how})")
    if args.detect:
        print(f"gpulab, no round given: {'; '.join(g.found) or 'found no round'}")
    print(
        f"summarizer: {c.summarizer_rows} rows in {s.seconds:.1f} s ({s.cpu_seconds:.1f} s CPU); "
        f"{len(s.aborted)} submitter(s) aborted, {len(s.skipped)} system(s) skipped"
    )
    print(f"gpulab:     {len(g.rows)} scored rows in {g.seconds:.1f} s ({g.cpu_seconds:.1f} s CPU)")
    print(f"matched {c.matched} of {c.summarizer_rows}, equal {c.equal} of {c.matched}")
    print(
        "detailed columns, equal of compared: "
        + ", ".join(f"{col} {d.equal[col]} of {d.compared[col]}" for col in DETAIL_COLUMNS)
        + f"; on one side only: {len(d.one_side)}"
    )
    for name, rows in (("differ", c.differ), ("summarizer only", c.summarizer_only), ("gpulab only", c.gpulab_only)):
        if rows:
            print(f"-- {name}: {len(rows)}")
            for key, a, b in rows[: args.show]:
                print(
                    f"   {'/'.join(key)}: {a if isinstance(a, str) else round(a, 4)}  |  "
                    f"{b if isinstance(b, str) else round(b, 4)}"
                )
    for name, rows in (("detail differs", d.differ), ("detail on one side", d.one_side)):
        if rows:
            print(f"-- {name}: {len(rows)}")
            for key, col, a, b in rows[: args.show]:
                print(f"   {'/'.join(key)} {col}: {a}  |  {b}")
    for org, why in s.aborted.items():
        print(f"-- summarizer aborted on {org}: {why}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "round": rnd,
                    "ruleset": table["ruleset"],
                    "found": how,
                    "detected": g.found,
                    "summarizer_rows": c.summarizer_rows,
                    "gpulab_rows": len(g.rows),
                    "matched": c.matched,
                    "equal": c.equal,
                    "detail_compared": d.compared,
                    "detail_equal": d.equal,
                    "detail_differ": [["/".join(k), col, a, b] for k, col, a, b in d.differ],
                    "detail_one_side": [["/".join(k), col, a, b] for k, col, a, b in d.one_side],
                    "summarizer_seconds": s.seconds,
                    "gpulab_seconds": g.seconds,
                    "summarizer_cpu_seconds": s.cpu_seconds,
                    "gpulab_cpu_seconds": g.cpu_seconds,
                    "aborted": s.aborted,
                    "differ": [["/".join(k), a, b] for k, a, b in c.differ],
                    "summarizer_only": [["/".join(k), a, b] for k, a, b in c.summarizer_only],
                    "gpulab_only": [["/".join(k), a, b] for k, a, b in c.gpulab_only],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
