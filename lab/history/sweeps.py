"""What a sweep reads from and writes to the history as it goes (lab.sweep calls it through tasks.py,
as plain data: lab.sweep knows nothing of the database).

* ``recent_pass(host, hours)``: whether the host's newest check (a sweep's health check or a validate:
  one verdict, the newest decides) passed within the window (``gpulab.sweep.health_valid_hours``): then
  the sweep's health gate does not run there again;
* ``mark(host)``: the boot id and uptime of the host's last health check (XIDs after it are new);
* ``record_health(host, health, ...)``: a health check (lab.validate.health.Health) as one
  validation of level ``health`` (its checks, the GPUs by UUID, the kernel log mark), and each GPU
  (or host) that failed it quarantined with the reason and the action, by ``gpulab sweep``;
* ``record_run(run_dir)``: one collected run directory (idempotent, as ``history.import``).

Each call opens its own session (threads of one sweep share the engine, one call at a time); a
database that fails raises ConfigError, which the sweep prints as one line: the run directories
stay in results/ and ``invoke history.import`` loads them later.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from pathlib import Path

from sqlalchemy import select

from lab.history import quarantine
from lab.history.db import Database
from lab.history.models import Check, Validation
from lab.history.values import finite
from lab.history.sources import CheckRecord, GpuRef, ValidationRecord, read_sources, utc
from lab.history.sources import Sources
from lab.history.store import FUTURE_SLACK, RETRIES, aware_utc, add_sources, now, write_sources

WHO = "gpulab sweep"
LEVEL = quarantine.HEALTH_LEVEL
MARK = "kernel log mark"


class SweepMemory:
    """The database is opened when first used (after the sweep's own checks of its input: bad input
    leaves nothing behind), its SQLite folder made then with ``make_folder``."""

    def __init__(self, url: str, sweep: str, *, make_folder: bool = False):
        self.url, self.sweep, self.make_folder = url, sweep, make_folder
        self._db: Database | None = None
        self._lock = threading.RLock()

    @property
    def db(self) -> Database:
        from lab.history.db import open_db, sqlite_folder

        with self._lock:
            if self._db is None:
                if self.make_folder:
                    sqlite_folder(self.url)
                self._db = open_db(self.url)
            return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _newest_health(self, s, host: str):
        return s.execute(
            select(Validation.id, Validation.at, Validation.verdict)
            .join(Check, Check.validation_id == Validation.id)
            .where(
                Validation.level == LEVEL, Check.host == host, Validation.at <= now() + FUTURE_SLACK
            )  # a record dated ahead counts for nothing
            .order_by(Validation.at.desc(), Validation.id.desc())
            .limit(1)
        ).first()

    def recent_pass(self, host: str, hours: float) -> bool:
        """One verdict, the newest: the host's newest check of either kind (a sweep's health check or an
        `invoke validate`) passed, and within ``hours``. A newer failing check, whichever kind, runs the gate."""
        if hours <= 0:
            return False
        with self._lock, self.db.session() as s:
            newest = s.execute(
                select(Validation.id, Validation.at)
                .join(Check, Check.validation_id == Validation.id)
                .where(Check.host == host, Validation.at <= now() + FUTURE_SLACK)  # not ahead
                .order_by(Validation.at.desc(), Validation.id.desc())
                .limit(1)
            ).first()
            if newest is None or newest.at is None:
                return False
            failed = s.execute(
                select(Check.id)
                .where(Check.validation_id == newest.id, Check.host == host, Check.verdict == "FAIL")
                .limit(1)
            ).first()
        return failed is None and aware_utc(newest.at) >= now() - dt.timedelta(hours=hours)

    def mark(self, host: str) -> tuple[str | None, float | None] | None:
        with self._lock, self.db.session() as s:
            newest = self._newest_health(s, host)
            if newest is None:
                return None
            row = s.execute(
                select(Check.value, Check.value_text).where(Check.validation_id == newest.id, Check.name == MARK)
            ).first()
        return None if row is None else (row.value_text, row.value)

    def record_health(self, host: str, health, doc: dict, *, after_run: str | None = None) -> list[str]:
        """Record a health check; quarantine the GPUs that failed it. One line per GPU quarantined."""
        at = utc(health.at) or now()
        what = f"after the failed run {after_run}" if after_run else "before the first run"
        raw = json.dumps({"host": host, "doc": doc}, sort_keys=True, default=str).encode()
        rec = ValidationRecord(
            key=hashlib.sha256(raw).hexdigest(),
            source=f"sweep {self.sweep}: health check of {host} {what}",
            at=at,
            level=LEVEL,
            verdict="PASS" if health.ok else "FAIL",
        )
        for c in health.host_checks:
            rec.checks.append(_record(host, c, None, at))
        rec.checks.append(
            CheckRecord(
                host=host,
                name=MARK,
                verdict="PASS",
                value=health.uptime_s,
                value_text=health.boot_id,
                unit="s",
                reason="boot id and uptime",
                at=at,
            )
        )
        for idx, g in sorted(health.gpus.items()):
            ref = GpuRef(index=idx, uuid=g.get("uuid"), serial=g.get("serial"), name=g.get("name"))
            rec.checks += [_record(host, c, ref, at) for c in g["checks"]]

        def write(s) -> list[str]:  # the checks and what they quarantine: one transaction
            lines, done = [], set()
            write_sources(s, Sources(validations=[rec]))
            for f in health.failures:
                if f.gpu is None or f.gpu in done:  # a host (no NVML): said, recorded, kept out by hand only
                    continue
                done.add(f.gpu)
                target = quarantine.Target(host, f.gpu)
                entry, added = quarantine.add_in(
                    s,
                    target,
                    reason=f"health check {what}: {f.reason}"[:2000],
                    who=WHO,
                    action=(f.action or "")[:2000] or None,
                )
                lines.append(
                    f"{target}: quarantined ({f.reason}" + (f"; action {f.action}" if f.action else "") + ")"
                    if added
                    else f"{target}: already quarantined ({entry.reason})"
                )
            return lines

        with self._lock:
            return self.db.transaction(write, RETRIES)

    def record_run(self, run_dir: Path) -> None:
        with self._lock:
            add_sources(self.db, read_sources([run_dir]))


def _record(host: str, c: dict, gpu: GpuRef | None, at) -> CheckRecord:
    m = c.get("measured")
    value = finite(m)
    text = None if value is not None or m is None else (m if isinstance(m, str) else json.dumps(m, default=str))
    return CheckRecord(
        host=host,
        name=c["check"],
        verdict=c["verdict"],
        gpu=gpu,
        value=value,
        value_text=text,
        unit=c.get("unit"),
        expected=c.get("expected"),
        reason=c.get("reason"),
        at=at,
    )


def open_for(url: str, sweep: str, *, make_folder: bool = False) -> SweepMemory:
    """The sweep's side of the database at ``url`` (opened when first used); close it with ``.close()``."""
    return SweepMemory(url, sweep, make_folder=make_folder)
