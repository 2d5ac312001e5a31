"""Reading the history back: validate checks and runs by GPU, host, metric and time, as a terminal table.

``history_rows`` gives plain rows, newest first: one per check of a GPU or
host (metric: the check's name) and one per run (metric: ``<benchmark>
throughput``, with its samples/s; the run's GPUs by index and UUID). Filters:
host, GPU (a UUID, or an index of the selected host), a metric (the rows whose
metric contains it), and a time range.
"""

from __future__ import annotations

import datetime as dt
import re

from sqlalchemy import select

from lab.core import advice, term
from lab.core import fields, limits
from lab.core.errors import ConfigError, excerpt, printable
from lab.history.db import Database
from lab.history.models import Check, Gpu, Run, RunGpu, Validation
from lab.history.quarantine import HEALTH_LEVEL
from lab.history.sources import utc
from lab.history.store import aware_utc

MAX_ROWS = 10_000
UUID_RE = re.compile(r"^GPU-[0-9A-Za-z-]{1,90}$")


def parse_time(value, what: str) -> dt.datetime | None:
    """A time given as --since or --until; None when not given (``''`` is given: refused, never "any time")."""
    if value is None:
        return None
    t = utc(value) if isinstance(value, str) else None
    if t is None:
        raise ConfigError(f"{what}: {str(value)[:60]!r} is not a date or time (2026-12-01 or 2026-12-01T10:00Z)")
    return t


def window(since, until) -> tuple[dt.datetime | None, dt.datetime | None]:
    """--since and --until as times; ConfigError for a window that ends before it starts (a typo, which would
    show 'no history matches')."""
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    if start is not None and end is not None and start > end:
        raise ConfigError(f"--since {str(since)[:60]!r} is after --until {str(until)[:60]!r}: no time lies between")
    return start, end


def gpu_filter(gpu, host):
    """(uuid, index) of --gpu: a GPU UUID, or an index on --host."""
    if gpu is None:  # --gpu '' is given: refused below, never "every GPU"
        return None, None
    gpu = str(gpu).strip()
    if UUID_RE.fullmatch(gpu):
        return gpu, None
    if gpu.isascii() and gpu.isdigit():  # an index in ASCII digits: not '٣', not '²'
        if not host:
            raise ConfigError("--gpu INDEX needs --host (or give the GPU's UUID)")
        return None, limits.number(gpu, "--gpu", limits.GPU_INDEX)
    raise ConfigError(f"--gpu: {gpu[:60]!r} is neither a GPU UUID (GPU-...) nor an index")


def check_filter(q, host, uuid, index, metric):
    """``q`` (a select over Check joined to Gpu) narrowed to a host, a GPU (UUID or index) and a metric."""
    if host is not None:  # --host '' is refused, never "every host"
        fields.host_name(host, "--host")  # the one grammar of host names
        q = q.where(Check.host == host)
    if uuid:
        q = q.where(Gpu.uuid == uuid)
    if index is not None:
        q = q.where(Check.gpu_index == index)
    if metric is not None:  # '' would match every check; a control character none
        if not isinstance(metric, str) or not metric.strip() or len(metric) > 128 or not metric.isprintable():
            raise ConfigError(
                f"--metric: {excerpt(ascii(metric), 60)} is not a check name (text, at most 128 characters)"
            )
        q = q.where(Check.name.contains(metric, autoescape=True))
    return q


def check_source(level: str | None) -> str:
    """What recorded a check, as `invoke history` and the history page name it: a sweep's health gate
    (lab.history.sweeps, level ``health``) or an `invoke validate` (its level)."""
    if level == HEALTH_LEVEL:
        return "sweep health gate"
    return f"validate {level}" if level else "validate"


def history_rows(
    db: Database, *, host=None, gpu=None, metric=None, since=None, until=None, limit: int = 200
) -> list[dict]:
    limit = limits.number(limit, "--limit", limits.Range(1, MAX_ROWS, "rows"))
    since, until = window(since, until)
    uuid, index = gpu_filter(gpu, host)
    out = []
    with db.session() as s:
        q = (
            select(Check, Gpu.uuid, Validation.level)
            .outerjoin(Gpu, Gpu.id == Check.gpu_id)
            .join(Validation, Validation.id == Check.validation_id)
        )
        q = check_filter(q, host, uuid, index, metric)
        if since:
            q = q.where(Check.at >= since)
        if until:
            q = q.where(Check.at <= until)
        for c, u, level in s.execute(q.order_by(Check.at.desc(), Check.id).limit(limit)):
            out.append(
                dict(
                    at=aware_utc(c.at),
                    host=c.host,
                    gpu=c.gpu_index,
                    uuid=u,
                    metric=c.name,
                    value=c.value if c.value is not None else c.value_text,
                    unit=c.unit,
                    verdict=c.verdict,
                    stack=c.stack,
                    source=check_source(level),
                )
            )
        q = select(Run)
        if host:
            q = q.where(Run.host == host)
        if uuid or index is not None:
            sub = select(RunGpu.run_id).outerjoin(Gpu, Gpu.id == RunGpu.gpu_id)
            sub = sub.where(Gpu.uuid == uuid) if uuid else sub.where(RunGpu.gpu_index == index)
            q = q.where(Run.id.in_(sub))
        if metric:
            q = q.where((Run.benchmark + " throughput").contains(metric, autoescape=True))
        if since:
            q = q.where(Run.at >= since)
        if until:
            q = q.where(Run.at <= until)
        runs = s.scalars(q.order_by(Run.at.desc(), Run.id).limit(limit)).all()
        gpus = {}
        if runs:
            for rg, u in s.execute(
                select(RunGpu, Gpu.uuid)
                .outerjoin(Gpu, Gpu.id == RunGpu.gpu_id)
                .where(RunGpu.run_id.in_([r.id for r in runs]))
            ):
                gpus.setdefault(rg.run_id, []).append((rg.gpu_index, u))
        for r in runs:
            used = sorted(gpus.get(r.id, []))
            out.append(
                dict(
                    at=aware_utc(r.at),
                    host=r.host,
                    gpu=",".join(str(i) for i, _ in used) or None,
                    uuid=",".join(u for _, u in used if u) or None,
                    metric=f"{r.benchmark} throughput",
                    value=r.samples_per_s,
                    unit=r.sample_unit and f"{r.sample_unit}/s",
                    verdict=r.outcome,
                    stack=r.stack,
                    source=r.sweep or "run",
                )
            )
    far = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    out.sort(key=lambda r: r["at"] or far, reverse=True)
    return out[:limit]


def _cell(v, n: int = 48) -> str:
    """A stored value for the terminal: a number whole, text with control characters escaped
    (lab.core.errors.printable) and at most ``n`` characters, a cut one ending in "..."."""
    if v is None or v == "":
        return "-"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return term.number(v)  # whole: never cut, never in exponent form
    return excerpt(printable(v), n)  # stored text: escaped, and a long one said to be cut ("...")


def _value(v, unit) -> str:
    """The value with its unit."""
    text = _cell(v, 64)
    return f"{text} {_cell(unit, 24)}" if unit and v not in (None, "") else text


def table(rows: list[dict]) -> list[str]:
    if not rows:
        return [advice.carry("no history matches (import results with `invoke history.import results`)")]
    head = ("time (UTC)", "host", "GPU", "verdict", "metric", "value", "from")
    body = [
        (
            f"{r['at']:%Y-%m-%d %H:%M}" if r["at"] else "-",
            _cell(r["host"], 64),
            _cell(r["gpu"]),
            _cell(r["verdict"], 16),
            _cell(r["metric"], 96),
            _value(r["value"], r["unit"]),
            _cell(r["source"], 64),
        )
        for r in rows
    ]
    return term.table(head, body, verdict_col=3)
