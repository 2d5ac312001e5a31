"""Per-system bar charts for records of published result trees: figures 1 and 2 of such a report
(lab.report.figures calls ``figures``).

A published tree holds many systems of one device at one GPU count (every DGX
folder, every TPU pod), so bars grouped by GPU count and device would overlap.
Here each benchmark with a value gets one panel, one horizontal bar per system
("submitter system (GPUs x device)"), sorted, coloured by device. A panel's
height follows its number of bars; a range over two decades uses a log axis.
Hatched: too few runs; cross-hatched: a scored log fails the compliance checker.
A benchmark without a value gets no panel, a figure without one is not drawn.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from lab.core import writes
from lab.core.mlperf import bench_order

DPI = 96
BAR_IN = 0.24  # inches per bar
LABEL_CHARS = 58  # longest system label kept whole


def label(s: dict) -> str:
    who = f"{s['submitter']} " if s.get("submitter") else ""
    if s["device"] == "CPU" or s["gpus"] == 0:
        what = "CPU"
    else:
        what = f"{'?' if s['gpus'] is None else s['gpus']}x {s['device']}"
    text = f"{who}{s['system']} ({what})"
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def legend_columns(width_in: float, labels) -> int:
    longest = max((len(x) for x in labels), default=10)
    return max(1, min(len(list(labels)) or 1, int(width_in / (0.075 * longest + 0.45))))


def hatched(hatch: str, label: str) -> Patch:
    """A legend entry for bars drawn hatched (``hatch``: matplotlib's pattern)."""
    return Patch(facecolor="white", edgecolor="#333333", hatch=hatch, label=label)


def finish(fig, handles: list, path: Path) -> None:
    """The legend of ``handles`` in rows below the panels, then the figure written as a PNG at ``path``."""
    fig.legend(
        handles=handles,
        loc="lower center",
        fontsize=8,
        frameon=False,
        ncol=legend_columns(fig.get_figwidth(), [h.get_label() for h in handles]),
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    writes.write_bytes(path, buf.getvalue(), "report")


def draw(systems, value_key, benches, title, unit_of, path: Path, colors, fmt) -> list[str]:
    """Draw the figure; returns the benchmarks that got a panel (none: no figure drawn)."""
    panels = []
    for b in benches:
        rows = sorted((s for s in systems if s["benchmark"] == b and s.get(value_key)), key=lambda s: s[value_key])
        if rows:
            panels.append((b, rows))
    if not panels:
        return []
    width = 11.0
    heights = [max(1.2, BAR_IN * len(rows) + 0.7) for _, rows in panels]
    devices = sorted({s["device"] for _, rows in panels for s in rows})
    ncol = legend_columns(width, devices)
    legend_in = 0.25 * math.ceil(len(devices) / ncol) + 0.5
    total = sum(heights) + 0.9 + legend_in
    fig = Figure(figsize=(width, total), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(
        left=4.6 / width,
        right=1 - 0.5 / width,
        top=1 - 0.85 / total,
        bottom=legend_in / total,
        hspace=0.9 / (sum(heights) / len(heights)),
    )
    grid = fig.add_gridspec(len(panels), 1, height_ratios=heights)
    any_few = any_fail = False
    for i, (bench, rows) in enumerate(panels):
        ax = fig.add_subplot(grid[i])
        vals = [s[value_key] for s in rows]
        for y, s in enumerate(rows):
            few = value_key == "score_minutes" and s.get("too_few_runs")
            fail = value_key == "score_minutes" and s.get("compliance_runs_failed")
            any_few, any_fail = any_few or bool(few), any_fail or bool(fail)
            hatch = "xx" if fail else "//" if few else None
            ax.barh(
                y,
                s[value_key],
                height=0.7,
                color=colors.get(s["device"], "#8c8c8c"),
                hatch=hatch,
                edgecolor="#333333" if hatch else "white",
                linewidth=0.5,
            )
            ax.annotate(
                fmt(s[value_key]), (s[value_key], y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7
            )
        ax.set_yticks(range(len(rows)), [label(s) for s in rows], fontsize=7)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        if max(vals) / max(min(vals), 1e-12) > 100:
            ax.set_xscale("log")
            ax.set_xlim(min(vals) / 1.5, max(vals) * 3)
        else:
            ax.set_xlim(0, max(vals) * 1.18)
        ax.set_title(bench, fontsize=10, loc="left")
        ax.set_xlabel(unit_of(bench), fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    handles = [Patch(color=colors.get(d, "#8c8c8c"), label=d) for d in devices]
    if any_few:
        handles.append(hatched("//", "too few runs"))
    if any_fail:
        handles.append(hatched("xx", "fails the compliance checker"))
    fig.suptitle(title, fontsize=12)
    finish(fig, handles, path)
    return [b for b, _ in panels]


def figures(systems, rules, fdir: Path, units: dict, palette: list, short) -> list[dict]:
    """Figures 1 and 2 of a published result tree, each {name, path, title, panels, caption}: time to train
    and throughput, one bar per system coloured by device (``palette``; ``short``: a bar's number as text)."""
    out = []
    devs = sorted({s["device"] for s in systems})
    dcolors = {d: palette[i % len(palette)] for i, d in enumerate(devs)}
    benches = bench_order(rules, [s["benchmark"] for s in systems])
    path = fdir / "fig1_time_to_train.png"
    drawn = draw(
        systems,
        "score_minutes",
        benches,
        "Figure 1. Time to train (MLPerf score, minutes) per system",
        lambda b: "minutes",
        path,
        dcolors,
        lambda x: f"{x:,.2f}",
    )
    if drawn:
        out.append(
            {
                "name": "fig1",
                "path": path,
                "title": "Figure 1. Time to train",
                "panels": drawn,
                "caption": "MLPerf score in minutes per benchmark and system (colour: device). "
                "Hatched: too few runs; cross-hatched: a scored log fails the "
                "compliance checker.",
            }
        )
    path = fdir / "fig2_throughput.png"
    drawn = draw(
        systems,
        "throughput_mean",
        benches,
        "Figure 2. Training throughput per system",
        lambda b: f"{units.get(b, 'samples')}/s",
        path,
        dcolors,
        short,
    )
    if drawn:
        out.append(
            {
                "name": "fig2",
                "path": path,
                "title": "Figure 2. Throughput",
                "panels": drawn,
                "caption": "Mean training throughput of the runs where the log allows it "
                "(the unit of each benchmark on its axis; basis per run in runs.csv).",
            }
        )
    return out
