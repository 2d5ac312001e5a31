"""The report's figures, drawn with matplotlib's Agg backend (no display needed).

Figure 1: time to train (MLPerf score) by benchmark x GPU count x device.
Figure 2: throughput by GPU count.
Figure 3: scaling curves (speedup against GPU count, ideal line, super-linear
points ringed and labelled with their epochs to converge).
Counts are named for what they count (GPUs, TPU chips; a CPU run is "CPU").
Figure 4: performance per watt, where telemetry exists.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from lab.report import systemfigs
from lab.core.mlperf import bench_order
from lab.results.runs import count_header, count_label, count_noun

PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"]
DPI = systemfigs.DPI


def _series_namer(systems):
    stacks = {s["stack"] for s in systems}
    if len(stacks) <= 1:
        return lambda s: s["device"]
    return lambda s: f"{s['device']} / {s['stack']}"


def _grid(n):
    ncols = min(3, n)
    return ncols, math.ceil(n / ncols)


def _new_figure(n_panels, title, legend_labels=()):
    """Panels in a grid with fixed margins (inches): tight_layout would cost a
    second full draw of every figure. The bottom margin holds the legend's rows."""
    ncols, nrows = _grid(n_panels)
    # wide enough for the title even with one panel (about 0.09 inch a character at 12 pt)
    width = max(4.4 * ncols, 0.09 * len(title) + 0.6)
    labels = list(legend_labels)
    rows = math.ceil(len(labels) / systemfigs.legend_columns(width, labels)) if labels else 1
    extra = 0.22 * (rows - 1)
    height = 3.3 * nrows + 1.0 + extra
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(
        left=0.75 / width,
        right=1 - 0.2 / width,
        top=1 - 0.65 / height,
        bottom=(0.85 + extra) / height,
        wspace=0.32,
        hspace=0.5,
    )
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(n_panels)]
    fig.suptitle(title, fontsize=12)
    return fig, axes


def _bars(systems, value_key, benches, title, ylabel, path, colors, name_of, label_fmt):
    shown = sorted({name_of(s) for s in systems if s["benchmark"] in benches and s[value_key]})
    fig, axes = _new_figure(len(benches), title, shown + ["too few runs"])
    used = set()
    any_hatched = False
    for ax, bench in zip(axes, benches):
        rows = [s for s in systems if s["benchmark"] == bench and s[value_key] and s["gpus"] is not None]
        counts = sorted({s["gpus"] for s in rows})
        series = sorted({name_of(s) for s in rows})
        width = 0.8 / max(1, len(series))
        for j, name in enumerate(series):
            for s in rows:
                if name_of(s) != name:
                    continue
                x = counts.index(s["gpus"]) + (j - (len(series) - 1) / 2) * width
                hatch = "//" if s.get("too_few_runs") and value_key == "score_minutes" else None
                any_hatched |= bool(hatch)
                ax.bar(
                    x,
                    s[value_key],
                    width=width * 0.95,
                    color=colors[name],
                    hatch=hatch,
                    edgecolor="white" if not hatch else "#333333",
                    linewidth=0.5,
                )
                ax.annotate(
                    label_fmt(s[value_key]),
                    (x, s[value_key]),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    xytext=(0, 1),
                    textcoords="offset points",
                )
                used.add(name)
        kinds = {s["accelerator_kind"] for s in rows}
        ax.set_xticks(
            range(len(counts)), [count_label(next(iter(kinds)), c) if len(kinds) == 1 else str(c) for c in counts]
        )
        if len(kinds) > 1:
            ax.set_xlabel(count_header(kinds), fontsize=8)
        ax.set_title(bench, fontsize=10)
        ax.set_ylabel(ylabel(bench) if callable(ylabel) else ylabel, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.margins(y=0.15)
    handles = [Patch(color=colors[n], label=n) for n in sorted(used)]
    if any_hatched:
        handles.append(systemfigs.hatched("//", "too few runs"))
    systemfigs.finish(fig, handles, path)


def _short(x):
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _scaling_panel(ax, bench: str, lines: dict, colors: dict, scaling: list) -> None:
    """One benchmark's panel of Figure 3: speedup per series (time to train, throughput), ideal line."""
    top = 1
    for (b, name), rows in sorted(lines.items()):
        if b != bench:
            continue
        rows = sorted(rows, key=lambda r: r["gpus"])
        pts = [(r["gpus"], r["speedup"]) for r in rows if r["speedup"] is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", color=colors[name], label=f"{name} time to train")
            top = max(top, max(p[1] for p in pts))
        tps = [(r["gpus"], r["throughput_speedup"]) for r in rows if r["throughput_speedup"] is not None]
        if tps:
            ax.plot(*zip(*tps), marker="s", linestyle="--", color=colors[name], label=f"{name} throughput")
            top = max(top, max(p[1] for p in tps))
        for r in rows:
            if r["superlinear"]:
                ax.plot(
                    r["gpus"],
                    r["speedup"],
                    marker="o",
                    markersize=13,
                    markerfacecolor="none",
                    markeredgecolor="#c0392b",
                    markeredgewidth=2,
                )
                if r["epochs"] is not None and r["epoch_ratio"]:
                    ep_base = r["epochs"] * r["epoch_ratio"]
                    ax.annotate(
                        f"{ep_base:g}→{r['epochs']:g} epochs",
                        (r["gpus"], r["speedup"]),
                        xytext=(-4, 8),
                        textcoords="offset points",
                        ha="right",
                        fontsize=7,
                        color="#c0392b",
                    )
    gmax = max((r["gpus"] for r in scaling if r["benchmark"] == bench), default=1)
    gmin = min(
        (r["base_gpus"] or r["throughput_base_gpus"] or r["gpus"] for r in scaling if r["benchmark"] == bench),
        default=1,
    )
    ax.plot([gmin, gmax], [1, gmax / gmin], linestyle=":", color="black", label="ideal (linear)")
    ticks = sorted({r["gpus"] for r in scaling if r["benchmark"] == bench})
    if gmax / gmin > 16:  # 8 to 1,024 GPUs: log axes keep every point apart
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ticks = [t for t in ticks if t > 0]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.tick_params(axis="x", labelrotation=45)
        top = max(top, gmax / gmin)
    else:
        ax.set_xticks(ticks)
    ax.set_title(bench, fontsize=10)
    ax.set_xlabel(count_header(r["accelerator_kind"] for r in scaling if r["benchmark"] == bench), fontsize=8)
    ax.set_ylabel("speedup (x)", fontsize=8)
    ax.tick_params(labelsize=8)
    if ax.get_yscale() == "log":
        ax.set_ylim(0.8, top * 1.5)
    else:
        ax.set_ylim(0, top * 1.2)


def _scaling_legend(names: list, lines: dict, colors: dict) -> list:
    handles = [Patch(color=colors[n], label=n) for n in names if any(k[1] == n for k in lines)]
    handles += [
        Line2D([], [], color="black", marker="o", label="time to train"),
        Line2D([], [], color="black", marker="s", linestyle="--", label="throughput"),
        Line2D([], [], color="black", linestyle=":", label="ideal"),
        Line2D(
            [],
            [],
            color="#c0392b",
            marker="o",
            markersize=10,
            markerfacecolor="none",
            linestyle="none",
            label="super-linear",
        ),
    ]
    return handles


def draw_all(an, rules, fdir: Path) -> list[dict]:
    """The report's figures, each {name, path, title, panels, caption}: time to train and throughput (by
    accelerator count, or per system for a published result tree), scaling, performance per watt."""
    systems = an.systems
    name_of = _series_namer(systems)
    names = sorted({name_of(s) for s in systems})
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    units = {s["benchmark"]: s["sample_unit"] for s in systems}
    bar = functools.partial(_bar_figure, systems, fdir, colors, name_of)
    if any(s.get("system_key") for s in systems):
        out = systemfigs.figures(systems, rules, fdir, units, PALETTE, _short)
    else:
        out = _count_figures(systems, rules, bar, units)
    out += _scaling_figure(an, rules, fdir, names, colors, name_of)
    benches = bench_order(rules, [s["benchmark"] for s in systems if s["perf_per_watt"] and s["gpus"] is not None])
    if benches:
        out.append(
            bar(
                "fig4",
                "fig4_perf_per_watt.png",
                "perf_per_watt",
                benches,
                "Figure 4. Performance per watt (samples per joule)",
                lambda b: f"{units.get(b, 'samples')}/J",
                "Figure 4. Performance per watt",
                "Mean throughput divided by the mean measured GPU power (telemetry).",
            )
        )
    return out


def _bar_figure(
    systems,
    fdir: Path,
    colors: dict,
    name_of,
    name: str,
    file: str,
    key: str,
    benches: list,
    title: str,
    ylabel,
    short: str,
    caption: str,
) -> dict:
    """One bar figure of ``key`` per benchmark panel, by series (device, stack) and count."""
    path = fdir / file
    _bars(systems, key, benches, title, ylabel, path, colors, name_of, _short)
    return {"name": name, "path": path, "title": short, "panels": list(benches), "caption": caption}


def _count_figures(systems, rules, bar, units: dict) -> list[dict]:
    """Figures 1 and 2: time to train and throughput by accelerator count and device."""
    out = []
    noun = count_noun(s["accelerator_kind"] for s in systems)
    benches = bench_order(rules, [s["benchmark"] for s in systems if s["score_minutes"] and s["gpus"] is not None])
    if benches:
        out.append(
            bar(
                "fig1",
                "fig1_time_to_train.png",
                "score_minutes",
                benches,
                f"Figure 1. Time to train (MLPerf score, minutes) by {noun} count and device",
                "minutes",
                "Figure 1. Time to train",
                "MLPerf score in minutes (mean without the fastest and slowest run) "
                f"per benchmark, {noun} count and device. Hatched: too few runs.",
            )
        )
    benches = bench_order(rules, [s["benchmark"] for s in systems if s["throughput_mean"] and s["gpus"] is not None])
    if benches:
        out.append(
            bar(
                "fig2",
                "fig2_throughput.png",
                "throughput_mean",
                benches,
                f"Figure 2. Training throughput by {noun} count and device",
                lambda b: f"{units.get(b, 'samples')}/s",
                "Figure 2. Throughput",
                "Mean training throughput of the runs (samples per second; the unit of each benchmark on its axis).",
            )
        )
    return out


def _scaling_figure(an, rules, fdir: Path, names: list, colors: dict, name_of) -> list[dict]:
    """Figure 3: speedup against accelerator count, one panel per benchmark (none without scaling rows)."""
    lines = {}
    for r in an.scaling:
        key = (r["benchmark"], name_of(r))
        lines.setdefault(key, []).append(r)
    benches = bench_order(rules, [k[0] for k in lines])
    if not benches:
        return []
    path = fdir / "fig3_scaling.png"
    snoun = count_noun(r["accelerator_kind"] for r in an.scaling)
    fig, axes = _new_figure(
        len(benches),
        f"Figure 3. Scaling: speedup against {snoun} count",
        sorted({k[1] for k in lines}) + ["time to train", "throughput", "ideal", "super-linear"],
    )
    for ax, bench in zip(axes, benches):
        _scaling_panel(ax, bench, lines, colors, an.scaling)
    handles = _scaling_legend(names, lines, colors)
    systemfigs.finish(fig, handles, path)
    return [
        {
            "name": "fig3",
            "path": path,
            "title": "Figure 3. Scaling",
            "panels": list(benches),
            "caption": f"Speedup over the smallest {snoun} count of each device: time to train "
            "(solid) and throughput (dashed). Ringed: super-linear, labelled with "
            "the epochs to converge behind it.",
        }
    ]
