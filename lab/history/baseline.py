"""What `invoke validate --baseline --from-history` builds references from: the figures of known-good GPUs.

``known_good(db, sources)`` gives, per GPU model (the device catalogue's
name, lab.core.mlperf) and key, the values the database holds of GPUs that
were good when measured and are good now: a GPU's value of one validation
counts when none of that GPU's checks, nor its host's own checks, FAILed in
that validation, and the GPU is not in quarantine now (by its UUID, by its
host and index, or its whole host). One value per GPU and validation. Plain
data for lab.validate (which turns it into percentiles and a references file):

    {"H200": {"memory_bandwidth_gbs": {"values": [...], "gpus": 8, "validations": 3,
                                        "first": "2026-11-01T10:00:00Z", "last": "2026-12-01T10:00:00Z"}}}

``sources`` (key -> the check names it is read from) is lab.validate's, as for
the trend checks. Values that are not finite numbers, and rows whose time
does not parse, are left out.
"""

from __future__ import annotations

from sqlalchemy import String, and_, select, type_coerce

from lab.core.mlperf import default_rules
from lab.history import quarantine as q
from lab.history.db import Database
from lab.history.models import Check, Gpu
from lab.history.past import stored_float, iso, number, when

MAX_ROWS = 500_000


def _quarantined_gpus(s) -> set[int]:
    """Ids of the GPUs in quarantine now: named by an entry, at a quarantined index, or on a quarantined host."""
    out: set[int] = set()
    for e in q.open_entries(s):
        if e.gpu_id is not None:
            out.add(e.gpu_id)
        if e.gpu_index is None:
            out.update(s.scalars(select(Gpu.id).where(Gpu.host == e.host)).all())
        elif (gid := q.target_gpu_id(s, q.Target(e.host, e.gpu_index))) is not None:
            out.add(gid)
    return out


def known_good(db: Database, sources: dict[str, list[str]]) -> dict:
    by_name: dict[str, list[str]] = {}
    for key, names in sources.items():
        for n in names:
            by_name.setdefault(n, []).append(key)
    if not by_name:
        return {}
    device = default_rules().device
    with db.session() as s:
        bad_gpus = _quarantined_gpus(s)
        failed = {
            (v, g)
            for v, g in s.execute(
                select(Check.validation_id, Check.gpu_id)
                .where(Check.verdict == "FAIL", Check.gpu_id.is_not(None))
                .distinct()
            )
        }
        failed_hosts = {
            (v, h)
            for v, h in s.execute(
                select(Check.validation_id, Check.host)
                .where(and_(Check.verdict == "FAIL", Check.gpu_index.is_(None)))
                .distinct()
            )
        }
        q_ = (
            select(
                Check.validation_id,
                Check.host,
                Check.gpu_id,
                Gpu.name,
                Check.name,
                type_coerce(Check.value, String),
                type_coerce(Check.at, String),
            )
            .join(Gpu, Gpu.id == Check.gpu_id)
            .where(Check.name.in_(list(by_name)))
            .order_by(Check.id)
            .limit(MAX_ROWS)
        )
        rows = s.execute(q_).all()
    seen: dict[tuple, tuple] = {}  # (model, key, validation, gpu) -> (value, time)
    for vid, host, gid, gname, name, value, at in rows:
        v, t = number(stored_float(value)), when(at)
        if v is None or t is None or gid in bad_gpus or (vid, gid) in failed or (vid, host) in failed_hosts:
            continue
        model = device(gname) if isinstance(gname, str) and gname.strip() else None
        if not model:
            continue
        for key in by_name[name]:
            seen.setdefault((model, key, vid, gid), (v, t))
    out: dict = {}
    for (model, key, vid, gid), (v, t) in seen.items():
        e = out.setdefault(model, {}).setdefault(
            key, {"values": [], "gpus": set(), "validations": set(), "first": t, "last": t}
        )
        e["values"].append(v)
        e["gpus"].add(gid)
        e["validations"].add(vid)
        e["first"], e["last"] = min(e["first"], t), max(e["last"], t)
    for metrics in out.values():
        for e in metrics.values():
            e.update(
                gpus=len(e["gpus"]),
                validations=len(e["validations"]),
                first=iso(e["first"]),
                last=iso(e["last"]),
                values=sorted(e["values"]),
            )
    return out
