"""The history as an HTML page (`invoke history.page OUT`): one trend plot per GPU and metric, in the report's look.

``series(db, ...)`` reads every numeric check value of a GPU (validate's
checks and their trend records, one point per GPU, metric and validation),
by host, GPU, metric and time as ``invoke history`` filters them;
``overview(db, ...)`` is the page's first screen: hosts x GPUs, each cell the
GPU's newest verdict (the checks that were not PASS named), the open quarantines
with their action, the trend checks that are WARN or FAIL.
``write_page(db, out, ...)`` draws each series as an SVG (value over time, each
point in its verdict's colour, the GPU's median of its passing points as a
dashed line) and renders templates/history.html.j2: the overview, then one
section per host and per GPU (a table of every series, its plots inline as
data URIs, no external assets; past MAX_PLOTS a series is a row, not drawn,
and the page says so). The page is written through lab.core.writes (never through a
planted link). Rows that are not finite numbers or have no readable time are
left out and counted on the page.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import statistics
from pathlib import Path

from sqlalchemy import String, select, type_coerce

from lab.core import paths, templates, writes
from lab.core.errors import ConfigError
from lab.history.db import Database
from lab.history.models import Check, Gpu, Validation
from lab.history.past import stored_float, iso, number, when
from lab.history.query import gpu_filter, check_filter, window

COLOURS = {"PASS": "#55a868", "WARN": "#f5c242", "FAIL": "#c44e52"}
LINE = "#4c72b0"
MAX_PLOTS = (
    4096  # plots drawn (about 3 kB each); every series beyond stays a row of its GPU's table, and the page says so
)
MAX_ROWS = 200_000
TREND = " trend"


def series(db: Database, *, host=None, gpu=None, metric=None, since=None, until=None) -> tuple[list[dict], int]:
    """(one dict per GPU and metric with its points oldest first, the number of rows left out)."""
    since, until = window(since, until)
    uuid, index = gpu_filter(gpu, host)
    q = (
        select(
            Check.validation_id,
            Check.host,
            Check.gpu_index,
            Gpu.uuid,
            Gpu.serial,
            Check.name,
            Check.verdict,
            Check.unit,
            type_coerce(Check.value, String),
            type_coerce(Check.at, String),
        )
        .outerjoin(Gpu, Gpu.id == Check.gpu_id)
        .where(Check.gpu_index.is_not(None), Check.value.is_not(None))
    )
    q = check_filter(q, host, uuid, index, metric)
    left_out = 0
    groups: dict[tuple, dict] = {}
    with db.session() as s:
        rows = s.execute(q.order_by(Check.id).limit(MAX_ROWS)).all()
    for vid, h, idx, u, serial, name, verdict, unit, value, at in rows:
        v, t = number(stored_float(value)), when(at)
        if v is None or t is None or verdict not in COLOURS:
            left_out += 1
            continue
        if (since and t < since) or (until and t > until):
            continue
        name = name[: -len(TREND)] if name.endswith(TREND) else name
        key = (u or f"{h}:{idx}", name)
        g = groups.setdefault(
            key, {"host": h, "gpu": idx, "uuid": u, "serial": serial, "metric": name, "unit": unit, "points": {}}
        )
        g["host"], g["gpu"] = h, idx  # where the GPU was last measured (rows come oldest id first)
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


def overview(db: Database, *, host=None, since=None, until=None) -> dict:
    """The page's first screen: each GPU's newest verdict (the worst check of the newest validate or health
    check that judged it, with the checks that were not PASS), the open quarantines with their action, and
    the trend checks of those newest results that are WARN or FAIL (a figure going down against its past)."""
    from lab.history import quarantine

    since, until = window(since, until)
    q = select(
        Check.host,
        Check.gpu_index,
        Check.name,
        Check.verdict,
        Check.reason,
        Validation.id,
        type_coerce(Validation.at, String),
        Validation.level,
    ).join(Validation, Validation.id == Check.validation_id)
    if host:
        q = q.where(Check.host == host)
    with db.session() as s:
        rows = s.execute(q.order_by(Check.id).limit(MAX_ROWS)).all()
    held = quarantine.active(db)
    newest: dict[tuple, tuple] = {}
    for h, idx, _name, _verdict, _reason, vid, at, level in rows:
        t = when(at)
        if t is None or (since and t < since) or (until and t > until):
            continue
        key = (h, idx)
        if key not in newest or (t, vid) > newest[key][:2]:
            newest[key] = (t, vid, level)
    cells: dict[tuple, dict] = {}
    trends = []
    for h, idx, name, verdict, reason, vid, _at, level in rows:
        mark = newest.get((h, idx))
        if mark is None or mark[1] != vid:
            continue
        c = cells.setdefault(
            (h, idx),
            {
                "verdict": "PASS",
                "failing": [],
                "at": mark[0],
                "source": quarantine.HEALTH_LEVEL
                if level == quarantine.HEALTH_LEVEL
                else f"validate {level or ''}".strip(),
            },
        )
        if verdict in COLOURS and verdict != "PASS":
            c["failing"].append(f"{name} {verdict}")
            if _rank(verdict) > _rank(c["verdict"]):
                c["verdict"] = verdict
            if name.endswith(TREND):
                trends.append({"host": h, "gpu": idx, "check": name, "verdict": verdict, "reason": reason or ""})
    hosts = sorted({h for h, _ in cells} | ({e.host for e in held} if not host else {host} & {e.host for e in held}))
    width = 1 + max([i for (_, i) in cells if i is not None] or [-1])
    grid = [
        {"host": h, "host_cell": cells.get((h, None)), "gpus": [cells.get((h, i)) for i in range(width)]} for h in hosts
    ]
    held = [e for e in held if not host or e.host == host]
    return {
        "grid": grid,
        "width": width,
        "quarantines": held,
        "trends": sorted(
            trends, key=lambda t: (t["verdict"] != "FAIL", t["host"], t["gpu"] if t["gpu"] is not None else -1)
        ),
    }


def _plot(g: dict) -> str:
    """The series' figure as a data URI: an SVG drawn here (value over time, each point in its verdict's
    colour, the dashed median of the passing points), so that a fleet of 64 hosts x 8 GPUs draws in seconds."""
    from xml.sax.saxutils import escape

    from lab.core import term

    w, h, left, right, top, bottom = 640, 260, 64, 12, 30, 34
    pts = g["points"]
    ys = [p["value"] for p in pts] + ([g["median"]] if g["median"] is not None else [])
    lo, hi = min(ys), max(ys)
    pad = (hi - lo) * 0.08 or (abs(hi) * 0.05 or 1.0)
    lo, hi = lo - pad, hi + pad
    t0, t1 = pts[0]["at"].timestamp(), pts[-1]["at"].timestamp()
    title = f"{g['host']} GPU {g['gpu']}: {g['metric']}"

    def x(p):
        return left + ((p["at"].timestamp() - t0) / (t1 - t0) if t1 > t0 else 0.5) * (w - left - right)

    def y(v):
        return top + (hi - v) / (hi - lo) * (h - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="#fff"/>',
        f'<text x="{w / 2:.0f}" y="16" text-anchor="middle" font-size="12">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" fill="none" '
        f'stroke="#bbb"/>',
    ]
    for v in (lo + pad, (lo + hi) / 2, hi - pad):
        out.append(
            f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>'
            f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{escape(term.number(v))}</text>'
        )
    unit = g["unit"] or ""
    out.append(
        f'<text x="12" y="{(h - bottom + top) / 2:.0f}" transform="rotate(-90 12 {(h - bottom + top) / 2:.0f})" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    out.append(
        f'<text x="{left}" y="{h - 12}">{pts[0]["at"]:%Y-%m-%d %H:%M}</text>'
        f'<text x="{w - right}" y="{h - 12}" text-anchor="end">{pts[-1]["at"]:%Y-%m-%d %H:%M}</text>'
    )
    if g["median"] is not None:
        out.append(
            f'<line x1="{left}" x2="{w - right}" y1="{y(g["median"]):.1f}" y2="{y(g["median"]):.1f}" '
            f'stroke="#555" stroke-dasharray="5,4"/>'
            f'<text x="{w - right - 4}" y="{y(g["median"]) - 4:.1f}" text-anchor="end" fill="#555">'
            f"median {escape(term.number(g['median']))}</text>"
        )
    out.append(
        f'<polyline fill="none" stroke="{LINE}" stroke-width="1.2" points="'
        + " ".join(f"{x(p):.1f},{y(p['value']):.1f}" for p in pts)
        + '"/>'
    )
    out += [
        f'<circle cx="{x(p):.1f}" cy="{y(p["value"]):.1f}" r="4.5" fill="{COLOURS[p["verdict"]]}" '
        f'stroke="#333" stroke-width="0.6"/>'
        for p in pts
    ]
    out.append("</svg>")
    return "data:image/svg+xml;base64," + base64.b64encode("".join(out).encode()).decode()


def render(
    groups: list[dict],
    left_out: int,
    filters: dict,
    total: int,
    view: dict | None = None,
    all_groups: list[dict] | None = None,
) -> str:
    env = templates.environment()
    env.filters["num"] = lambda v: "-" if v is None else f"{v:.4g}"
    env.filters["utc"] = lambda t: f"{t:%Y-%m-%d %H:%M}"
    env.filters["slug"] = lambda v: "".join(ch if ch.isalnum() else "-" for ch in str(v))
    view = view or {"grid": [], "width": 0, "quarantines": [], "trends": []}
    sections: dict = {}  # host -> GPU -> its series (every one, drawn or not)
    for g in all_groups if all_groups is not None else groups:
        sections.setdefault(g["host"], {}).setdefault((g["gpu"], g["uuid"]), []).append(g)
    return env.get_template("history.html.j2").render(
        groups=groups,
        left_out=left_out,
        total=total,
        filters={k: v for k, v in filters.items() if v},
        generated=iso(dt.datetime.now(dt.timezone.utc)),
        view=view,
        sections=sections,
        max_plots=MAX_PLOTS,
    )


HTML_STARTS = (b"<!doctype html", b"<html")
WHAT = "history page"


def _same(out: Path, target: Path) -> bool:
    """Is ``out`` the file ``target``: one path (links resolved), made yet or not, or one file by two names."""
    if paths.real(out) == paths.real(target):  # the database not made yet: the page would take its place
        return True
    return out.exists() and target.exists() and os.path.samefile(out, target)


def check_out(out: str | Path, db: Database | None = None) -> Path:
    """``out`` when the page may be written there: its folder not a system folder and writable, and nothing
    there yet or an HTML page (which is replaced); never the database itself nor any other file (a typo of
    OUT must not overwrite results/history.sqlite). ConfigError otherwise, before anything is read."""
    out = Path(out)
    paths.output_root(out.parent, f"{WHAT} {out}: its folder")  # not a system folder
    paths.folder(out.parent, WHAT)
    writes.writable_file(out, WHAT)
    if db is not None and (target := db.file()) is not None and _same(out, target):
        raise ConfigError(f"{WHAT}: {out} is the history database itself; give a file name ending in .html")
    if out.exists():
        with open(out, "rb") as fh:
            head = fh.read(512).lstrip().lower()
        if not head.startswith(HTML_STARTS):
            raise ConfigError(
                f"{WHAT}: {out} exists and is not an HTML page (gpulab replaces only a page it "
                "wrote); give another file name ending in .html"
            )
    return out


def write_page(db: Database, out: str | Path, **filters) -> tuple[Path, int, int]:
    """Write the page to ``out`` (a file); (its path, the plots drawn, the series found)."""
    out = check_out(out, db)  # bad input before anything is read or drawn
    groups, left_out = series(db, **filters)
    view = overview(db, host=filters.get("host"), since=filters.get("since"), until=filters.get("until"))
    shown = groups[:MAX_PLOTS]
    for i, g in enumerate(groups):
        g["id"] = f"plot-{i}"
        g["plot"] = _plot(g) if i < MAX_PLOTS else None
    writes.folder(out.parent, "history page")
    writes.write_text(out, render(shown, left_out, filters, len(groups), view, groups), "history page")
    return out, len(shown), len(groups)
