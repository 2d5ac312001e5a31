"""The sweep's health gate: before a sweep's first run on a host, ``python -m runner health`` there
(GPUs through NVML: uncorrected ECC, retired pages, pending row remaps; XIDs of the kernel log since
the host's last check), judged by lab.validate.health, unless a check of that host passed within
``gpulab.sweep.health_valid_hours`` (the history database). A GPU that fails it is quarantined
(reason, action of lab/data/actions.yml, by "gpulab sweep") and planned around for the rest of the
sweep; the plan and the summary name it. After a failed run the same check runs again (its
document is kept beside the run directory as ``<run id>.health.json`` and recorded).

``memory`` is what the history gives a sweep (lab.history.sweeps.SweepMemory, made by the ``open_memory``
that lab.commands passes to lab.sweep.driver.run_sweep): lab.sweep itself imports nothing of the database.
Without it the gate still runs and plans around what fails, for this sweep only.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from lab.core import advice
from lab.core import bounded, limits, plaindata
from lab.core.errors import GpulabError, RunError, excerpt
from lab.hosts import remote as rmt
from lab.hosts.inventory import Host
from lab.validate import health as judge
from lab.validate import hostchecks
from runner.rundir import HEALTH

MAX_DOC = 4 << 20


def expects_gpus(host: Host) -> bool:
    """The inventory says the host has GPUs: validate's own rule (lab.validate.hostchecks.expects_gpus)."""
    return hostchecks.expects_gpus(host)


def read(remote: rmt.Remote, install: rmt.RunnerInstall) -> dict:
    """The host's health document (``python -m runner health``); RunError when it cannot be had."""
    res = remote.run(install.argv("health"), check=False, timeout=180)
    out = res.stdout.strip().splitlines()
    if res.code != 0 or not out:
        detail = (res.stderr.strip().splitlines() or [f"exit {res.code}, no output"])[-1][:200]
        raise RunError(f"{remote.name}: `runner health` failed: {detail}")
    try:  # a NaN or infinite uptime would hide every XID after it (lab.validate.health compares uptimes)
        doc = plaindata.loads(out[-1], finite=True, limit=MAX_DOC)
    except ValueError as exc:
        raise RunError(f"{remote.name}: `runner health` printed no usable JSON document ({excerpt(exc, 80)})") from None
    problem = judge.check_document(doc)
    if problem:
        raise RunError(f"{remote.name}: `runner health`: {problem}")
    return doc


def needed(hosts: list[Host], memory, hours: float, echo) -> set[str]:
    """The hosts whose gate runs: no passing check within the window (all of them without a database)."""
    out = set()
    for h in hosts:
        try:
            fresh = memory is not None and memory.recent_pass(h.name, hours)
        except GpulabError as exc:
            echo(f"history: not read: {exc.message}; checking {h.name}'s health")
            fresh = False
        if fresh:
            echo(f"health {h.name}: a check passed within {hours:g} h (gpulab.sweep.health_valid_hours): not run again")
        else:
            out.add(h.name)
    return out


def _judge(host: Host, doc: dict, memory, echo, used=()):
    mark = None
    if memory is not None:
        try:
            mark = memory.mark(host.name)
        except GpulabError as exc:
            echo(f"history: not read: {exc.message}")
    return judge.judge(doc, expect_gpus=expects_gpus(host), mark=mark, used=used)


def _record(host: Host, verdict, doc: dict, memory, echo, after_run: str | None = None) -> None:
    if memory is None:
        return
    try:
        for line in memory.record_health(host.name, verdict, doc, after_run=after_run):
            echo(f"quarantine: {line}")
    except GpulabError as exc:
        echo(f"history: not recorded: {exc.message} (health of {host.name}); the sweep plans around it all the same")


def apply(hosts: list[Host], docs: dict[str, dict], memory, quarantine: dict | None, echo) -> dict[str, dict]:
    """Judge and record each host's health document; the quarantine (for_sweep's form) with what failed
    added (a GPU by its index; a host only through `invoke quarantine.add`)."""
    out = {
        k: {"gpus": None if v.get("gpus") is None else list(v["gpus"]), "reason": v["reason"]}
        for k, v in (quarantine or {}).items()
    }
    for h in hosts:
        doc = docs.get(h.name)
        if doc is None:
            continue
        verdict = _judge(h, doc, memory, echo)
        echo(f"health {h.name}: {verdict.line()}")
        _record(h, verdict, doc, memory, echo)
        for f in verdict.failures:
            if f.gpu is None:
                echo(
                    advice.carry(
                        f"health {h.name}: {f.reason}: not quarantined (no GPU to name); "
                        f"`invoke quarantine.add {h.name} --reason {shlex.quote(f.reason[:80])}` keeps the host out"
                    )
                )
                continue
            entry = out.setdefault(h.name, {"gpus": [], "reason": ""})
            if entry["gpus"] is None or f.gpu in entry["gpus"]:
                continue
            entry["gpus"] = sorted(entry["gpus"] + [f.gpu])
            entry["reason"] = "; ".join(x for x in (entry["reason"], f"GPU {f.gpu}: health check: {f.reason}") if x)
    return out


def after_run(host: Host, run_id: str, run_dir: Path, used, memory, echo) -> dict[int, str]:
    """A failed run's epilogue: its ``health.json`` (written by the runner, listed in SHA256SUMS) judged
    and recorded; the GPUs that failed it (an XID since the last check, a GPU lost, a pending remap...)
    are quarantined. Returns {GPU index: reason} for the rest of the sweep to plan around."""
    try:
        doc = plaindata.loads(bounded.read_text(run_dir / HEALTH, root=run_dir, limit=limits.JSON_BYTES), finite=True)
    except (bounded.Unreadable, OSError):
        return {}
    except ValueError as exc:  # NaN, Infinity: see read
        echo(f"health {host.name} after {run_id}: {HEALTH}: not a usable JSON document ({excerpt(exc, 80)})")
        return {}
    problem = judge.check_document(doc)
    if problem:
        echo(f"health {host.name} after {run_id}: {HEALTH}: {problem}")
        return {}
    verdict = _judge(host, doc, memory, echo, used=used)
    echo(f"health {host.name} after {run_id}: {verdict.line()}")
    # the run's own GPUs (and the host): another GPU's known fault is no news of this run
    verdict = dataclasses.replace(verdict, failures=[f for f in verdict.failures if f.gpu is None or f.gpu in used])
    _record(host, verdict, doc, memory, echo, after_run=run_id)
    return {f.gpu: f.reason for f in verdict.failures if f.gpu is not None}


def held_reason(run, held: dict[str, dict[int, str]]) -> str | None:
    """Why a planned run may not start: a GPU of it quarantined during this sweep (None: it may)."""
    hit = {i: why for h in run.hosts for i, why in held.get(h, {}).items() if i in run.gpu_ids}
    if not hit:
        return None
    return "not run: " + "; ".join(f"GPU {i} quarantined during this sweep ({why})" for i, why in sorted(hit.items()))
