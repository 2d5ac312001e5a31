"""Writing records (lab.history.sources) into the database: idempotent, one transaction per run or validation.

A run is known by the sha256 of its SHA256SUMS, a validation by that of its
validate.json: adding one that is there already adds nothing. Each run (with
its GPUs) and each validation (with its checks) is one transaction, so a
failure part-way leaves whole ones behind; two writers at once meet on the
unique keys, and the one that loses retries and finds the other's rows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from lab.core.errors import ConfigError
from lab.history.db import Database, _why
from lab.history.models import Check, Gpu, Run, RunGpu, Validation
from lab.history.sources import GpuRef, RunRecord, Sources, ValidationRecord

RETRIES = 8


@dataclass
class Added:
    runs: int = 0
    runs_present: int = 0
    validations: int = 0
    validations_present: int = 0
    checks: int = 0

    def line(self) -> str:
        return (f"{self.runs} run(s) added, {self.runs_present} already there; {self.validations} validation(s) "
                f"added ({self.checks} checks), {self.validations_present} already there")


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _gpu(s: Session, ref: GpuRef | None, host: str | None, at: dt.datetime | None) -> int | None:
    """The id of the GPU with ``ref``'s UUID, added if new; its serial, name and last host kept current."""
    if ref is None or not ref.uuid:
        return None
    gpu = s.scalar(select(Gpu).where(Gpu.uuid == ref.uuid))
    if gpu is None:
        gpu = Gpu(uuid=ref.uuid, serial=ref.serial, name=ref.name, host=host, first_seen=at, last_seen=at)
        s.add(gpu)
        s.flush()
        return gpu.id
    last = _aware(gpu.last_seen)
    if at is not None and (last is None or at >= last):
        gpu.last_seen, gpu.host = at, host or gpu.host
        gpu.serial, gpu.name = ref.serial or gpu.serial, ref.name or gpu.name
    first = _aware(gpu.first_seen)
    if at is not None and (first is None or at < first):
        gpu.first_seen = at
    return gpu.id


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    """SQLite gives back naive datetimes: they were written as UTC."""
    return t.replace(tzinfo=dt.timezone.utc) if t is not None and t.tzinfo is None else t


def _once(db: Database, write) -> bool:
    """Run ``write(session)`` in one transaction, again after a lost race; its result (True: added)."""
    for attempt in range(RETRIES):
        with db.sessions() as s:
            try:
                added = write(s)
                s.commit()
                return added
            except IntegrityError:
                s.rollback()
                if attempt == RETRIES - 1:
                    raise
            except DBAPIError as exc:
                s.rollback()
                raise ConfigError(f"history database {db.name}: {_why(exc)}") from None
    return False


def add_run(db: Database, rec: RunRecord) -> bool:
    def write(s: Session) -> bool:
        if s.scalar(select(Run.id).where(Run.key == rec.key)) is not None:
            return False
        host, at = rec.fields.get("host"), rec.fields.get("at")
        run = Run(key=rec.key, imported_at=now(), **rec.fields)
        s.add(run)
        s.flush()
        for g in rec.gpus:
            s.add(RunGpu(run_id=run.id, gpu_index=g.index, gpu_id=_gpu(s, g, host, at)))
        return True

    return _once(db, write)


def add_validation(db: Database, rec: ValidationRecord) -> int | None:
    """The number of checks added; None if this validation was there already."""
    def write(s: Session):
        if s.scalar(select(Validation.id).where(Validation.key == rec.key)) is not None:
            return None
        v = Validation(key=rec.key, source=rec.source, at=rec.at, level=rec.level, verdict=rec.verdict,
                       imported_at=now())
        s.add(v)
        s.flush()
        for c in rec.checks:
            s.add(Check(validation_id=v.id, host=c.host, gpu_id=_gpu(s, c.gpu, c.host, c.at),
                        gpu_index=c.gpu.index if c.gpu else None, stack=c.stack, name=c.name, verdict=c.verdict,
                        value=c.value, value_text=c.value_text, unit=c.unit, expected=c.expected,
                        reason=c.reason, at=c.at))
        return len(rec.checks)

    return _once(db, write)


def add_sources(db: Database, src: Sources) -> Added:
    out = Added()
    for rec in src.runs:
        if add_run(db, rec):
            out.runs += 1
        else:
            out.runs_present += 1
    for v in src.validations:
        n = add_validation(db, v)
        if n is None:
            out.validations_present += 1
        else:
            out.validations += 1
            out.checks += n
    return out
