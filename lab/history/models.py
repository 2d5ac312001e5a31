"""The tables of the results database (SQLAlchemy declarative models).

A GPU is keyed on its NVML UUID (its serial beside it); a check or a run names
the host, the stack (profile and versions) and the time it is of. Rows are
added by ``lab.history.store`` only; the schema of a database is the head of
the migrations in ``lab/history/migrations/versions/`` (a test keeps these
models and the migrations equal).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, Float, ForeignKey, Index, Integer, MetaData, String, Text, UniqueConstraint, func, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

When = DateTime(timezone=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Gpu(Base):
    """One physical GPU, wherever it was seen."""

    __tablename__ = "gpus"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(96), unique=True)
    serial: Mapped[str | None] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(128))
    host: Mapped[str | None] = mapped_column(String(255))  # where it was last seen
    first_seen: Mapped[dt.datetime | None] = mapped_column(When)
    last_seen: Mapped[dt.datetime | None] = mapped_column(When)


class Validation(Base):
    """One validate.json (one `invoke validate` of some hosts)."""

    __tablename__ = "validations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the file: importing twice adds nothing
    source: Mapped[str] = mapped_column(Text)
    at: Mapped[dt.datetime | None] = mapped_column(When, index=True)
    level: Mapped[str | None] = mapped_column(String(32))
    verdict: Mapped[str | None] = mapped_column(String(8))
    imported_at: Mapped[dt.datetime] = mapped_column(When)


class Check(Base):
    """One check of a validation: of a host (gpu_index None) or of one of its GPUs."""

    __tablename__ = "checks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    validation_id: Mapped[int] = mapped_column(ForeignKey("validations.id", ondelete="CASCADE"), index=True)
    host: Mapped[str] = mapped_column(String(255), index=True)
    gpu_id: Mapped[int | None] = mapped_column(ForeignKey("gpus.id"), index=True)
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    stack: Mapped[str | None] = mapped_column(Text)  # the host's versions as validate read them
    name: Mapped[str] = mapped_column(String(128), index=True)
    verdict: Mapped[str] = mapped_column(String(8))
    value: Mapped[float | None] = mapped_column(Float)  # a number measured; else value_text
    value_text: Mapped[str | None] = mapped_column(Text)
    unit: Mapped[str | None] = mapped_column(String(32))
    expected: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    at: Mapped[dt.datetime | None] = mapped_column(When, index=True)


class Run(Base):
    """One run directory (node 0's of a multi-node run)."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of its SHA256SUMS
    source: Mapped[str] = mapped_column(Text)
    sweep: Mapped[str | None] = mapped_column(String(255), index=True)
    host: Mapped[str | None] = mapped_column(String(255), index=True)
    run_name: Mapped[str] = mapped_column(String(255))
    benchmark: Mapped[str] = mapped_column(String(128))
    device: Mapped[str | None] = mapped_column(String(128))
    gpu_count: Mapped[int | None] = mapped_column(Integer)
    gpu_indices: Mapped[str | None] = mapped_column(String(255))  # "0,1": the run's GPUs on its host
    stack: Mapped[str | None] = mapped_column(Text)
    stack_versions: Mapped[str | None] = mapped_column(Text)
    scale: Mapped[str | None] = mapped_column(String(16))
    mode: Mapped[str | None] = mapped_column(String(16))
    seed: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    samples_per_s: Mapped[float | None] = mapped_column(Float)
    sample_unit: Mapped[str | None] = mapped_column(String(32))
    ttt_s: Mapped[float | None] = mapped_column(Float)
    elapsed_s: Mapped[float | None] = mapped_column(Float)
    energy_j: Mapped[float | None] = mapped_column(Float)
    avg_power_w: Mapped[float | None] = mapped_column(Float)
    at: Mapped[dt.datetime | None] = mapped_column(When, index=True)  # the run's start
    imported_at: Mapped[dt.datetime] = mapped_column(When)


class RunGpu(Base):
    """A GPU a run used (by its UUID, where the run's manifest names it)."""

    __tablename__ = "run_gpus"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_id: Mapped[int | None] = mapped_column(ForeignKey("gpus.id"), index=True)


class Quarantine(Base):
    """A GPU (gpu_index set) or a whole host kept out of sweeps until released."""

    __tablename__ = "quarantine"
    __table_args__ = (
        UniqueConstraint("host", "gpu_index", "added_at", name="uq_quarantine_entry"),
        # one open entry per target, kept by the database (migration 0002), not by a read first
        Index(
            "uq_quarantine_open",
            "host",
            func.coalesce(text("gpu_index"), -1),
            unique=True,
            sqlite_where=text("released_at IS NULL"),
            postgresql_where=text("released_at IS NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255), index=True)
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    gpu_id: Mapped[int | None] = mapped_column(ForeignKey("gpus.id"))
    reason: Mapped[str] = mapped_column(Text)
    action: Mapped[str | None] = mapped_column(Text)
    who: Mapped[str] = mapped_column(String(128))
    added_at: Mapped[dt.datetime] = mapped_column(When)
    released_at: Mapped[dt.datetime | None] = mapped_column(When)
    released_by: Mapped[str | None] = mapped_column(String(128))
    release_note: Mapped[str | None] = mapped_column(Text)
