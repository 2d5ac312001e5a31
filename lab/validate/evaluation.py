"""The core of `invoke validate`: ``evaluate`` (pure: plain data in, plain data out).

    evaluate(snapshots, inventory_hosts, references, stacks) -> Verdicts

- ``snapshots``: host name -> the host's ``runner burnin`` document (which
  holds the probe document), or a bare ``runner probe`` document, or the
  exception met while gathering it (unreachable host, runner failure).
- ``inventory_hosts``: ``lab.hosts.inventory.Host`` records or dicts with
  ``name, gpu_model, gpu_count, pcie, stack``.
- ``references``: the data of inventory/references/gpus.yml (``load_references``).
- ``stacks``: expected versions, either per host name or per stack name:
  ``{"current": {"driver": "580.105.08", "cuda": "12.8.1", "cudnn": "9.8.0.87",
  "nccl": "2.26.2", "torch": "2.7.1"}}``; a host with no entry gets a WARN.

Every check gives PASS, WARN or FAIL with the measured value, the expected
range and a reason; a GPU's verdict is its worst check, a host's the worst of
its own checks and its GPUs'. A host that could not be reached, or has no
NVIDIA GPU although its inventory expects some, is a FAIL with that reason; a host whose
inventory expects none (gpu_count 0, or auto with no model) and has none is a CPU host (PASS). A GPU host
whose burn-in could not read the kernel log fails its "kernel log" check: XIDs not checked are no pass.
lab.validate.fleet gathers the documents and calls it.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Iterable

from lab.core.errors import HostCommandError, HostError
from lab.validate import trends as trend, vendor
from lab.validate.actions import attach_actions, load_actions
from lab.validate.burnindoc import incomplete_check, listed_twice, malformed, unreadable_check
from lab.validate.gpuchecks import (
    fleet_checks,
    fleet_medians,
    gpu_checks,
    kernel_log_checks,
    split_snapshot,
    xid_checks,
)
from lab.validate.gpurefs import model_key
from lab.validate.hostchecks import count_checks, no_gpu_checks, stack_checks
from lab.validate.linkchecks import guarded, link_window
from lab.validate.loadchecks import burnin_failures, host_metric_checks
from lab.validate.toolchecks import beside, gpu_tool_checks, host_tool_checks
from lab.validate.verdict import FAIL, PASS, WARN, Verdicts, check, host_field, worst

SCHEMA = 1
MALFORMED = (TypeError, KeyError, AttributeError, ValueError, IndexError)  # a document of an unread shape

# --------------------------------------------------------------------------- evaluate


def _expected_stack(stacks: dict | None, host_name: str, host) -> dict | None:
    if not stacks:
        return None
    if host_name in stacks:
        return stacks[host_name]
    name = host_field(host, "stack") if host is not None else None
    return stacks.get(name) if name else None


def _host_record(name: str, host, checks: list[dict], gpus: dict) -> dict:
    verdict = worst([c["verdict"] for c in checks] + [g["verdict"] for g in gpus.values()])
    reasons = [f"{c['check']}: {c['reason']}" for c in checks if c["verdict"] == verdict and verdict != PASS]
    for idx, g in gpus.items():
        reasons += [
            f"GPU {idx} {c['check']}: {c['reason']}" for c in g["checks"] if c["verdict"] == verdict and verdict != PASS
        ]
    return {
        "host": name,
        "verdict": verdict,
        "reason": reasons[0] if reasons else "all checks passed",
        "reasons": reasons,
        "expected_model": host_field(host, "gpu_model") if host is not None else None,
        "expected_count": host_field(host, "gpu_count") if host is not None else None,
        "checks": checks,
        "gpus": gpus,
        "counts": {
            v: sum(1 for c in checks if c["verdict"] == v)
            + sum(1 for g in gpus.values() for c in g["checks"] if c["verdict"] == v)
            for v in (PASS, WARN, FAIL)
        },
    }


def _parse_snapshots(snapshots: dict[str, Any], names: list[str], references: dict) -> tuple[dict, list]:
    """First pass: each host's (snapshot, probe or error, burn-in) and its GPUs by model with their burn-in
    entries (for the fleet medians)."""
    parsed: dict[str, tuple] = {}
    per_gpu: list[tuple[str | None, dict, dict | None]] = []
    for name in names:
        snap = snapshots.get(name)
        if snap is None or isinstance(snap, BaseException) or not isinstance(snap, dict):
            parsed[name] = (snap, None, None)
            continue
        try:
            probe, burnin = split_snapshot(snap)
            mine = [
                (model_key(g.get("name"), references), g, ((burnin or {}).get("gpus") or {}).get(str(g.get("index"))))
                for g in probe.get("gpus") or []
                if "error" not in g
            ]
            fleet_medians(mine, references)
        except MALFORMED as exc:
            parsed[name] = (snap, exc, None)
            continue
        parsed[name] = (snap, probe, burnin)
        per_gpu += mine
    return parsed, per_gpu


def _gpu_record(
    g: dict, probe: dict, burnin: dict | None, host, xid, references: dict, medians: dict, past, trends
) -> dict:
    """One GPU's record: its checks (probe, burn-in, fleet medians, tools, trends) and their worst verdict."""
    idx = g.get("index")
    if "error" in g:
        return {
            "index": idx,
            "name": None,
            "uuid": None,
            "serial": None,
            "pci_bus_id": None,
            "model": None,
            "verdict": FAIL,
            "checks": [check("readable", FAIL, None, "readable", g["error"])],
        }
    model = model_key(g.get("name"), references)
    bg = ((burnin or {}).get("gpus") or {}).get(str(idx))
    gc = gpu_checks(g, bg, host, references, model, xid, link_window(probe, burnin, idx), len(probe["gpus"]))
    if burnin is not None:
        gc += burnin_failures(burnin, idx)
    gc += fleet_checks(model, bg, medians, references)
    gc += guarded("nvbandwidth", gpu_tool_checks, burnin, idx, references["models"].get(model) if model else None)
    if past is not None:
        gc += guarded("trends", trend.gpu_trends, g, bg, past, trends or trend.load_trends())
    return {
        "index": idx,
        "name": g.get("name"),
        "uuid": g.get("uuid"),
        "serial": g.get("serial"),
        "pci_bus_id": g.get("pci_bus_id"),
        "model": model,
        "verdict": worst(c["verdict"] for c in gc),
        "checks": gc,
    }


def evaluate(
    snapshots: dict[str, Any],
    inventory_hosts: Iterable[Any],
    references: dict,
    stacks: dict | None = None,
    *,
    level: str | None = None,
    actions: dict | None = None,
    tools: dict | None = None,
    past: dict | None = None,
    trends: dict | None = None,
) -> Verdicts:
    """Verdicts for every host of ``inventory_hosts`` (and any extra host in ``snapshots``);
    each WARN and FAIL with its action from ``actions`` (default: lab/data/actions.yml).

    ``tools``: per host or stack name, what its profile expects of DCGM and Fabric Manager
    (``Stack.tools()``); their records join every snapshot that carries what ``vendor.gather`` found.
    ``past``: each GPU's own past from the history (lab.validate.trends; None: no trend checks), judged by
    ``trends`` (default: lab/data/trends.yml).
    """
    hosts = {(host_field(h, "name")): h for h in inventory_hosts}
    names = list(hosts) + [n for n in snapshots if n not in hosts]
    parsed, per_gpu = _parse_snapshots(snapshots, names, references)
    medians = fleet_medians(per_gpu, references)

    out_hosts = {
        name: _host_verdict(
            name, hosts.get(name), parsed[name], references, medians, stacks, tools, past, trends, level=level
        )
        for name in names
    }
    summary = {v: sum(1 for h in out_hosts.values() if h["verdict"] == v) for v in (PASS, WARN, FAIL)}
    data = {
        "schema": SCHEMA,
        "kind": "gpulab-validate",
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "level": level,
        "verdict": worst(h["verdict"] for h in out_hosts.values()) if out_hosts else PASS,
        "summary": {"hosts": len(out_hosts), **summary},
        "hosts": out_hosts,
        "fleet": medians,
    }
    attach_actions(data, actions if actions is not None else load_actions())
    return Verdicts(data)


def _host_verdict(
    name: str,
    host,
    parsed: tuple,
    references: dict,
    medians: dict,
    stacks: dict | None,
    tools: dict | None,
    past,
    trends,
    *,
    level: str | None = None,
) -> dict:
    """One host's record: its own checks, its GPUs' records, DCGM's and Fabric Manager's, the tools' figures;
    ``level``: the burn-in level asked for (None: the document's own)."""
    snap, probe, burnin = parsed
    try:
        checks, gpus = _host_checks(
            name, host, snap, probe, burnin, references, medians, stacks, past, trends, level=level
        )
    except MALFORMED as exc:
        checks, gpus, probe, burnin = [malformed(exc)], {}, None, None
    cpu_host = any(c.get("cpu_host") for c in checks)
    if isinstance(snap, dict) and not cpu_host:  # DCGM and Fabric Manager have nothing to judge on a CPU host
        checks += vendor.checks(snap, probe, _expected_stack(tools, name, host), gpus)
    rec = _host_record(name, host, checks, gpus)
    rec["level"] = (burnin or {}).get("level") if isinstance(burnin, dict) else None
    rec["collected_at"] = (probe or {}).get("collected_at") if isinstance(probe, dict) else None
    try:
        rec["beside"] = beside(burnin) if isinstance(burnin, dict) else []
    except MALFORMED:
        rec["beside"] = []  # malformed tool figures: host_tool_checks says so
    return rec


def _host_checks(
    name: str,
    host,
    snap,
    probe,
    burnin,
    references: dict,
    medians: dict,
    stacks: dict | None,
    past,
    trends,
    *,
    level: str | None = None,
) -> tuple[list[dict], dict[str, dict]]:
    """(the host's own checks, its GPUs' records by index); a malformed document raises one of MALFORMED."""
    if isinstance(probe, BaseException):
        raise probe
    if snap is None:
        return [check("reachable", FAIL, None, "a probe document", "no result gathered from this host")], {}
    if isinstance(snap, BaseException):
        msg = getattr(snap, "message", None) or str(snap) or type(snap).__name__
        if isinstance(snap, HostCommandError):  # it answered; a command of its was stopped (lab.hosts.capped)
            label = "host command"
        else:
            label = "reachable" if isinstance(snap, HostError) or "unreachable" in msg else "runner"
        return [check(label, FAIL, None, "a probe document", msg)], {}
    if probe is None or not isinstance(probe, dict) or "gpus" not in probe:
        return [
            check("runner", FAIL, None, "a probe document", "the host's answer is not a probe or burn-in document")
        ], {}
    if not probe.get("gpus"):
        return list(no_gpu_checks(host, probe)), {}  # a CPU host where the inventory expects no GPU
    twice = listed_twice(probe["gpus"])
    if twice:
        raise ValueError(f"probe.gpus {twice}")
    checks = list(count_checks(host, probe, probe["gpus"]))
    checks += stack_checks(probe, _expected_stack(stacks, name, host))
    judged = {g.get("index") for g in probe["gpus"] if "error" not in g}  # GPUs whose own records judge theirs
    xid = (burnin or {}).get("xid")
    if xid is not None:
        checks += kernel_log_checks(xid)  # no kernel log read: the XIDs were not checked, a FAIL (never a pass)
        orphans = [e for e in xid.get("events", []) if e.get("gpu") is None or e.get("gpu") not in judged]
        if orphans:
            checks += xid_checks(references, orphans, xid.get("source"), xid.get("error"), "XID events (other devices)")
    checks += incomplete_check(burnin, probe, level)
    if burnin is not None:
        checks += unreadable_check(burnin)
        checks += burnin_failures(burnin, None, judged)
        checks += host_metric_checks(burnin, probe, references)
        checks += guarded("standard tools", host_tool_checks, burnin, probe, references)
    gpus = {
        str(g.get("index")): _gpu_record(g, probe, burnin, host, xid, references, medians, past, trends)
        for g in probe["gpus"]
    }
    return checks, gpus
