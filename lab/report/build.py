"""Reports that redo the reference study from logs.

``build_report(paths, out_dir)`` reads every run under ``paths`` (lab.results.logreader),
computes the study's tables and writes them:

- per benchmark x system (device, GPU count, stack): the MLPerf score, run
  counts, spread, and a mark where there are too few runs;
- device ratios at equal GPU counts (time to train and throughput);
- scaling against GPU count, super-linear speedups flagged and explained by
  the epochs to converge behind them;
- seed effects: epochs to converge by seed and GPU count, and which benchmarks'
  time to train the seed dominates;
- performance per watt where telemetry exists;
- with ``compare``: the same systems in another set of runs, changes beyond
  run-to-run noise flagged.

Outputs in ``out_dir``: report.html (self-contained: figures embedded as
base64 PNG, no external assets), report.md, summary.json, tables/*.csv,
figures/*.png. Thresholds and MLPerf rules are data (lab/data/*.yml).

Data flow: lab.results.logreader (runs) -> lab.report.analysis (tables; seeds and comparison
in lab.report.comparison) -> this module (the tables and files), lab.report.pages (findings, number
formats, the HTML and Markdown pages) and lab.report.figures (the PNGs). No module below imports this one.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from lab.report.analysis import Analysis, analyse
from lab.report.pages import key_findings, write_pages
from lab.core import writes
from lab.core.errors import ConfigError, excerpt, nothing_read
from lab.core.mlperf import Rules, default_rules
from lab.results.logreader import read_runs

FORMATS = ("html", "md", "json", "csv")
SUMMARY_SCHEMA = 1


@dataclass
class ReportResult:
    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    summary: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was found of the inputs (a round detected)

    def lines(self) -> list[str]:
        """What a command line prints: the files, what was found of the inputs, the counts,
        every skipped input."""
        runs = sum(r["runs"] for r in self.summary)
        few = sum(1 for r in self.summary if r["too_few_runs"])
        out = [f"wrote {p}" for p in self.files if p.suffix in (".html", ".md", ".json")]
        out += self.notes
        out.append(
            f"{len(self.summary)} benchmark x system record(s) from {runs} run(s)"
            + (f", {few} with too few runs" if few else "")
            + f"; {len(self.skipped)} input(s) skipped"
            + (":" if self.skipped else "")
        )
        out += [f"  skipped {src}: {why}" for src, why in self.skipped]
        return out


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

SUMMARY_KEYS = (
    "benchmark",
    "submitter",
    "system",
    "device",
    "gpus",
    "nodes",
    "framework",
    "stack",
    "runs",
    "successes",
    "runs_required",
    "scored_runs",
    "score_minutes",
    "too_few_runs",
    "compliance",
    "compliance_ruleset",
    "compliance_failures",
    "mark",
)


def _clean(v):
    """JSON-safe: no NaN or infinity."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


CSV_TABLES = {
    "scores.csv": "systems",
    "runs.csv": "runs",
    "ratios.csv": "ratios",
    "ratio_ranges.csv": "ratio_ranges",
    "scaling.csv": "scaling",
    "seeds.csv": "seeds",
    "seed_effects.csv": "seed_effects",
    "energy.csv": "energy",
    "compare.csv": "compare",
    "skipped.csv": "skipped",
}


def _check_outputs(out_dir: Path, formats) -> None:
    """Every place the report will write, checked before anything is read or written (no links, no non-files)."""
    files = [
        name for fmt, name in (("json", "summary.json"), ("html", "report.html"), ("md", "report.md")) if fmt in formats
    ]
    folders = []
    if "csv" in formats:
        folders.append("tables")
        files += [f"tables/{name}" for name in CSV_TABLES]
    if "html" in formats or "md" in formats:
        folders.append("figures")
    writes.writable(out_dir, files=[], folders=folders, what="report")
    for name in files:
        writes.writable_file(out_dir / name, "report")
    if "figures" in folders and (out_dir / "figures").is_dir():
        for old in (out_dir / "figures").glob("fig*.png"):
            writes.writable_file(old, "report")


def _write_csv(path: Path, rows: list[dict]):
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    fh = io.StringIO(newline="")
    w = csv.DictWriter(fh, fieldnames=cols or ["empty"])
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell("; ".join(map(str, v)) if isinstance(v, list) else v) for k, v in r.items()})
    writes.write_text(path, fh.getvalue(), "report")


def _cell(value):
    """A CSV cell a spreadsheet shows as text: a text read from a log or a result tree that starts like a
    formula (``=HYPERLINK(...)``, ``+``, ``-``, ``@``, a tab) gets a leading ``'`` (OWASP's CSV injection
    rule); numbers, and texts that are numbers (``-1.5``), stay as they are."""
    if not isinstance(value, str) or not value.startswith(("=", "+", "-", "@", "\t", "\r")):
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value


def _title(systems: list[dict], rules: Rules) -> str:
    """The rounds the records are scored by: published rounds by name (and the compliance ruleset
    their logs are checked with), gpulab's runs by its ruleset."""
    names = sorted(
        {
            f"MLPerf Training {r['round']} results" + (f" ({r['ruleset']} ruleset)" if r["ruleset"] else "")
            for r in _rounds(systems, rules)
        }
        | {rules.ruleset for s in systems if s["round"] not in rules.rounds}
    )
    return ", ".join(names) or rules.ruleset


def _rounds(systems: list[dict], rules: Rules) -> list[dict]:
    """The published rounds of the records, each with the compliance ruleset its logs are checked with."""
    out = {}
    for s in systems:
        if s["round"] in rules.rounds:
            out.setdefault(s["round"], rules.rounds[s["round"]].get("ruleset"))
    return [{"round": k, "ruleset": f"training {v}" if v else None} for k, v in sorted(out.items())]


def _target_text(target) -> str:
    """A benchmark's quality target as text: a number, or each part of a target of several ("box AP 0.377,
    mask AP 0.339" for Mask R-CNN's {'bbox': 0.377, 'segm': 0.339})."""
    names = {"bbox": "box AP", "segm": "mask AP"}
    if isinstance(target, dict):
        return ", ".join(f"{names.get(k, k)} {v}" for k, v in target.items())
    return str(target)


def compliance_meta(runs) -> dict:
    """Which checker judged the runs and by which rulesets; gpulab's exceptions where its runs are in, each
    only where a benchmark it is for was run."""
    from lab.results import compliance

    used = sorted({r.compliance_ruleset for r in runs if r.compliance_ruleset})
    out = {"checker": compliance.checker_version(), "rulesets": used, "gpulab": None}
    if any(r.compliance_ruleset == compliance.gpulab_rules().name for r in runs):
        g = compliance.gpulab_rules()
        out["gpulab"] = {
            "ruleset": g.name,
            "source": g.source,
            "exceptions": [
                {"benchmarks": list(w.benchmarks), "rules": list(w.rules), "why": w.why}
                for w in g.waivers
                if set(w.benchmarks) & {r.benchmark for r in runs}
            ],
        }
    return out


def _meta(an, coll, compare, rules: Rules, formats: tuple, tables: dict) -> dict:
    """The report's facts around its tables: when, from what, which rules and benchmarks, counts."""
    return {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "inputs": coll.inputs,
        "compare": str(compare) if compare is not None else None,
        "title": _title(an.systems, rules),
        "rounds": _rounds(an.systems, rules),
        "round_detected": list(coll.notes),
        "ruleset": rules.ruleset,
        "settings": rules.settings,
        "benchmarks": {
            n: {
                "title": b.title,
                "metric": b.metric,
                "target": b.target,
                "target_text": _target_text(b.target),
                "runs_required": b.runs_required,
                "converged_required": b.converged_required,
                "sample_unit": b.sample_unit,
            }
            for n, b in rules.benchmarks.items()
            if n in {r.benchmark for r in an.runs}
        },
        "csv": "csv" in formats,  # the Markdown names tables/*.csv only where they are written
        "n_runs": len(an.runs),
        "n_success": sum(1 for r in an.runs if r.success),
        "n_skipped": len(tables["skipped"]),
        "compliance": compliance_meta(an.runs),
    }


def build_report(
    paths, out_dir, formats=FORMATS, compare=None, *, rules: Rules | None = None, round: str | None = None
) -> ReportResult:
    """Read the runs under ``paths`` and write the report to ``out_dir``; ``round``: the published
    round (lab/data/rounds.yml) whose rules score their MLLOG logs, where the folder names none."""
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError(f"report format {excerpt(', '.join(bad), 40) or '(none)'}: choose from {', '.join(FORMATS)}")
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    if not paths:
        raise ConfigError("report: no input path given")
    out_dir = Path(out_dir)
    _check_outputs(out_dir, formats)
    rules = rules or default_rules()
    coll = read_runs(paths, rules, round=round)
    if not coll.runs:  # every input skipped (read_runs refuses a path with nothing found): nothing is written
        raise nothing_read("report: nothing to report", [f"{s.source}: {s.reason}" for s in coll.skipped])
    other = read_runs([Path(compare)], rules, round=round) if compare is not None else None
    an = analyse(coll.runs, rules, other.runs if other else None)
    result = ReportResult(skipped=[(s.source, s.reason) for s in coll.skipped], notes=list(coll.notes))
    result.summary = [
        _clean({k: s[k] for k in (*SUMMARY_KEYS, *[k for k in s if k not in SUMMARY_KEYS])}) for s in an.systems
    ]
    writes.folder(out_dir, "report folder")
    tables = _tables(an, result, other)
    meta = _meta(an, coll, compare, rules, formats, tables)
    if "json" in formats:
        result.files.append(_write_summary(out_dir, meta, an, result, tables))
    if "csv" in formats:
        result.files += _write_tables(out_dir, an, tables)
    if "html" in formats or "md" in formats:
        from lab.report import figures

        fdir = out_dir / "figures"
        writes.folder(fdir, "report")
        for old in fdir.glob("fig*.png"):
            old.unlink()  # a link is removed, never followed
        figs = figures.draw_all(an, rules, fdir)
        result.files.extend(f["path"] for f in figs)
        ctx = {"meta": meta, "an": an, "tables": tables, "figures": figs, "findings": key_findings(an)}
        result.files += write_pages(out_dir, formats, ctx)
    return result


def _tables(an: Analysis, result: ReportResult, other) -> dict:
    """The report's tables by name (CSV_TABLES' keys); the compared set's skipped inputs join ``result``'s."""
    tables = {
        "systems": an.systems,
        "runs": [r.row() for r in an.runs],
        "ratios": an.ratios,
        "ratio_ranges": an.ratio_ranges,
        "scaling": an.scaling,
        "seeds": an.seeds,
        "seed_effects": an.seed_effects,
        "energy": an.energy,
        "compare": an.compare or [],
        "skipped": [{"source": s, "reason": r} for s, r in result.skipped],
    }
    if other is not None:
        tables["skipped"] += [{"source": s.source, "reason": f"(compared set) {s.reason}"} for s in other.skipped]
        result.skipped = [(s["source"], s["reason"]) for s in tables["skipped"]]
    return tables


def _write_summary(out_dir: Path, meta: dict, an: Analysis, result: ReportResult, tables: dict) -> Path:
    """summary.json: the report's facts, its records and tables."""
    doc = _clean(
        {
            "schema": SUMMARY_SCHEMA,
            **{
                k: meta[k]
                for k in (
                    "generated",
                    "inputs",
                    "compare",
                    "rounds",
                    "round_detected",
                    "compliance",
                    "n_runs",
                    "n_success",
                    "n_skipped",
                )
            },
            "ruleset": meta["title"],
            "records": result.summary,
            "ratios": an.ratios,
            "ratio_ranges": an.ratio_ranges,
            "scaling": an.scaling,
            "seed_effects": an.seed_effects,
            "energy": an.energy,
            "compare": an.compare,
            "skipped": tables["skipped"],
        }
    )
    path = out_dir / "summary.json"
    writes.write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n", "report")
    return path


def _write_tables(out_dir: Path, an: Analysis, tables: dict) -> list[Path]:
    """tables/*.csv (CSV_TABLES; compare.csv only with a compared set)."""
    tdir = out_dir / "tables"
    writes.folder(tdir, "report")
    files = []
    for name, key in CSV_TABLES.items():
        if key == "compare" and an.compare is None:
            continue
        path = tdir / name
        _write_csv(path, [_clean(r) for r in tables[key]])
        files.append(path)
    return files
