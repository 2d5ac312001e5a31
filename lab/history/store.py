"""Writing records (lab.history.sources) into the database: idempotent, one transaction per import.

A run is known by the sha256 of its SHA256SUMS (lab.history.sources keys a
run whose SHA256SUMS lists nothing by its status.json too), a validation by
that of its validate.json: adding one that is there already adds nothing.
Everything one import (or one recorded sweep run, validate or health check)
adds is one transaction: a failure part-way leaves the database as it was and
is one ConfigError line. Two writers at once meet on the unique keys; the one
that loses starts its transaction again and finds the other's rows.

Every row is checked against its table before it is written
(lab.history.values.checked). Writes are in bulk
(GPUs looked up once per import, checks inserted many rows a statement).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from lab.history.db import Database
from lab.history.models import Check, Gpu, Run, RunGpu, Validation
from lab.history.sources import RunRecord, Sources, ValidationRecord
from lab.history.values import FUTURE_SLACK, checked, clean_text, printable  # noqa: F401 - shared with callers

RETRIES = 8
CHUNK = 500  # keys per IN (...), rows per INSERT


@dataclass
class Added:
    runs: int = 0
    runs_present: int = 0
    validations: int = 0
    validations_present: int = 0
    checks: int = 0

    def line(self) -> str:
        return (
            f"{self.runs} run(s) added, {self.runs_present} already there; {self.validations} validation(s) "
            f"added ({self.checks} checks), {self.validations_present} already there"
        )


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def aware_utc(t: dt.datetime | None) -> dt.datetime | None:
    """SQLite gives back naive datetimes: they were written as UTC."""
    return t.replace(tzinfo=dt.timezone.utc) if t is not None and t.tzinfo is None else t


def _present(s: Session, column, keys) -> set:
    keys, found = sorted(set(keys)), set()
    for i in range(0, len(keys), CHUNK):
        found.update(s.scalars(select(column).where(column.in_(keys[i : i + CHUNK]))))
    return found


class _Gpus:
    """The GPUs one import names, by UUID: looked up in one pass, new ones added together (one statement per
    CHUNK), each GPU's serial, name and last host kept from its newest sighting."""

    def __init__(self, s: Session, src: Sources):
        self.s = s
        uuids = {g.uuid for r in src.runs for g in r.gpus if g.uuid}
        uuids |= {c.gpu.uuid for v in src.validations for c in v.checks if c.gpu and c.gpu.uuid}
        self.known: dict[str, Gpu] = {}
        self.new: dict[str, dict] = {}
        self.ids: dict[str, int] = {}
        uuids = sorted(uuids)
        for i in range(0, len(uuids), CHUNK):
            for g in s.scalars(select(Gpu).where(Gpu.uuid.in_(uuids[i : i + CHUNK]))):
                self.known[g.uuid] = g
                self.ids[g.uuid] = g.id

    def seen(self, ref, host, at) -> str | None:
        """Note a sighting of ``ref`` on ``host`` at ``at``; its UUID (None: a GPU without one)."""
        if ref is None or not ref.uuid:
            return None
        gpu = self.known.get(ref.uuid)
        if gpu is None and ref.uuid not in self.new:
            self.new[ref.uuid] = checked(
                Gpu,
                dict(uuid=ref.uuid, serial=ref.serial, name=ref.name, host=host, first_seen=at, last_seen=at),
                f"GPU {ref.uuid}",
            )
            return ref.uuid
        row = self.new.get(ref.uuid)
        last = row["last_seen"] if row is not None else aware_utc(gpu.last_seen)
        first = row["first_seen"] if row is not None else aware_utc(gpu.first_seen)
        update = {}
        if at is not None and (last is None or at >= last):
            update = dict(
                last_seen=at,
                host=host or (row["host"] if row else gpu.host),
                serial=ref.serial or (row["serial"] if row else gpu.serial),
                name=ref.name or (row["name"] if row else gpu.name),
            )
        if at is not None and (first is None or at < first):
            update["first_seen"] = at
        checked(Gpu, update, f"GPU {ref.uuid}")
        if row is not None:
            row.update(update)
        else:
            for k, v in update.items():
                setattr(gpu, k, v)
        return ref.uuid

    def id(self, uuid: str | None) -> int | None:
        return None if uuid is None else self.ids[uuid]

    def write(self) -> None:
        rows = list(self.new.values())
        _insert(self.s, Gpu, rows)
        uuids = sorted(self.new)
        for i in range(0, len(uuids), CHUNK):
            self.ids.update(self.s.execute(select(Gpu.uuid, Gpu.id).where(Gpu.uuid.in_(uuids[i : i + CHUNK]))).all())


def _absent(s: Session, column, records, out: Added, present: str):
    """The records whose key is not in ``column`` yet (each key once); the others counted in ``out.<present>``."""
    have = _present(s, column, [r.key for r in records])
    for rec in records:
        if rec.key in have:
            setattr(out, present, getattr(out, present) + 1)
            continue
        have.add(rec.key)
        yield rec


def write_sources(s: Session, src: Sources) -> Added:
    """Everything of ``src`` not there yet, inside the caller's transaction; what was added."""
    out = Added()
    gpus = _Gpus(s, src)
    runs: list[tuple[Run, dict]] = []
    for rec in _absent(s, Run.key, src.runs, out, "runs_present"):
        what = rec.fields.get("source") or rec.key
        run = Run(**checked(Run, dict(key=rec.key, imported_at=now(), **rec.fields), what))
        s.add(run)
        host, at = rec.fields.get("host"), rec.fields.get("at")
        used: dict = {}
        for g in rec.gpus:
            used.setdefault(g.index, gpus.seen(g, host, at))  # an index twice in a status: once
        runs.append((run, used))
        out.runs += 1
    vals: list[tuple[Validation, list]] = []
    for rec in _absent(s, Validation.key, src.validations, out, "validations_present"):
        v = Validation(
            **checked(
                Validation,
                dict(
                    key=rec.key, source=rec.source, at=rec.at, level=rec.level, verdict=rec.verdict, imported_at=now()
                ),
                rec.source,
            )
        )
        s.add(v)
        vals.append((v, [(c, gpus.seen(c.gpu, c.host, c.at)) for c in rec.checks]))
        out.validations += 1
        out.checks += len(rec.checks)
    s.flush()  # ids of the new runs and validations
    gpus.write()
    _insert(
        s,
        RunGpu,
        [
            checked(RunGpu, dict(run_id=run.id, gpu_index=i, gpu_id=gpus.id(u)), run.source)
            for run, used in runs
            for i, u in used.items()
        ],
    )
    rows = []
    for v, checks in vals:
        for c, u in checks:
            rows.append(
                checked(
                    Check,
                    dict(
                        validation_id=v.id,
                        host=c.host,
                        gpu_id=gpus.id(u),
                        gpu_index=c.gpu.index if c.gpu else None,
                        stack=c.stack,
                        name=c.name,
                        verdict=c.verdict,
                        value=c.value,
                        value_text=c.value_text,
                        unit=c.unit,
                        expected=c.expected,
                        reason=c.reason,
                        at=c.at,
                    ),
                    v.source,
                )
            )
    _insert(s, Check, rows)
    return out


def _insert(s: Session, model, rows: list[dict]) -> None:
    """Core executemany (one statement per CHUNK rows, every row with every column)."""
    table = model.__table__
    keys = [c.name for c in table.columns if c.name != "id"]
    conn = s.connection()
    for i in range(0, len(rows), CHUNK):
        conn.execute(insert(table), [{k: r.get(k) for k in keys} for r in rows[i : i + CHUNK]])


def add_sources(db: Database, src: Sources) -> Added:
    """Everything of ``src`` in one transaction (an import: all of it or, on a failure, nothing)."""
    return db.transaction(lambda s: write_sources(s, src), RETRIES)


def add_run(db: Database, rec: RunRecord) -> bool:
    return add_sources(db, Sources(runs=[rec])).runs == 1


def add_validation(db: Database, rec: ValidationRecord) -> int | None:
    """The number of checks added; None if this validation was there already."""
    added = add_sources(db, Sources(validations=[rec]))
    return added.checks if added.validations else None
