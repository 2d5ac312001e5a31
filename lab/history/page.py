"""The history as an HTML page (`invoke history.page OUT`): one trend plot per GPU and metric, in the report's look.

``series(db, ...)`` reads every numeric check value of a GPU (validate's
checks and their trend records, one point per GPU, metric and validation),
by host, GPU, metric and time as ``invoke history`` filters them;
``write_page(db, out, ...)`` draws each series with matplotlib (value over
time, each point in its verdict's colour, the GPU's median of its passing
points as a dashed line) and renders templates/history.html.j2 with the
plots inline (base64 PNG, no external assets), a table of each plot's points
under it. The page is written through lab.core.writes (never through a
planted link). Rows that are not finite numbers or have no readable time are
left out and counted on the page.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import os
import statistics
from pathlib import Path

from sqlalchemy import String, select, type_coerce

from lab.core import paths, writes
from lab.core.errors import ConfigError
from lab.history.db import Database
from lab.history.models import Check, Gpu
from lab.history.past import _float, iso, number, when
from lab.history.query import _gpu_filter, check_filter, parse_time

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
COLOURS = {"PASS": "#55a868", "WARN": "#f5c242", "FAIL": "#c44e52"}
LINE = "#4c72b0"
MAX_PLOTS = 300
MAX_ROWS = 200_000
DPI = 96
TREND = " trend"


def series(db: Database, *, host=None, gpu=None, metric=None, since=None, until=None) -> tuple[list[dict], int]:
    """(one dict per GPU and metric with its points oldest first, the number of rows left out)."""
    since, until = parse_time(since, "--since"), parse_time(until, "--until")
    uuid, index = _gpu_filter(gpu, host)
    q = (select(Check.validation_id, Check.host, Check.gpu_index, Gpu.uuid, Gpu.serial, Check.name, Check.verdict,
                Check.unit, type_coerce(Check.value, String), type_coerce(Check.at, String))
         .outerjoin(Gpu, Gpu.id == Check.gpu_id).where(Check.gpu_index.is_not(None), Check.value.is_not(None)))
    q = check_filter(q, host, uuid, index, metric)
    left_out = 0
    groups: dict[tuple, dict] = {}
    with db.session() as s:
        rows = s.execute(q.order_by(Check.id).limit(MAX_ROWS)).all()
    for vid, h, idx, u, serial, name, verdict, unit, value, at in rows:
        v, t = number(_float(value)), when(at)
        if v is None or t is None or verdict not in COLOURS:
            left_out += 1
            continue
        if (since and t < since) or (until and t > until):
            continue
        name = name[:-len(TREND)] if name.endswith(TREND) else name
        key = (u or f"{h}:{idx}", name)
        g = groups.setdefault(key, {"host": h, "gpu": idx, "uuid": u, "serial": serial, "metric": name,
                                    "unit": unit, "points": {}})
        g["host"], g["gpu"] = h, idx      # where the GPU was last measured (rows come oldest id first)
        p = g["points"].setdefault(vid, {"at": t, "value": v, "verdict": verdict})
        if _rank(verdict) > _rank(p["verdict"]):
            p["verdict"] = verdict
    out = []
    for g in groups.values():
        g["points"] = sorted(g["points"].values(), key=lambda p: p["at"])
        good = [p["value"] for p in g["points"] if p["verdict"] == "PASS"]
        g["median"] = statistics.median(good) if good else None
        out.append(g)
    out.sort(key=lambda g: (g["host"] or "", g["gpu"], g["uuid"] or "", g["metric"]))
    return out, left_out


def _rank(verdict: str) -> int:
    return ("PASS", "WARN", "FAIL").index(verdict)


def _plot(g: dict) -> str:
    """The series' figure as a data URI (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(6.4, 2.8), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    xs = [p["at"] for p in g["points"]]
    ys = [p["value"] for p in g["points"]]
    ax.plot(xs, ys, color=LINE, linewidth=1, zorder=1)
    ax.scatter(xs, ys, c=[COLOURS[p["verdict"]] for p in g["points"]], edgecolors="#333", linewidths=0.5,
               s=36, zorder=2)
    handles = [Line2D([], [], marker="o", linestyle="", color=c, markeredgecolor="#333", label=v)
               for v, c in COLOURS.items() if any(p["verdict"] == v for p in g["points"])]
    if g["median"] is not None:
        ax.axhline(g["median"], color="#555", linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color="#555", linestyle="--", label=f"median {g['median']:.4g}"))
    ax.set_ylabel(g["unit"] or g["metric"], fontsize=9)
    ax.set_title(f"{g['host']} GPU {g['gpu']}: {g['metric']}", fontsize=10)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
    ax.legend(handles=handles, fontsize=8, loc="best")
    fig.autofmt_xdate()
    fig.subplots_adjust(left=0.13, right=0.97, top=0.88, bottom=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def render(groups: list[dict], left_out: int, filters: dict, total: int) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda v: "-" if v is None else f"{v:.4g}"
    env.filters["utc"] = lambda t: f"{t:%Y-%m-%d %H:%M}"
    return env.get_template("history.html.j2").render(
        groups=groups, left_out=left_out, total=total, filters={k: v for k, v in filters.items() if v},
        generated=iso(dt.datetime.now(dt.timezone.utc)))


HTML_STARTS = (b"<!doctype html", b"<html")
WHAT = "history page"


def check_out(out: str | Path, db: Database | None = None) -> Path:
    """``out`` when the page may be written there: its folder not a system folder and writable, and nothing
    there yet or an HTML page (which is replaced); never the database itself nor any other file (a typo of
    OUT must not overwrite results/history.sqlite). ConfigError otherwise, before anything is read."""
    out = Path(out)
    paths.output_root(out.parent, f"{WHAT} {out}: its folder")   # not a system folder
    paths.folder(out.parent, WHAT)
    writes.check_file(out, WHAT)
    if db is not None and (target := db.file()) is not None and out.exists() and os.path.samefile(out, target):
        raise ConfigError(f"{WHAT}: {out} is the history database itself; give a file name ending in .html")
    if out.exists():
        with open(out, "rb") as fh:
            head = fh.read(512).lstrip().lower()
        if not head.startswith(HTML_STARTS):
            raise ConfigError(f"{WHAT}: {out} exists and is not an HTML page (gpulab replaces only a page it "
                              "wrote); give another file name ending in .html")
    return out


def write_page(db: Database, out: str | Path, **filters) -> tuple[Path, int, int]:
    """Write the page to ``out`` (a file); (its path, the plots drawn, the series found)."""
    out = check_out(out, db)   # bad input before anything is read or drawn
    groups, left_out = series(db, **filters)
    shown = groups[:MAX_PLOTS]
    for i, g in enumerate(shown):
        g["id"] = f"plot-{i}"
        g["plot"] = _plot(g)
    writes.folder(out.parent, "history page")
    writes.write_text(out, render(shown, left_out, filters, len(groups)), "history page")
    return out, len(shown), len(groups)
