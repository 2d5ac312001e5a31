"""A tune study's outcome: the best sets against the reference recipe over the same seeds, and a recipe.

Writes into the study's folder ``results/<name>/``:

* ``report.md`` and ``report.json``: every trial (state, settings, cost or why it was pruned or failed),
  the best sets (lowest cost first), and the per-seed epochs to target of the best set beside the
  reference recipe's (the first trial) on the same seeds 1..K;
* ``recipe.yml``: the best set as a recipe (``invoke sweep --recipe results/<name>/recipe.yml``), with its
  provenance: the study and its database, the trial and its sweep, its figures, the reference recipe's,
  the rule source of the space, the runner version, when.

Each file is a new file renamed into place (lab.core.writes). Returns the summary lines to print.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import optuna

from lab.core import limits, writes
from lab.core.templates import md_code, md_text
from lab.hosts import runnerdist
from lab.sweep import recipe as recipes

TOP = 3


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _seeds(value) -> list[dict] | None:
    """A trial's per-seed results as gpulab stores them ({seed, reached, epochs}); an entry of another shape is
    left out. The study's database is read back as any input: another program, or another gpulab, may have
    written it."""
    if not isinstance(value, list):
        return None
    return [
        s
        for s in value
        if isinstance(s, dict)
        and isinstance(s.get("seed"), int)
        and isinstance(s.get("reached"), bool)
        and (s.get("epochs") is None or limits.measurement(s["epochs"]) is not None)
    ]


def _row(t: optuna.trial.FrozenTrial) -> dict:
    a = t.user_attrs
    return {
        "number": t.number,
        "state": t.state.name,
        "settings": dict(t.params),
        "value": t.value,
        "baseline": bool(a.get("gpulab_baseline")),
        "sweep": a.get("gpulab_sweep"),
        "cap": a.get("gpulab_cap"),
        "summary": _mapping(a.get("gpulab_summary")) or None,
        "seeds": _seeds(a.get("gpulab_seeds")),
        "pruned": a.get("gpulab_pruned"),
        "failed": a.get("gpulab_failed"),
        "stale": a.get("gpulab_stale"),
    }


def _epochs(row: dict | None, k: int) -> list[str]:
    if not row or not row.get("seeds"):
        return ["-"] * k
    by_seed = {s["seed"]: s for s in row["seeds"]}
    out = []
    for seed in range(1, k + 1):
        s = by_seed.get(seed)
        out.append("-" if s is None else (f"{s['epochs']:g}" if s["reached"] and s["epochs"] is not None else "missed"))
    return out


def per_seed(row: dict | None) -> dict:
    """seed -> epochs to target, or "missed" (the provenance of a recipe)."""
    out = {}
    for s in (row or {}).get("seeds") or []:
        out[str(s["seed"])] = s["epochs"] if s["reached"] and s["epochs"] is not None else "missed"
    return out


def outcome(study: optuna.Study, k: int) -> dict:
    rows = [_row(t) for t in study.get_trials(deepcopy=False)]
    done = sorted(
        (r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None),
        key=lambda r: (r["value"], r["number"]),
    )
    base = next((r for r in rows if r["baseline"]), None)
    return {
        "study": study.study_name,
        "attrs": dict(study.user_attrs),
        "trials": rows,
        "best": done[:TOP],
        "baseline": base,
        "seeds": k,
        "counts": {s: sum(1 for r in rows if r["state"] == s) for s in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")},
    }


def markdown(out: dict, storage_shown: str) -> str:
    a, k = out["attrs"], out["seeds"]
    src = _mapping(a.get("gpulab_source"))
    lines = [
        f"# Tune study {out['study']}",
        "",
        f"{a.get('gpulab_workload')} at the {a.get('gpulab_scale')} scale on {a.get('gpulab_device') or 'the fleet'}; "
        f"seeds 1..{k} per trial; cost = median + spread of epochs to the target over the seeds (a run that "
        f"misses it counts {2} x the epoch limit {a.get('gpulab_limit')}).",
        "",
        f"Space: {src.get('document', '?')}, {src.get('repository', '?')} at {str(src.get('commit', '?'))[:12]}, "
        f"section {src.get('section', '?')}.",
        f"Study storage: {storage_shown}.",
        "",
        "Trials: " + ", ".join(f"{n} {s.lower()}" for s, n in out["counts"].items()),
        "",
        "## Best sets against the reference recipe (epochs to target per seed)",
        "",
        "| set | " + " | ".join(f"seed {s}" for s in range(1, k + 1)) + " | median | spread | cost |",
        "|---|" + "---|" * (k + 3),
    ]
    base = out["baseline"]
    shown = ([("reference recipe (trial %d)" % base["number"], base)] if base else []) + [
        (f"trial {r['number']}", r) for r in out["best"] if not (base and r["number"] == base["number"])
    ]
    for label, r in shown:
        s = r.get("summary") or {}
        cost = "pruned" if r["state"] == "PRUNED" else (f"{r['value']:g}" if r["value"] is not None else r["state"])
        lines.append(
            f"| {label} | "
            + " | ".join(_epochs(r, k))
            + f" | {md_text(s.get('median', '-'))} | {md_text(s.get('spread', '-'))} | {cost} |"
        )
    lines += ["", "## Settings of each set", ""]
    for label, r in shown:
        lines.append(
            f"- {label}: "
            + ", ".join(
                md_code(f"{n}={v:.4g}" if isinstance(v, float) else f"{n}={v}")
                for n, v in sorted(r["settings"].items())
            )
        )
    lines += ["", "## Every trial", "", "| trial | state | cost | note | settings |", "|---|---|---|---|---|"]
    for r in out["trials"]:
        note = r["pruned"] or r["failed"] or ("resumed after a controller crash" if r["stale"] else "")
        val = "" if r["value"] is None else f"{r['value']:g}"
        sets = ", ".join(
            f"{n}={v:.4g}" if isinstance(v, float) else f"{n}={v}" for n, v in sorted(r["settings"].items())
        )
        lines.append(
            f"| {r['number']}{' (reference)' if r['baseline'] else ''} | {r['state']} | {val} "
            f"| {md_text(note)} | {md_text(sets)} |"
        )
    return "\n".join(lines) + "\n"


def write(study: optuna.Study, req, root: Path, echo=print) -> list[str]:
    """report.md, report.json and (when a trial completed) recipe.yml in ``root``; the summary lines."""
    out = outcome(study, req.seeds)
    url = getattr(req, "storage_shown", "") or ""
    root = Path(root)
    writes.write_text(root / "report.json", json.dumps(out, indent=2, default=str) + "\n", "tune report")
    writes.write_text(root / "report.md", markdown(out, url), "tune report")
    lines = [
        f"tune {out['study']}: "
        + ", ".join(f"{n} {s.lower()}" for s, n in out["counts"].items())
        + f"; report {root / 'report.md'}"
    ]
    base = out["baseline"]
    if out["best"]:
        best = out["best"][0]
        prov = {
            "study": out["study"],
            "storage": url,
            "trial": best["number"],
            "sweep": best["sweep"],
            "cost": best["value"],
            "seeds": req.seeds,
            "epochs": per_seed(best),
            "reference_cost": base["value"] if base else None,
            "reference_epochs": per_seed(base),
            "reference_settings": base["settings"] if base else None,
            "space": req.space.path,
            "rule_source": req.space.source,
            "device": req.device,
            "runner": runnerdist.local_version(),
            "written": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        rec = recipes.Recipe(req.space.workload, req.space.scale, dict(best["settings"]), prov)
        recipes.write(root / "recipe.yml", rec)
        b = f"{base['value']:g}" if base and base["value"] is not None else "none"
        lines.append(
            f"tune {out['study']}: best trial {best['number']} cost {best['value']:g} "
            f"(reference recipe: {b}); recipe {root / 'recipe.yml'} (invoke sweep --recipe)"
        )
    else:
        lines.append(f"tune {out['study']}: no trial completed yet: no recipe written")
    return lines
