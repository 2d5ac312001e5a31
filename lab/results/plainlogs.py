"""Plain MLPerf log files (not gpulab run directories) -> ``Run``s.

A file holds ``:::MLLOG`` (lab.results.mllog), ``:::MLL`` (v0.6, lab.results.v06log) or
``:::MLPv0.5.0`` (lab.results.v05log) lines; each run in it becomes one Run. Its
system is, in this order:

1. the published result tree's results folder (lab.results.resulttree): submitter,
   system name, device, accelerator count, nodes and framework from
   ``entry.json`` or ``systems/<system>.json``;
2. an MLPerf ``systems/<system>.json`` beside ``results/`` (older layout
   support: accelerator_model_name, accelerators_per_node x number_of_nodes,
   framework);
3. the log's submission_platform ("4xNVIDIA T4"), else the folder names from
   the file up to the input path ("4xT4", "T4_x4", "v100-3gpu", "2gpus").

Every run of a v0.6 or MLLOG file gets the compliance checker's verdict on the
file (lab.results.compliance); a v0.5 file is "not checked" (no ruleset exists).
"""

from __future__ import annotations

import re
from pathlib import Path

from lab.results import compliance, roundfacts, roundtree
from lab.results.logfacts import LogFacts, LogProblem, integer
from lab.results.mllog import MLLOG_PREFIX, parse_mllog
from lab.core.mlperf import Rules, default_rules
from lab.results.runs import Run
from lab.results.v05log import V05_PREFIX, parse_v05
from lab.results.v06log import is_v06, parse_v06


def detect_format(text: str) -> str | None:
    has = {"mllog": MLLOG_PREFIX in text, "v0.5": V05_PREFIX in text, "v0.6": is_v06(text)}
    found = [k for k, v in has.items() if v]
    if len(found) > 1:
        return "mixed"
    return found[0] if found else None


def parse_runs(text: str, rules: Rules | None = None) -> list[LogFacts]:
    """Every run in the text of a log; ``LogProblem`` says why there is none."""
    rules = rules or default_rules()
    fmt = detect_format(text)
    if fmt is None:
        raise LogProblem("no :::MLLOG, :::MLL or :::MLPv0.5.0 lines")
    if fmt == "mixed":
        raise LogProblem("mixed log formats: more than one of :::MLLOG, :::MLL and :::MLPv0.5.0")
    if fmt == "v0.5":
        return parse_v05(text, rules)
    parser = {"mllog": parse_mllog, "v0.6": parse_v06}[fmt]
    return parser(text.splitlines(), rules)


def parse_log(text: str, rules: Rules | None = None) -> LogFacts:
    """The first (usually the only) run in the text of a log."""
    return parse_runs(text, rules)[0]


def natural(s: str) -> tuple:
    """Sort key: result_2 before result_10."""
    # re.split with the group puts the digit runs at the odd places ("²" is no \d, though "²".isdigit())
    return tuple((0, int(x), "") if i % 2 else (1, 0, x) for i, x in enumerate(re.split(r"(\d+)", s)) if x)


def _relative(path: Path, root: Path) -> str:
    """``path`` below ``root`` (its name when it is not below it)."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def named_like_log(path: Path) -> bool:
    """``*.log`` or ``result*.txt``: a file worth a line in the report when it cannot be read as a log."""
    return path.suffix.lower() == ".log" or bool(re.match(r"result.*\.txt$", path.name, re.I))


def read_plain(ctx, path: Path, root: Path, text: str, explicit: bool):
    """Add the runs of one log file to ``ctx.runs`` (or one Skipped entry to ``ctx``).

    A result file of a round tree scored as result_summarizer scores (lab.results.roundtree) that
    holds no readable run is still one run of its benchmark: a failed one."""
    rules = ctx.rules
    rnd = ctx.round_of(root)
    run_file = roundtree.summarizer_scored(rules, rnd) and roundtree.is_run_file(path)
    fmt, runs, problem = _parse(text, rules)
    if problem is not None and not run_file:
        if fmt is not None or explicit or named_like_log(path):
            ctx.skip(path, problem)
        return
    folders = [path.stem, *[p.name for p in path.parents if p == root or root in p.parents]]
    bench, notes = _benchmark(path, rules, runs, folders, run_file)
    if bench is None:
        ctx.skip(path, "benchmark not named in the log (submission_benchmark) or its folder names")
        return
    table = rules.rounds.get(rnd) if rnd else None
    in_round = table is not None and table["format"] == (fmt or "mllog")
    ruleset = table.get("ruleset") if in_round and roundtree.summarizer_scored(rules, rnd) else None
    tree = ctx.tree(root).system_of(path)
    base = _system(ctx, path, root, runs[0].platform if runs else None, folders, tree)
    if run_file:
        base["system_notes"] += roundtree.summarizer_gaps(tree)
    if problem is not None:
        verdict = compliance.Verdict("FAIL", problem, f"training {ruleset}", (problem,))
    else:
        verdict = compliance.check(text, fmt, bench, ruleset=ruleset)
    factor, scaling_note = ctx.scaling(path.parent, root) if run_file else (1.0, "")
    extra = _round_facts(path, root, text, ruleset, tree) if run_file and ruleset else {}
    common = dict(
        benchmark=bench,
        device=base["device"],
        gpus=base["gpus"],
        stack=base["stack"],
        facts_from=base["facts_from"],
        submitter=base["submitter"],
        system_name=base["system_name"],
        system_key=base["system_key"],
        submission=base["submission"],
        nodes=base["nodes"],
        framework=base["framework"],
        accelerator=base["accelerator"],
        round=rnd if in_round else None,
        scaling_factor=factor,
        scaling_note=scaling_note,
        system_notes=list(base["system_notes"]),
        **extra,
    )
    rel = _relative(path, root)
    notes += list(base["notes"])
    if problem is not None:
        ctx.runs.append(
            Run(
                source=str(path),
                fmt=fmt or "mllog",
                success=False,
                outcome="failed",
                reason=problem,
                notes=notes,
                order=(natural(rel), 1),
                **common,
            )
        )
        ctx.runs[-1].judged(verdict)
        return
    for f in runs:
        ctx.runs.append(_run(path, rel, f, notes, common))
        ctx.runs[-1].judged(verdict)


def _parse(text: str, rules: Rules) -> tuple[str | None, list[LogFacts], str | None]:
    """(the log's format, its runs, the problem that keeps them from being read: None when read)."""
    fmt = detect_format(text)
    if fmt is None:
        return None, [], "empty file" if not text.strip() else "no :::MLLOG, :::MLL or :::MLPv0.5.0 lines"
    try:
        return fmt, parse_runs(text, rules), None
    except LogProblem as exc:
        return fmt, [], str(exc)


def _benchmark(
    path: Path, rules: Rules, runs: list[LogFacts], folders: list[str], run_file: bool
) -> tuple[str | None, list[str]]:
    """(the benchmark a log's runs are scored as, notes): a round tree's run file by its folder, else the
    log's own name for it, else the first folder name that names one (None: no benchmark found)."""
    notes = []
    if run_file:
        bench = roundtree.benchmark_folder_name(path, rules)
        logged = runs[0].benchmark if runs else None
        if logged is not None and logged != bench:
            notes.append(f"the log names {logged}; scored as its folder's {bench}")
    else:
        bench = runs[0].benchmark
    if bench is None:
        bench = next((rules.benchmark(n) for n in folders if rules.benchmark(n)), None)
    return bench, notes


def _run(path: Path, rel: str, f: LogFacts, notes: list[str], common: dict) -> Run:
    """One run of a log file (``notes``: the file's; ``common``: what its runs share)."""
    source = str(path) if f.runs_in_file == 1 else f"{path}#run{f.run_in_file}"
    run_notes = list(f.warnings) + notes
    if f.runs_in_file > 1:
        run_notes.append(f"run {f.run_in_file} of {f.runs_in_file} in the file")
    return Run(
        source=source,
        fmt=f.fmt,
        seed=f.seed,
        start_s=f.start_s,
        success=f.success,
        outcome=f.outcome,
        reason=f.reason,
        ttt_s=f.ttt_s,
        elapsed_s=f.stop_s - f.start_s,
        epochs=f.epochs,
        quality=f.quality,
        target=f.target,
        samples_per_s=f.samples_per_s,
        throughput_basis=f.throughput_basis,
        sample_unit=f.sample_unit,
        notes=run_notes,
        order=(natural(rel), f.run_in_file),
        clock=f.clock,
        **common,
    )


def _round_facts(path: Path, root: Path, text: str, ruleset: str, tree) -> dict:
    """The division, batch size, convergence point and power rate of a round's result file
    (lab.results.roundfacts), as Run fields."""
    point = roundfacts.rcp_point(text, ruleset)
    try:
        bs = float(point.batch_size)
    except (TypeError, ValueError, OverflowError):
        bs = None
    error = point.error
    try:
        value = None if error else float(point.point)
    except (TypeError, ValueError, OverflowError):
        value, error = None, f"convergence point {point.point!r} is not a number"[:160]
    out = dict(
        division=tree.division if tree is not None else None,
        rcp_batch_size=bs,
        rcp_point=value,
        rcp_converged=point.converged,
        rcp_error=error,
    )
    if (path.parent / "power").is_dir():
        rate = roundfacts.power_rate(path.parent, roundfacts.result_name(path), root)
        out.update(power_rate=rate.rate, power_note=rate.why)
    return out


def _system(ctx, path: Path, root: Path, platform: str | None, folders: list[str], tree) -> dict:
    rules = ctx.rules
    out = {
        "submitter": None,
        "system_name": None,
        "system_key": None,
        "submission": None,
        "nodes": None,
        "framework": None,
        "accelerator": None,
        "notes": [],
        "system_notes": [],
    }
    device = count = stack = None
    sources = {}
    if tree is not None:
        out.update(
            submitter=tree.submitter,
            system_name=tree.system,
            system_key=tree.key,
            submission=tree.submission,
            nodes=tree.nodes,
            framework=tree.framework,
            accelerator=tree.accelerator,
            notes=list(tree.notes),
            system_notes=list(tree.notes),
        )
        device, count, stack = tree.device, tree.accelerators, tree.framework
        for k, v in (("device", device), ("accelerators", count), ("framework", stack)):
            if v is not None:
                sources[k] = tree.described_by
    if device is None or count is None:
        sysfile = ctx.systems_file(path, root)
        if sysfile:
            doc, fname = sysfile
            if device is None and doc.get("accelerator_model_name"):
                device = rules.device(doc["accelerator_model_name"])
                sources["device"] = fname
            per_node = integer(doc.get("accelerators_per_node"))
            if count is None and per_node is not None:
                count = per_node * (integer(doc.get("number_of_nodes")) or 1)
                sources["GPUs"] = fname
            if stack is None and doc.get("framework"):
                stack = str(doc["framework"])
                sources["stack"] = fname
    if platform and (device is None or count is None):
        d, c = rules.find_system(platform)
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
    if device is None:
        device = "unknown"
        out["notes"].append("device not found in the log, a system description or its folder names")
    if count is None:
        out["notes"].append("GPU count not found in the log, a system description or its folder names")
    out.update(
        device=device,
        gpus=count,
        stack=stack or "unknown",
        facts_from=", ".join(f"{k}: {v}" for k, v in sources.items() if v),
    )
    return out
