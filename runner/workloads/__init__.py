"""The workload registry: ``python -m runner list``.

The catalogue ``workloads.yml`` (next to this file) names every workload, its
MLPerf benchmark, quality metric, module and the per-scale settings (targets,
model sizes, hyperparameters). It is validated when loaded. This module imports
no deep-learning framework: the supervisor and ``list`` use it as is, and only
the worker process imports a workload's module.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from runner.artifacts import check_entry
from runner.workloads.schedules import SCHEDULES

CATALOGUE = Path(__file__).with_name("workloads.yml")
SCALES = ("tiny", "small", "full")
MODES = ("ttt", "throughput")
FRAMEWORKS = ("pytorch", "tensorflow")
DATA_KINDS = ("generated", "prepared")


class CatalogueError(Exception):
    """workloads.yml is malformed: one line naming the place."""


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise CatalogueError(f"{CATALOGUE.name}: {where}: {what}")


def _check_entry(name: str, w: dict) -> None:
    where = f"workloads.{name}"
    _need(isinstance(w, dict), where, "must be a mapping")
    for key in ("benchmark", "title", "module", "metric", "sample_unit"):
        _need(isinstance(w.get(key), str) and w[key] != "", where, f"'{key}' must be a non-empty string")
    _need(isinstance(w.get("frameworks"), list) and w["frameworks"]
          and all(f in FRAMEWORKS for f in w["frameworks"]),
          where, f"'frameworks' must be a list of {FRAMEWORKS}")
    _need(isinstance(w.get("compliance"), bool), where, "'compliance' must be true or false")
    _need(w.get("higher_is_better", True) in (True, False), where, "'higher_is_better' must be a boolean")
    scales = w.get("scales")
    _need(isinstance(scales, dict) and set(scales) == set(SCALES), where,
          f"'scales' must hold exactly {', '.join(SCALES)}")
    for scale in SCALES:
        s = scales[scale]
        sw = f"{where}.scales.{scale}"
        _need(isinstance(s, dict), sw, "must be a mapping")
        t = s.get("target")
        _need(isinstance(t, (int, float)) or (isinstance(t, dict) and t and all(
            isinstance(v, (int, float)) for v in t.values())), sw,
            "'target' must be a number or a mapping of numbers")
        _need(isinstance(s.get("max_epochs"), int) and s["max_epochs"] > 0, sw,
              "'max_epochs' must be a positive integer")
        _need(isinstance(s.get("eval_every", 1), int) and s.get("eval_every", 1) > 0, sw,
              "'eval_every' must be a positive integer")
        ev = s.get("eval_epochs", [1])
        _need(isinstance(ev, list) and ev and all(isinstance(e, int) and e > 0 for e in ev)
              and ev == sorted(set(ev)), sw, "'eval_epochs' must be a list of increasing positive integers")
        _need(s.get("data") in DATA_KINDS, sw, f"'data' must be one of {DATA_KINDS}")
        _need(isinstance(s.get("batch_size"), int) and s["batch_size"] > 0, sw,
              "'batch_size' (per process) must be a positive integer")
        _need(s.get("lr_schedule") in SCHEDULES, sw,
              f"'lr_schedule' must be one of {', '.join(SCHEDULES)} (runner/workloads/schedules.py)")
        _need(s.get("compile_mode", "default") in COMPILE_MODES, sw,
              f"'compile_mode' must be one of {', '.join(COMPILE_MODES)}")
        if "pretrained" in s:
            problem = check_entry(s["pretrained"])
            _need(problem is None, sw, problem or "")
        ind = s.get("inductor", {})
        _need(isinstance(ind, dict) and all(isinstance(k, str) and isinstance(v, (bool, int, float, str))
                                            for k, v in ind.items()), sw,
              "'inductor' must map torch._inductor.config settings to plain values")


def load(path: Path = CATALOGUE) -> dict:
    """The validated catalogue: ``{name: entry}``."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogueError(f"{Path(path).name}: cannot be read: {exc}".splitlines()[0]) from exc
    _need(isinstance(doc, dict) and doc.get("schema") == 1, "top level", "'schema: 1' expected")
    ws = doc.get("workloads")
    _need(isinstance(ws, dict) and ws, "top level", "'workloads' must be a non-empty mapping")
    for name, entry in ws.items():
        _check_entry(name, entry)
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
            out.append({
                "name": name, "benchmark": w["benchmark"], "title": w["title"],
                "metric": w["metric"], "frameworks": w["frameworks"],
                "compliance_checked": w["compliance"], "sample_unit": w["sample_unit"],
                "targets": {s: w["scales"][s]["target"] for s in SCALES},
            })
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
