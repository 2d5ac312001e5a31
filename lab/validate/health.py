"""Judging a host's quick health document (``python -m runner health``): the sweep's health gate
before its first run on a host, and its check after a failed run.

The checks are validate's own (lab.validate.gpuchecks: uncorrected ECC, retired pages, row
remapping, XID events; "GPU present" and "readable" as validate names them), so that a GPU fails
the gate for exactly what would fail it in `invoke validate`, with the action of
lab/data/actions.yml (lab.validate.actions). XIDs count only when they came after ``mark`` (the
boot id and uptime of the host's last check: same boot, later uptime); without a mark, every XID
of the current boot counts; an XID of no GPU the document lists (one that fell off the bus) is the
host's, "XID events (other devices)" as validate names it. A host whose kernel log could not be read
(the document's ``xid.source`` is None: dmesg refused to a non-root user under kernel.dmesg_restrict=1,
no journal) fails validate's "kernel log" check, with what to do: its XIDs were not checked, which never
counts as a pass, and the check keeps the last mark that did read them. Plain data in, plain data out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.core import schema
from lab.core.errors import ConfigError

from lab.validate.actions import action_for, load_actions
from lab.validate.burnindoc import listed_twice
from lab.validate.gpuchecks import (
    GpuFacts,
    ecc_checks,
    gpu_xid_checks,
    kernel_log_checks,
    memory_checks,
    xid_checks,
)
from lab.validate.gpurefs import load_references
from lab.validate.verdict import FAIL, PASS, check

KIND = "gpulab-health"
SCHEMAS = (1,)


@dataclass
class Failure:
    gpu: int | None  # None: the whole host
    reason: str  # "<check>: <reason>"
    action: str | None  # "<kind>: <what to do>" (lab/data/actions.yml)


@dataclass
class Health:
    """Host checks, per-GPU checks (with the GPU's ids) and what failed."""

    ok: bool
    host_checks: list[dict] = field(default_factory=list)
    gpus: dict[int, dict] = field(default_factory=dict)  # index -> {uuid, serial, name, checks}
    failures: list[Failure] = field(default_factory=list)
    boot_id: str | None = None
    uptime_s: float | None = None
    at: str | None = None

    def line(self) -> str:
        if self.ok:
            return f"passed ({len(self.gpus)} GPU(s))"
        return "; ".join(("host" if f.gpu is None else f"GPU {f.gpu}") + f": {f.reason}" for f in self.failures)


def check_document(doc) -> str | None:
    """What is wrong with a health document read from a host (None: one this gpulab reads)."""
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return f"not a health document (kind {KIND!r} expected)"
    if doc.get("schema") not in SCHEMAS:
        return f"health document schema {doc.get('schema')!r} is not one this gpulab reads"
    if not isinstance(doc.get("gpus"), list) or not all(
        isinstance(g, dict) and isinstance(g.get("index"), int) and not isinstance(g.get("index"), bool)
        for g in doc["gpus"]
    ):
        return "its 'gpus' is not a list of GPUs with indices"
    twice = listed_twice(doc["gpus"])
    if twice:
        return f"its 'gpus' {twice}"
    if not isinstance(doc.get("xid"), dict) or not isinstance(doc["xid"].get("events", []), list):
        return "its 'xid' is not an object with events"
    try:  # its probe part (GPUs, ECC, row remapping, ...) has the burn-in document's probe shape
        schema.conform(doc, "burnin", "health document")
    except ConfigError as exc:
        return exc.message
    return None


def _new_events(xid: dict, mark: tuple[str | None, float | None] | None, boot_id) -> list[dict]:
    events = [e for e in xid.get("events") or [] if isinstance(e, dict) and isinstance(e.get("xid"), int)]
    if not mark or mark[0] is None or mark[0] != boot_id or mark[1] is None:
        return events
    return [e for e in events if not isinstance(e.get("uptime_s"), (int, float)) or e["uptime_s"] > mark[1]]


def _action_text(record: dict, table: dict) -> str | None:
    act = action_for(record, table)
    return f"{act['kind']}: {act['do']}" if act else None


def judge(
    doc: dict, *, expect_gpus: bool, mark=None, used=(), refs: dict | None = None, table: dict | None = None
) -> Health:
    """The verdict of one health document (check_document first); ``expect_gpus``: the inventory says
    the host has GPUs, so NVML must answer; ``used``: the GPUs a run had (one NVML no longer lists is lost, as is one it counts, ``gpu_count``, but
    does not list)."""
    refs, table = refs or load_references(), table or load_actions()
    h = Health(ok=True, boot_id=doc.get("boot_id"), uptime_s=doc.get("uptime_s"), at=doc.get("collected_at"))
    nvidia = doc.get("nvidia")
    if nvidia and expect_gpus:
        h.host_checks.append(check("GPU present", FAIL, 0, ">= 1", str(nvidia)[:300]))
    elif nvidia:  # a CPU host, named as validate names it (lab.validate.hostchecks.no_gpu_checks)
        h.host_checks.append(
            check(
                "GPU count",
                PASS,
                0,
                "none expected",
                f"no GPU ({str(nvidia)[:200]}); the inventory expects none: a CPU host",
            )
        )
    elif expect_gpus and not (
        doc.get("gpus") or used or (isinstance(doc.get("gpu_count"), int) and doc["gpu_count"] > 0)
    ):
        # NVML answered with no GPU at all (the runner says so in "nvidia"), none expected by a run (``used``: each
        # one lost, below): nothing was checked, no pass
        h.host_checks.append(check("GPU present", FAIL, doc.get("gpu_count"), ">= 1", "NVML answers but lists no GPU"))
    else:
        h.host_checks.append(check("GPU present", PASS, doc.get("gpu_count"), ">= 1", "NVML answers"))
    xid = dict(doc.get("xid") or {})
    xid["events"] = _new_events(xid, mark, doc.get("boot_id"))
    unread = kernel_log_checks(xid) if doc.get("gpus") or used else []  # a CPU host's XIDs concern no GPU
    if unread:  # XIDs not checked: a FAIL, and the next check counts from the last mark that did read them
        h.host_checks += unread
        h.boot_id, h.uptime_s = (mark[0], mark[1]) if mark else (doc.get("boot_id"), None)
    since = " since the last health check" if mark and mark[0] == doc.get("boot_id") else " since boot"
    judged = {g["index"] for g in doc.get("gpus") or [] if not g.get("error")}
    orphans = [e for e in xid["events"] if e.get("gpu") is None or e.get("gpu") not in judged]
    if orphans:  # a GPU NVML no longer lists (fallen off the bus) has no check of its own: the host's, as validate's
        rec = xid_checks(refs, orphans, xid.get("source"), xid.get("error"), "XID events (other devices)")[0]
        h.host_checks.append({**rec, "reason": rec["reason"].replace(" since boot", since)})
    for g in doc.get("gpus") or []:
        idx = g["index"]
        if g.get("error"):
            checks = [check("readable", FAIL, None, "readable", str(g["error"])[:300])]
        else:
            facts = GpuFacts(g, None, None, refs, None, xid)
            checks = ecc_checks(facts) + memory_checks(facts) + gpu_xid_checks(facts)
            for c in checks:
                if c["check"] == "XID events":
                    c["reason"] = c["reason"].replace(" since boot", since)
        h.gpus[idx] = {"uuid": g.get("uuid"), "serial": g.get("serial"), "name": g.get("name"), "checks": checks}
    count = doc.get("gpu_count")
    counted = set(range(count)) if isinstance(count, int) and 0 < count <= 4096 else set()
    for idx in sorted((set(used) | counted) - set(h.gpus)):  # a GPU counted but not listed is judged by nothing
        h.gpus[idx] = {
            "uuid": None,
            "serial": None,
            "name": None,
            "checks": [
                check(
                    "GPU count",
                    FAIL,
                    doc.get("gpu_count"),
                    f"GPU {idx} listed",
                    f"GPU {idx} lost: NVML no longer lists it",
                )
            ],
        }
    for c in h.host_checks:
        if c["verdict"] == FAIL:
            h.failures.append(Failure(None, f"{c['check']}: {c['reason']}", _action_text(c, table)))
    for idx, g in sorted(h.gpus.items()):
        for c in g["checks"]:
            if c["verdict"] == FAIL:
                h.failures.append(Failure(idx, f"{c['check']}: {c['reason']}", _action_text(c, table)))
    h.ok = not h.failures
    return h
