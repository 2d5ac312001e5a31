"""Each GPU's own past, read for `invoke validate`'s trend checks, as plain data (lab.validate.trends reads it).

``gpu_past(db, uuids, sources, depth)`` gives, per GPU UUID and key, the
values of that GPU's earlier validates, newest first, one point per
validation, back to its ``depth``-th passing one: ``{"value", "at", "verdict"}`` (the verdict the worst of that
key's records in that validation). ``sources`` says which check names each
key is read from (lab.validate.trends.sources: plain data, so this module
knows nothing of validate's checks). Rows are input like any file: a value
that is not a finite number, or a time that does not parse, is left out and
counted, never a traceback.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import String, select, type_coerce

from lab.core import limits
from lab.history.db import Database
from lab.history.models import Check, Gpu
from lab.history.sources import utc

MAX_ROWS = 200_000
MAX_UUIDS = 4096
_RANK = {"PASS": 0, "WARN": 1, "FAIL": 2}


number = limits.measurement  # a finite float of a database cell, else None


def when(v) -> dt.datetime | None:
    """A cell of a time column as an aware UTC datetime (SQLite gives text, PostgreSQL a datetime)."""
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
    return utc(v) if isinstance(v, str) else None


def iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.astimezone(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def gpu_past(db: Database, uuids, sources: dict[str, list[str]], depth: int) -> dict:
    """``{"gpus": {uuid: {key: [points]}}, "error": None, "left_out": N}`` (see the module's doc)."""
    uuids = [u for u in uuids if isinstance(u, str) and u][:MAX_UUIDS]
    by_name: dict[str, list[str]] = {}
    for key, names in sources.items():
        for n in names:
            by_name.setdefault(n, []).append(key)
    out: dict = {"gpus": {}, "error": None, "left_out": 0}
    if not uuids or not by_name:
        return out
    # (uuid, key) -> validation id -> [value, time, verdict]
    found: dict[tuple[str, str], dict[int, list]] = {}
    with db.session() as s:
        q = (
            select(
                Gpu.uuid,
                Check.validation_id,
                Check.name,
                Check.verdict,
                type_coerce(Check.value, String),
                type_coerce(Check.at, String),
            )
            .join(Gpu, Gpu.id == Check.gpu_id)
            .where(Gpu.uuid.in_(uuids), Check.name.in_(list(by_name)))
            .order_by(Check.id.desc())
            .limit(MAX_ROWS)
        )
        for uuid, vid, name, verdict, value, at in s.execute(q):
            v, t = number(stored_float(value)), when(at)
            if v is None or t is None or verdict not in _RANK:
                out["left_out"] += 1
                continue
            for key in by_name[name]:
                point = found.setdefault((uuid, key), {}).setdefault(vid, [v, t, verdict])
                if _RANK[verdict] > _RANK[point[2]]:
                    point[2] = verdict
    for (uuid, key), per_validation in found.items():
        pts, passing = [], 0
        for v, t, vd in sorted(per_validation.values(), key=lambda p: p[1], reverse=True):
            if passing == depth:  # newest first, until ``depth`` passing points: a GPU that kept failing
                break  # is still judged against the passing points before
            pts.append({"value": v, "at": iso(t), "verdict": vd})
            passing += vd == "PASS"
        out["gpus"].setdefault(uuid, {})[key] = pts
    return out


def stored_float(v):
    """A value cell read as text (SQLite: whatever was stored) or a number (PostgreSQL's double)."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return v
