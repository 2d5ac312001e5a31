"""The workload registry: ``python -m runner list``.

The catalogue ``workloads.yml`` (next to this file) names every workload, its
MLPerf benchmark, quality metric, module and the per-scale settings (targets,
model sizes, hyperparameters). It is validated when loaded. This module imports
no deep-learning framework: the supervisor and ``list`` use it as is, and only
the worker process imports a workload's module.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

from runner.artifacts import check_entry
from runner.workloads import settings as S
from runner.workloads.schedules import SCHEDULES

CATALOGUE = Path(__file__).with_name("workloads.yml")
#: names an extra catalogue file (the same format) whose workloads join the built-in ones
EXTRA_ENV = "GPULAB_RUNNER_CATALOGUE"
MAX_BYTES = 1 << 20
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
SCALES = ("tiny", "small", "full")
MODES = ("ttt", "throughput")
FRAMEWORKS = ("pytorch", "tensorflow")
DATA_KINDS = ("generated", "prepared")


class CatalogueError(Exception):
    """workloads.yml is malformed: one line naming the place."""


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


ENTRY_KEYS = (
    "benchmark",
    "title",
    "module",
    "tf_module",
    "metric",
    "sample_unit",
    "frameworks",
    "compliance",
    "higher_is_better",
    "settings",
    "bench",
    "scales",
)
#: an entry's 'bench': what the benchmark scripts (benchmarks/) need to know of a workload
BENCH = {
    "gradcheck_batch": {"cuda": "int 1..", "cpu": "int 1.."},  # gradcheck.py's per-process batch
    "gradcheck_s": "map of number 0..",  # its rough seconds per scale (the order)
}


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise CatalogueError(f"{where}: {what}")  # load() puts the file's name first


def _check_entry(name: str, w: dict) -> None:
    where = f"workloads.{name}"
    _need(isinstance(w, dict), where, "must be a mapping")
    unknown = [str(k)[:40] for k in w if k not in ENTRY_KEYS]
    _need(not unknown, where, f"unknown key {unknown[0]!r} (known: {', '.join(ENTRY_KEYS)})" if unknown else "")
    bad = S.check(BENCH, w.get("bench", {}), "bench")
    _need(bad is None, where, bad or "")
    _need(
        set(w.get("bench", {}).get("gradcheck_s", {})) <= set(SCALES),
        where,
        f"'bench.gradcheck_s' maps scales ({', '.join(SCALES)}) to seconds",
    )
    own = w.get("settings", {})
    _need(isinstance(own, dict), where, "'settings' must map setting names to declarations")
    try:
        declared = S.declarations(own)
    except S.DeclarationError as exc:
        raise CatalogueError(f"{where}.settings: {exc}") from None
    for key in ("benchmark", "title", "module", "metric", "sample_unit"):
        _need(isinstance(w.get(key), str) and w[key] != "", where, f"'{key}' must be a non-empty string")
    for key in ("module", "tf_module"):
        _need(
            key not in w or (isinstance(w[key], str) and _MODULE.fullmatch(w[key])),
            where,
            f"'{key}' must be a module's import path (package.module)",
        )
    _need(
        isinstance(w.get("frameworks"), list) and w["frameworks"] and all(f in FRAMEWORKS for f in w["frameworks"]),
        where,
        f"'frameworks' must be a list of {FRAMEWORKS}",
    )
    _need(isinstance(w.get("compliance"), bool), where, "'compliance' must be true or false")
    _need(w.get("higher_is_better", True) in (True, False), where, "'higher_is_better' must be a boolean")
    scales = w.get("scales")
    _need(
        isinstance(scales, dict) and set(scales) == set(SCALES),
        where,
        f"'scales' must hold exactly {', '.join(SCALES)}",
    )
    for scale in SCALES:
        _check_scale(f"{where}.scales.{scale}", scales[scale], declared)


def _check_scale(sw: str, s, declared) -> None:
    """One scale of an entry: its target, epochs, evaluation, data, batch, schedule, compilation, settings."""
    _need(isinstance(s, dict), sw, "must be a mapping")
    t = s.get("target")
    _need(
        isinstance(t, (int, float))
        or (isinstance(t, dict) and t and all(isinstance(v, (int, float)) for v in t.values())),
        sw,
        "'target' must be a number or a mapping of numbers",
    )
    _need(isinstance(s.get("max_epochs"), int) and s["max_epochs"] > 0, sw, "'max_epochs' must be a positive integer")
    _need(
        isinstance(s.get("eval_every", 1), int) and s.get("eval_every", 1) > 0,
        sw,
        "'eval_every' must be a positive integer",
    )
    ev = s.get("eval_epochs", [1])
    _need(
        isinstance(ev, list) and ev and all(isinstance(e, int) and e > 0 for e in ev) and ev == sorted(set(ev)),
        sw,
        "'eval_epochs' must be a list of increasing positive integers",
    )
    _need(s.get("data") in DATA_KINDS, sw, f"'data' must be one of {DATA_KINDS}")
    _need(
        isinstance(s.get("batch_size"), int) and s["batch_size"] > 0,
        sw,
        "'batch_size' (per process) must be a positive integer",
    )
    _need(
        s.get("lr_schedule") in SCHEDULES,
        sw,
        f"'lr_schedule' must be one of {', '.join(SCHEDULES)} (runner/workloads/schedules.py)",
    )
    _need(
        s.get("compile_mode", "default") in COMPILE_MODES,
        sw,
        f"'compile_mode' must be one of {', '.join(COMPILE_MODES)}",
    )
    if "pretrained" in s:
        problem = check_entry(s["pretrained"])
        _need(problem is None, sw, problem or "")
    ind = s.get("inductor", {})
    _need(
        isinstance(ind, dict)
        and all(isinstance(k, str) and isinstance(v, (bool, int, float, str)) for k, v in ind.items()),
        sw,
        "'inductor' must map torch._inductor.config settings to plain values",
    )
    bad = S.check_scale(s, declared)
    _need(bad is None, sw, bad or "")


def _read(path: Path) -> dict:
    """The checked workloads of one catalogue file (CatalogueError naming the file)."""
    path = Path(path)
    try:
        if not path.is_file():
            raise OSError("not a regular file")
        if path.stat().st_size > MAX_BYTES:
            raise OSError(f"larger than {MAX_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogueError(f"{path.name}: cannot be read: {exc}".splitlines()[0]) from exc
    try:
        doc = yaml.safe_load(text)
    except RecursionError:
        raise CatalogueError(f"{path.name}: cannot be read: nested too deeply") from None
    except yaml.YAMLError as exc:
        raise CatalogueError(f"{path.name}: cannot be read: {exc}".splitlines()[0]) from exc
    except Exception as exc:  # a tag's constructor refusing its value (``!!int abc``,
        # ``!!timestamp soon``, an integer past Python's digit limit) raises what it raises, not a YAMLError
        why = f"a tagged value cannot be built ({type(exc).__name__}: {exc})"
        raise CatalogueError(f"{path.name}: cannot be read: {why}".splitlines()[0]) from exc
    try:
        _need(isinstance(doc, dict) and doc.get("schema") == 1, "top level", "'schema: 1' expected")
        ws = doc.get("workloads")
        _need(isinstance(ws, dict) and ws, "top level", "'workloads' must be a non-empty mapping")
        for name, entry in ws.items():
            _need(
                isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9_-]{0,39}", name) is not None,
                f"workloads.{str(name)[:40]}",
                "a workload's name is 1 to 40 of a-z, 0-9, _ and -, starting with a letter",
            )
            _check_entry(name, entry)
    except CatalogueError as exc:
        raise CatalogueError(f"{path.name}: {exc}") from None
    return ws


def load(path: Path = CATALOGUE, extra: str | None = None) -> dict:
    """The validated catalogue: ``{name: entry}``; with the workloads of the extra catalogue file
    ``extra`` (default: the environment's ``GPULAB_RUNNER_CATALOGUE``, if set) after the built-in
    ones, checked as strictly. An extra workload may not take a built-in one's name."""
    ws = _read(path)
    extra = os.environ.get(EXTRA_ENV) if extra is None else extra
    if extra:
        more = _read(Path(extra))
        taken = [name for name in more if name in ws]
        if taken:
            raise CatalogueError(
                f"{Path(extra).name} ({EXTRA_ENV}): workloads.{taken[0]}: "
                f"that name is a workload of {Path(path).name} already"
            )
        ws = {**ws, **more}
    return ws


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the catalogue as JSON")


def main(args) -> int:
    from runner.cli import UsageError

    try:
        ws = load()
    except CatalogueError as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        out = []
        for name, w in ws.items():
            out.append(
                {
                    "name": name,
                    "benchmark": w["benchmark"],
                    "title": w["title"],
                    "metric": w["metric"],
                    "frameworks": w["frameworks"],
                    "compliance_checked": w["compliance"],
                    "sample_unit": w["sample_unit"],
                    "targets": {s: w["scales"][s]["target"] for s in SCALES},
                    "declared": sorted(set(w.get("settings", {})) | set(S.COMMON)),  # what `run --set` may name
                    "settings": {s: w["scales"][s] for s in SCALES},  # each scale's own values
                }
            )
        print(json.dumps(out, indent=2))
        return 0
    rows = [("workload", "benchmark", "metric", "full target", "frameworks", "model")]
    for name, w in ws.items():
        t = w["scales"]["full"]["target"]
        ts = ", ".join(f"{k} {v}" for k, v in t.items()) if isinstance(t, dict) else str(t)
        rows.append((name, w["benchmark"], w["metric"], ts, ",".join(w["frameworks"]), w["title"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:-1])) + "  " + r[-1])
    return 0
