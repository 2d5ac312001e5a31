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
in lab.report.comparison) -> this module (findings, formatting, files) and
lab.report.figures (the PNGs). No module below imports this one.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import jinja2

from lab.report.analysis import Analysis, analyse
from lab.core import writes
from lab.core.errors import ConfigError
from lab.core.mlperf import Rules, default_rules
from lab.results.logreader import read_runs
from lab.results.runs import accelerator_kind, count_header, count_label

FORMATS = ("html", "md", "json", "csv")
TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "templates"
SUMMARY_SCHEMA = 1


@dataclass
class ReportResult:
    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    summary: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # what was found of the inputs (a round detected)

    def lines(self) -> list[str]:
        """What a command line prints: the files, what was found of the inputs, the counts,
        every skipped input."""
        runs = sum(r["runs"] for r in self.summary)
        few = sum(1 for r in self.summary if r["too_few_runs"])
        out = [f"wrote {p}" for p in self.files if p.suffix in (".html", ".md", ".json")]
        out += self.notes
        out.append(f"{len(self.summary)} benchmark x system record(s) from {runs} run(s)"
                   + (f", {few} with too few runs" if few else "")
                   + f"; {len(self.skipped)} input(s) skipped" + (":" if self.skipped else ""))
        out += [f"  skipped {src}: {why}" for src, why in self.skipped]
        return out


def key_findings(an: Analysis) -> list[str]:
    """The study's findings, as sentences computed from the tables."""
    out = []
    for r in an.ratio_ranges:
        if r["benchmark"] != "all benchmarks":
            continue
        fast, slow = r["pair"].split(" / ")
        n = len({x["benchmark"] for x in an.ratios if x["pair"] == r["pair"]})
        out.append(f"{fast} is {fmt_range(r['comparable_min'], r['comparable_max'])} {slow} over {n} "
                   "benchmark(s) at equal GPU counts (time to train where epochs to converge match, "
                   "throughput where they differ).")
    for r in an.ratio_ranges:
        if r["benchmark"] == "all benchmarks":
            continue
        out.append(f"{r['benchmark']}: {r['pair']} time to train {fmt_range(r['ttt_ratio_min'], r['ttt_ratio_max'])}, "
                   f"throughput {fmt_range(r['throughput_ratio_min'], r['throughput_ratio_max'])}.")
    lines = defaultdict(list)
    for r in an.scaling:
        if r["superlinear"]:
            lines[(r["benchmark"], r["device"], r["stack"])].append(r)
    for (bench, device, _), rs in lines.items():
        counts = ", ".join(str(r["gpus"]) for r in rs)
        speedups = ", ".join(f"{r['speedup']:.2f}x" for r in rs)
        unit = count_header(r["accelerator_kind"] for r in rs)
        unit = "accelerators" if unit == "Accelerators" else unit
        text = f"{bench} on {device}: super-linear speedup at {counts} {unit} ({speedups} over {rs[0]['base_gpus']})"
        if all(r["epoch_ratio"] for r in rs):
            base_ep = rs[0]["epochs"] * rs[0]["epoch_ratio"]
            per_epoch = ", ".join(f"{r['per_epoch_speedup']:.2f}x" for r in rs)
            explained = all("not the hardware" in r["explanation"] for r in rs)
            text += (f"; epochs to converge {base_ep:g} -> " + ", ".join(f"{r['epochs']:g}" for r in rs)
                     + f"; per epoch {per_epoch}")
            text += (": the seed's epochs to converge, not the hardware" if explained
                     else ": not fully explained by epochs to converge")
        else:
            text += "; epochs to converge not logged"
        out.append(text + ".")
    dom = [e["benchmark"] for e in an.seed_effects if e["seed_dominated"]]
    rest = [e["benchmark"] for e in an.seed_effects if not e["seed_dominated"]]
    if dom:
        out.append(f"Time to train dominated by the seed (epochs to converge): {', '.join(dom)}.")
    if rest:
        out.append(f"Not seed-dominated: {', '.join(rest)}.")
    thr_only = [s for s in an.systems if not s["runs"] and s["throughput_runs"]]
    if thr_only:
        out.append(f"{len(thr_only)} of {len(an.systems)} benchmark x system records come from throughput runs "
                   "only: throughput (Figure 2, the device ratios), no time to train.")
    few = sum(1 for s in an.systems if s["too_few_runs"])
    if few:
        out.append(f"{few} of {len(an.systems)} benchmark x system scores rest on too few runs (marked).")
    if an.compare is not None:
        flagged = [c for c in an.compare if c.get("ttt_flagged") or c.get("throughput_flagged")]
        out.append(f"Compared with the other set: {len(flagged)} of "
                   f"{sum(1 for c in an.compare if c['status'] == 'compared')} matched systems changed "
                   "beyond run-to-run noise.")
    return out


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

SUMMARY_KEYS = ("benchmark", "submitter", "system", "device", "gpus", "nodes", "framework", "stack",
                "runs", "successes", "runs_required", "scored_runs", "score_minutes", "too_few_runs",
                "compliance", "compliance_ruleset", "compliance_failures", "mark")


def _clean(v):
    """JSON-safe: no NaN or infinity."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def fmt_num(x, digits: int = 3) -> str:
    """About ``digits`` significant digits, never in exponent form; — for missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    ax = abs(x)
    if ax == 0:
        return "0"
    if float(x).is_integer() and ax < 1e15:
        return f"{int(x):,}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(ax))))
    return f"{x:,.{decimals}f}"


def fmt_minutes(x) -> str:
    """Minutes to 0.01, as MLPerf's results tables print them; — for missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:,.2f}"


def fmt_ratio(x) -> str:
    return "—" if x is None else f"{x:.2f}x"


def fmt_range(lo, hi) -> str:
    if lo is None:
        return "—"
    return f"{lo:.2f}x" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}x"


def fmt_pct(x) -> str:
    return "—" if x is None else f"{x:+.1f}%"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=lambda name: bool(name) and name.endswith(".html.j2"),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True)
    env.filters.update(num=fmt_num, minutes=fmt_minutes, ratio=fmt_ratio, pct=fmt_pct, rng=fmt_range,
                       md=lambda s: str(s).replace("|", "\\|").replace("\n", " "), count=count_cell)
    env.filters["by_reason"] = by_reason
    env.globals["count_header"] = lambda rows: count_header(
        accelerator_kind(r["device"], r.get("gpus")) for r in rows)
    return env


def by_reason(failures: list[str]) -> list[str]:
    """A record's ``run: reason`` lines with the runs of one reason on one line, in run order."""
    runs: dict[str, list[str]] = {}
    for line in failures:
        run, _, why = line.partition(": ")
        runs.setdefault(why, []).append(run)
    return [f"{', '.join(names)}: {why}" for why, names in runs.items()]


def count_cell(row: dict, header: str) -> str:
    """A row's accelerator count under ``header``: the number where the header names the unit,
    else the count with its unit (``16 TPU chips``, ``CPU``)."""
    kind = accelerator_kind(row["device"], row.get("gpus"))
    if header == "Accelerators" or kind == "CPU":
        return count_label(kind, row.get("gpus"))
    return "?" if row.get("gpus") is None else f"{row['gpus']:,}"


CSV_TABLES = {
    "scores.csv": "systems", "runs.csv": "runs", "ratios.csv": "ratios",
    "ratio_ranges.csv": "ratio_ranges", "scaling.csv": "scaling", "seeds.csv": "seeds",
    "seed_effects.csv": "seed_effects", "energy.csv": "energy", "compare.csv": "compare",
    "skipped.csv": "skipped",
}


def _check_outputs(out_dir: Path, formats) -> None:
    """Every place the report will write, checked before anything is read or written (no links, no non-files)."""
    files = [name for fmt, name in (("json", "summary.json"), ("html", "report.html"), ("md", "report.md"))
             if fmt in formats]
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
        w.writerow({k: ("; ".join(map(str, v)) if isinstance(v, list) else v) for k, v in r.items()})
    writes.write_text(path, fh.getvalue(), "report")


def _title(systems: list[dict], rules: Rules) -> str:
    """The rounds the records are scored by: published rounds by name (and the compliance ruleset
    their logs are checked with), gpulab's runs by its ruleset."""
    names = sorted({f"MLPerf Training {r['round']} results" + (f" ({r['ruleset']} ruleset)"
                                                              if r["ruleset"] else "")
                    for r in _rounds(systems, rules)}
                   | {rules.ruleset for s in systems if s["round"] not in rules.rounds})
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
        out["gpulab"] = {"ruleset": g.name, "source": g.source,
                         "exceptions": [{"benchmarks": list(w.benchmarks), "rules": list(w.rules), "why": w.why}
                                        for w in g.waivers if set(w.benchmarks) & {r.benchmark for r in runs}]}
    return out


def _meta(an, coll, compare, rules: Rules, formats: tuple, tables: dict) -> dict:
    """The report's facts around its tables: when, from what, which rules and benchmarks, counts."""
    return {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "inputs": coll.inputs, "compare": str(compare) if compare is not None else None,
        "title": _title(an.systems, rules), "rounds": _rounds(an.systems, rules),
        "round_detected": list(coll.notes),
        "ruleset": rules.ruleset, "settings": rules.settings,
        "benchmarks": {n: {"title": b.title, "metric": b.metric, "target": b.target,
                           "target_text": _target_text(b.target), "runs_required": b.runs_required,
                           "converged_required": b.converged_required, "sample_unit": b.sample_unit}
                       for n, b in rules.benchmarks.items() if n in {r.benchmark for r in an.runs}},
        "csv": "csv" in formats,   # the Markdown names tables/*.csv only where they are written
        "n_runs": len(an.runs), "n_success": sum(1 for r in an.runs if r.success),
        "n_skipped": len(tables["skipped"]),
        "compliance": compliance_meta(an.runs),
    }


def build_report(paths, out_dir, formats=FORMATS, compare=None, *, rules: Rules | None = None,
                 round: str | None = None) -> ReportResult:
    """Read the runs under ``paths`` and write the report to ``out_dir``; ``round``: the published
    round (lab/data/rounds.yml) whose rules score their MLLOG logs, where the folder names none."""
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError(f"report format {', '.join(bad) or '(none)'}: choose from {', '.join(FORMATS)}")
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    if not paths:
        raise ConfigError("report: no input path given")
    out_dir = Path(out_dir)
    _check_outputs(out_dir, formats)
    rules = rules or default_rules()
    coll = read_runs(paths, rules, round=round)
    other = read_runs([Path(compare)], rules, round=round) if compare is not None else None
    an = analyse(coll.runs, rules, other.runs if other else None)
    result = ReportResult(skipped=[(s.source, s.reason) for s in coll.skipped], notes=list(coll.notes))
    result.summary = [_clean({k: s[k] for k in (*SUMMARY_KEYS, *[k for k in s if k not in SUMMARY_KEYS])})
                      for s in an.systems]
    writes.folder(out_dir, "report folder")
    tables = {
        "systems": an.systems, "runs": [r.row() for r in an.runs], "ratios": an.ratios,
        "ratio_ranges": an.ratio_ranges, "scaling": an.scaling, "seeds": an.seeds,
        "seed_effects": an.seed_effects, "energy": an.energy, "compare": an.compare or [],
        "skipped": [{"source": s, "reason": r} for s, r in result.skipped],
    }
    if other is not None:
        tables["skipped"] += [{"source": s.source, "reason": f"(compared set) {s.reason}"}
                              for s in other.skipped]
        result.skipped = [(s["source"], s["reason"]) for s in tables["skipped"]]
    meta = _meta(an, coll, compare, rules, formats, tables)
    if "json" in formats:
        doc = _clean({"schema": SUMMARY_SCHEMA, **{k: meta[k] for k in (
            "generated", "inputs", "compare", "rounds", "round_detected", "compliance", "n_runs", "n_success", "n_skipped")},
            "ruleset": meta["title"],
            "records": result.summary, "ratios": an.ratios, "ratio_ranges": an.ratio_ranges,
            "scaling": an.scaling, "seed_effects": an.seed_effects, "energy": an.energy,
            "compare": an.compare, "skipped": tables["skipped"]})
        path = out_dir / "summary.json"
        writes.write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n", "report")
        result.files.append(path)
    if "csv" in formats:
        tdir = out_dir / "tables"
        writes.folder(tdir, "report")
        for name, key in CSV_TABLES.items():
            if key == "compare" and an.compare is None:
                continue
            path = tdir / name
            _write_csv(path, [_clean(r) for r in tables[key]])
            result.files.append(path)
    if "html" in formats or "md" in formats:
        from lab.report import figures
        fdir = out_dir / "figures"
        writes.folder(fdir, "report")
        for old in fdir.glob("fig*.png"):
            old.unlink()   # a link is removed, never followed
        figs = figures.draw_all(an, rules, fdir)
        result.files.extend(f["path"] for f in figs)
        env = _env()
        ctx = {"meta": meta, "an": an, "tables": tables, "figures": figs,
               "findings": key_findings(an)}
        if "html" in formats:
            for f in figs:
                f["data_uri"] = "data:image/png;base64," + base64.b64encode(f["path"].read_bytes()).decode()
            path = out_dir / "report.html"
            writes.write_text(path, env.get_template("report.html.j2").render(**ctx), "report")
            result.files.append(path)
        if "md" in formats:
            path = out_dir / "report.md"
            writes.write_text(path, env.get_template("report.md.j2").render(**ctx), "report")
            result.files.append(path)
    return result
