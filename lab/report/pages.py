"""The report's pages: its key findings in words, numbers as its tables print them, the Jinja environment of
templates/report.html.j2 and report.md.j2 with their filters, and the pages rendered. lab.report.build
calls it with the tables of lab.report.analysis.
"""

from __future__ import annotations

import base64
import math
from collections import defaultdict
from pathlib import Path

import jinja2

from lab.core import templates, writes
from lab.report.analysis import Analysis
from lab.results.runs import accelerator_kind, count_header, count_label


def key_findings(an: Analysis) -> list[str]:
    """The study's findings, as sentences computed from the tables."""
    out = []
    for r in an.ratio_ranges:
        if r["benchmark"] != "all benchmarks":
            continue
        fast, slow = r["pair"].split(" / ")
        n = len({x["benchmark"] for x in an.ratios if x["pair"] == r["pair"]})
        out.append(
            f"{fast} is {fmt_range(r['comparable_min'], r['comparable_max'])} {slow} over {n} "
            "benchmark(s) at equal GPU counts (time to train where epochs to converge match, "
            "throughput where they differ)."
        )
    for r in an.ratio_ranges:
        if r["benchmark"] == "all benchmarks":
            continue
        out.append(
            f"{r['benchmark']}: {r['pair']} time to train {fmt_range(r['ttt_ratio_min'], r['ttt_ratio_max'])}, "
            f"throughput {fmt_range(r['throughput_ratio_min'], r['throughput_ratio_max'])}."
        )
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
            text += (
                f"; epochs to converge {base_ep:g} -> "
                + ", ".join(f"{r['epochs']:g}" for r in rs)
                + f"; per epoch {per_epoch}"
            )
            text += (
                ": the seed's epochs to converge, not the hardware"
                if explained
                else ": not fully explained by epochs to converge"
            )
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
        out.append(
            f"{len(thr_only)} of {len(an.systems)} benchmark x system records come from throughput runs "
            "only: throughput (Figure 2, the device ratios), no time to train."
        )
    few = sum(1 for s in an.systems if s["too_few_runs"])
    if few:
        out.append(f"{few} of {len(an.systems)} benchmark x system scores rest on too few runs (marked).")
    if an.compare is not None:
        flagged = [c for c in an.compare if c.get("ttt_flagged") or c.get("throughput_flagged")]
        out.append(
            f"Compared with the other set: {len(flagged)} of "
            f"{sum(1 for c in an.compare if c['status'] == 'compared')} matched systems changed "
            "beyond run-to-run noise."
        )
    return out


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


def environment() -> jinja2.Environment:
    """templates/report.*.j2's Jinja environment: HTML escaped, undefined names an error, the filters above."""
    env = templates.environment(
        autoescape=lambda name: bool(name) and name.endswith(".html.j2"), keep_trailing_newline=True
    )
    env.filters.update(
        num=fmt_num,
        minutes=fmt_minutes,
        ratio=fmt_ratio,
        pct=fmt_pct,
        rng=fmt_range,
        md=templates.md_text,
        code=templates.md_code,
        count=count_cell,
    )
    env.filters["by_reason"] = by_reason
    env.globals["count_header"] = lambda rows: count_header(accelerator_kind(r["device"], r.get("gpus")) for r in rows)
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


def write_pages(out_dir: Path, formats: tuple, ctx: dict) -> list[Path]:
    """report.html (its figures embedded as base64 PNG) and report.md, as ``formats`` asks, from the
    templates' context ``ctx`` (meta, an, tables, figures, findings)."""
    env = environment()
    files = []
    if "html" in formats:
        for f in ctx["figures"]:
            f["data_uri"] = "data:image/png;base64," + base64.b64encode(f["path"].read_bytes()).decode()
        path = out_dir / "report.html"
        writes.write_text(path, env.get_template("report.html.j2").render(**ctx), "report")
        files.append(path)
    if "md" in formats:
        path = out_dir / "report.md"
        writes.write_text(path, env.get_template("report.md.j2").render(**ctx), "report")
        files.append(path)
    return files
