"""Quarantine: GPUs and hosts kept out of sweeps, with who, when and why, until released.

A target is ``HOST`` (the whole host) or ``HOST:INDEX`` (one GPU, by its
index on that host; its UUID is recorded where the database knows it).
``release`` asks for a passing validate since the quarantine began: the
database must hold checks of that host (of that GPU, and of the host itself)
taken after ``added_at``, none of them FAIL; ``force`` releases without.
``for_sweep(db, hosts)`` is what a sweep plans around.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from sqlalchemy import and_, or_, select
from sqlalchemy.exc import IntegrityError

from lab.core import fields, limits, term
from lab.core.errors import CheckFailed, ConfigError, excerpt
from lab.history.db import Database
from lab.history.models import Check, Gpu, Quarantine, RunGpu, Run, Validation
from lab.history.store import aware_utc, now
from lab.history.values import FUTURE_SLACK, clean_text, printable

GPU_SUFFIX = re.compile(r"^(.+):([-+]?\d*)$")  # HOST:, HOST:-1, HOST:100 too: an index to check
MAX_TEXT = 2000
HEALTH_LEVEL = "health"  # lab.history.sweeps: a sweep's health check, recorded as a validation of this level


def is_host(name) -> bool:
    """Whether ``name`` is a host name (lab.core.fields.host_name: the grammar of the inventory and the sweep)."""
    try:
        fields.host_name(name)
    except ConfigError:
        return False
    return True


@dataclass(frozen=True)
class Target:
    host: str
    gpu: int | None = None

    def __str__(self) -> str:
        return self.host if self.gpu is None else f"{self.host} GPU {self.gpu}"


def parse_target(text: str) -> Target:
    """HOST or HOST:GPU_INDEX, the host by the one grammar of host names (lab.core.fields.host_name: what the
    inventory and a sweep accept); a host whose name itself ends in ':<digits>' is quarantined as HOST:INDEX,
    and an index out of range (r740-03:100, r740-03:-1, r740-03:) is refused, never taken for a host's name."""
    bad = ConfigError(f"quarantine: {excerpt(repr(text), 80)} is not HOST or HOST:GPU_INDEX (e.g. r740-03:2)")
    if not isinstance(text, str) or not text.strip():
        raise bad
    text = text.strip()
    m = GPU_SUFFIX.match(text)
    host, gpu = (m.group(1), m.group(2)) if m else (text, None)
    if not is_host(host):
        raise bad
    if gpu is not None:
        gpu = limits.number(gpu, f"quarantine target {excerpt(repr(text), 80)}: GPU index", limits.GPU_INDEX)
    return Target(host, gpu)


def _text(value, what: str, required: bool = True) -> str | None:
    if value in (None, "") and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"quarantine: {what} is required (one line saying why)")
    value = " ".join(value.split())
    if len(value) > MAX_TEXT:
        raise ConfigError(f"quarantine: {what} is longer than {MAX_TEXT} characters")
    return clean_text(value, f"quarantine: {what}")


def open_entries(s, target: Target | None = None):
    q = select(Quarantine).where(Quarantine.released_at.is_(None))
    if target is not None:
        q = q.where(Quarantine.host == target.host)
        q = q.where(Quarantine.gpu_index.is_(None) if target.gpu is None else Quarantine.gpu_index == target.gpu)
    return s.scalars(q.order_by(Quarantine.host, Quarantine.gpu_index, Quarantine.added_at)).all()


def target_gpu_id(s, target: Target) -> int | None:
    """The UUID of the GPU last seen at that index of that host (runs first, then checks), where known."""
    if target.gpu is None:
        return None
    q = (
        select(RunGpu.gpu_id)
        .join(Run, Run.id == RunGpu.run_id)
        .where(Run.host == target.host, RunGpu.gpu_index == target.gpu, RunGpu.gpu_id.is_not(None))
        .order_by(Run.at.desc())
        .limit(1)
    )
    found = s.scalar(q)
    if found is None:
        found = s.scalar(
            select(Check.gpu_id)
            .where(Check.host == target.host, Check.gpu_index == target.gpu, Check.gpu_id.is_not(None))
            .order_by(Check.at.desc())
            .limit(1)
        )
    return found


def check_entry(reason, who, action=None) -> tuple[str, str, str | None]:
    """The texts of an entry, each one line; ConfigError if one is missing or too long."""
    return _text(reason, "--reason"), _text(who, "--who"), _text(action, "--action", False)


def check_release(who, note=None) -> tuple[str, str | None]:
    return _text(who, "--who"), _text(note, "--note", False)


def add(
    db: Database, target: Target, *, reason: str, who: str, action: str | None = None, at: dt.datetime | None = None
) -> tuple[Quarantine, bool]:
    """(the entry, True) once added; (the open entry, False) if the target is quarantined already."""
    check_entry(reason, who, action)
    with db.session() as s:
        return add_in(s, target, reason=reason, who=who, action=action, at=at)


def add_in(
    s, target: Target, *, reason: str, who: str, action: str | None = None, at: dt.datetime | None = None
) -> tuple[Quarantine, bool]:
    """``add`` inside the caller's transaction (a validate or a sweep's health check records its checks and
    what they quarantine at once). One open entry per target is the database's rule (the partial unique index
    uq_quarantine_open): of two writers at once, the second finds the first's entry."""
    reason, who, action = check_entry(reason, who, action)
    fields.host_name(target.host, "quarantine target")
    for _ in range(2):
        existing = open_entries(s, target)
        if existing:
            return existing[0], False
        entry = Quarantine(
            host=target.host,
            gpu_index=target.gpu,
            gpu_id=target_gpu_id(s, target),
            reason=reason,
            action=action,
            who=who,
            added_at=at or now(),
        )
        try:
            with s.begin_nested():
                s.add(entry)
        except IntegrityError:  # another writer's entry of this target, committed meanwhile: it stands
            continue
        return entry, True
    raise ConfigError(f"quarantine: {target}: another writer keeps changing it; try again")


def _passing_validate(s, entry: Quarantine) -> tuple[bool, str]:
    """Whether the newest validate of the target since it was quarantined passed (no FAIL of the host itself
    or, for a GPU, of that GPU)."""
    since = aware_utc(entry.added_at)
    scope = (
        Check.gpu_index.is_(None)
        if entry.gpu_index is None
        else or_(Check.gpu_index.is_(None), Check.gpu_index == entry.gpu_index)
    )
    newest = s.execute(
        select(Check.validation_id, Check.at)
        .join(Validation, Validation.id == Check.validation_id)
        .where(
            Check.host == entry.host,
            Check.at > since,
            Check.at <= now() + FUTURE_SLACK,
            or_(Validation.level.is_(None), Validation.level != HEALTH_LEVEL),
        )  # a validate, not a
        .order_by(Check.at.desc(), Check.validation_id.desc())
        .limit(1)
    ).first()  # sweep's health check
    rows = (
        []
        if newest is None
        else s.execute(
            select(Check.name, Check.verdict, Check.gpu_index, Check.reason).where(
                and_(Check.validation_id == newest.validation_id, Check.host == entry.host, scope)
            )
        ).all()
    )
    if not rows or (entry.gpu_index is not None and not any(r.gpu_index is not None for r in rows)):
        return False, f"no validate of {Target(entry.host, entry.gpu_index)} since it was quarantined"
    failed = [r for r in rows if r.verdict == "FAIL"]
    when = f"{aware_utc(newest.at):%Y-%m-%d %H:%M} UTC"
    if failed:
        r = failed[0]
        where = "" if r.gpu_index is None else f"GPU {r.gpu_index} "
        return False, f"the validate of {when} fails: {where}{r.name}: {r.reason} ({len(failed)} FAIL check(s))"
    return True, f"the validate of {when} passed ({len(rows)} check(s))"


def passed_since(db: Database, host: str, since: dt.datetime | None) -> tuple[bool, str]:
    """Whether a validate of ``host`` passed after ``since`` (a drain gpulab made on the node itself, which
    the database does not hold); (False, why) without a time."""
    if since is None:
        return False, f"no time of the drain of {host} known"
    probe = Quarantine(host=host, gpu_index=None, reason="", who="", added_at=since)
    with db.session() as s:
        return _passing_validate(s, probe)


def release(db: Database, target: Target, *, who: str, force: bool = False, note: str | None = None) -> Quarantine:
    who, note = check_release(who, note)
    with db.session() as s:
        entries = open_entries(s, target)
        if not entries:
            raise ConfigError(f"quarantine release: {target} is not quarantined (`invoke quarantine.list`)")
        entry = entries[0]
        if not force:
            ok, why = _passing_validate(s, entry)
            if not ok:
                raise CheckFailed(
                    f"quarantine release: {target}: {why}; run `invoke validate --host "
                    f"{target.host}` (it records into the history), then `invoke quarantine.release "
                    f"{target}`, or release with --force"
                )
            note = note or why
        elif note is None:
            note = "forced"
        for e in entries:
            e.released_at, e.released_by, e.release_note = now(), who, note
    return entry


def active(db: Database, hosts=None) -> list[Quarantine]:
    with db.session() as s:
        rows = list(open_entries(s))
        uuids = {g.id: g.uuid for g in s.scalars(select(Gpu).where(Gpu.id.in_({r.gpu_id for r in rows if r.gpu_id})))}
    for r in rows:
        r.gpu_uuid = uuids.get(r.gpu_id)
    return [r for r in rows if hosts is None or r.host in hosts]


def for_sweep(db: Database, hosts) -> dict[str, dict]:
    """What a sweep plans around, per host with quarantined parts: ``{"gpus": [indices] or None (the whole
    host), "reason": "..."}`` (plain data: lab.sweep knows nothing of the database)."""
    out: dict[str, dict] = {}
    for r in active(db, set(hosts)):
        entry = out.setdefault(r.host, {"gpus": [], "reason": []})
        if r.gpu_index is None:
            entry["gpus"] = None
        elif entry["gpus"] is not None:
            entry["gpus"].append(r.gpu_index)
        entry["reason"].append(r.reason if r.gpu_index is None else f"GPU {r.gpu_index}: {r.reason}")
    for entry in out.values():
        entry["reason"] = "; ".join(entry["reason"])
        if entry["gpus"] is not None:
            entry["gpus"] = sorted(set(entry["gpus"]))
    return out


def table(entries) -> list[str]:
    if not entries:
        return ["nothing quarantined"]
    rows = []
    for e in entries:
        uuid = getattr(e, "gpu_uuid", None)
        since = aware_utc(e.added_at)
        since = f"{since:%Y-%m-%d %H:%M}" if isinstance(since, dt.datetime) else "-"
        rows.append(
            tuple(
                printable(x)
                for x in (
                    Target(e.host, e.gpu_index),
                    since,
                    e.who,
                    f"{e.reason}" + (f" [{uuid}]" if uuid else ""),
                    e.action or "-",
                )
            )
        )
    return term.table(("target", "since (UTC)", "who", "reason", "action"), rows)
