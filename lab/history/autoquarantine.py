"""Quarantine after a failing `invoke validate` (gpulab.validate.quarantine, on by default).

``failures(doc)`` reads a validation's verdicts (validate.json's plain data)
and gives what to quarantine: a host whose own checks FAIL (unreachable, no
GPU, a wrong stack, a host-wide burn-in or DCGM failure) as a whole host,
else each of its GPUs whose verdict is FAIL; each with the reason of its first
failing check and that check's action (lab/data/actions.yml, which validate
attached to the record). ``quarantine_failures(db, doc)`` adds them
(who: "gpulab validate") and returns the lines validate's summary prints. A
later passing validate is what ``quarantine.release`` asks for.
"""

from __future__ import annotations

from lab.history import quarantine as q
from lab.history.db import Database

WHO = "gpulab validate"


def _first_fail(checks) -> dict | None:
    for c in checks if isinstance(checks, list) else ():
        if isinstance(c, dict) and c.get("verdict") == "FAIL":
            return c
    return None


def _action(rec: dict) -> str | None:
    act = rec.get("action")
    if isinstance(act, dict) and isinstance(act.get("do"), str):
        return f"{act.get('kind')}: {act['do']}" if isinstance(act.get("kind"), str) else act["do"]
    return None


def _entry(target: q.Target, rec: dict, stamp: str | None, prefix: str = "") -> tuple[q.Target, str, str | None]:
    reason = f"validate {stamp or ''}: {prefix}{rec.get('check')}: {rec.get('reason')}".replace(
        "validate :", "validate:"
    )
    return target, " ".join(reason.split())[: q.MAX_TEXT], (_action(rec) or "")[: q.MAX_TEXT] or None


def failures(doc: dict) -> list[tuple[q.Target, str, str | None]]:
    """(target, reason, action) of every failing host or GPU of a validation's verdicts."""
    out = []
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    stamp = doc.get("generated_at") if isinstance(doc.get("generated_at"), str) else None
    for name, h in (hosts or {}).items() if isinstance(hosts, dict) else ():
        if not isinstance(h, dict) or h.get("verdict") != "FAIL" or not q.is_host(name):
            continue
        rec = _first_fail(h.get("checks"))
        if rec is not None:
            out.append(_entry(q.Target(str(name)), rec, stamp))
            continue
        gpus = h.get("gpus") if isinstance(h.get("gpus"), dict) else {}
        for g in gpus.values():
            idx = g.get("index") if isinstance(g, dict) else None
            if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx <= q.limits.GPU_INDEX.hi:
                continue
            rec = _first_fail(g.get("checks"))
            if g.get("verdict") == "FAIL" and rec is not None:
                out.append(_entry(q.Target(str(name), idx), rec, stamp))
    return out


def _target_text(t: q.Target) -> str:
    return t.host if t.gpu is None else f"{t.host}:{t.gpu}"


def quarantine_failures(db: Database, doc: dict, who: str = WHO) -> list[str]:
    """Quarantine each failure of ``doc`` (one transaction); the summary's lines (one per target)."""
    return db.transaction(lambda s: quarantine_in(s, doc, who), 8)


def quarantine_in(s, doc: dict, who: str = WHO) -> list[str]:
    """``quarantine_failures`` inside the caller's transaction (validate records its checks in the same one)."""
    lines = []
    for target, reason, action in failures(doc):
        entry, added = q.add_in(s, target, reason=reason, who=who, action=action)
        if added:
            lines.append(f"quarantined {_target_text(target)}: {reason}" + (f"; action: {action}" if action else ""))
        else:
            lines.append(
                f"{_target_text(target)}: already quarantined since {entry.added_at:%Y-%m-%d %H:%M} "
                f"by {entry.who}: {entry.reason}"
            )
    return lines
