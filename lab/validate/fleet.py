"""Hardware validation: GPU health and burn-in results against references.

The core is ``evaluate`` (pure: plain data in, plain data out):

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
inventory expects none (gpu_count 0, or auto with no model) and has none is a CPU host (PASS).

``validate_fleet`` gathers the documents over SSH (lab.hosts.remote: install the
runner, ``python -m runner burnin --level L --json``), evaluates them and
writes ``validate.json`` and ``validate.html`` (templates/validate.html.j2);
with ``baseline=True`` it writes a references file built from the hosts
instead (``build_references``).

Modules: lab.validate.verdict (PASS/WARN/FAIL, check records, ``Verdicts``),
lab.validate.gpurefs (the references file and model names), lab.validate.hostchecks (stack and
GPU count), lab.validate.gpuchecks (per GPU, XID, fleet), lab.validate.loadchecks (under load, host metrics),
lab.validate.vendor (DCGM's diagnostic, lab.validate.dcgm, and Fabric Manager,
lab.validate.fabric: gathered after the burn-in, their records beside these), lab.validate.burnindoc (the
document read back, checked), lab.validate.gathering (the burn-in and the vendor tools gathered over SSH;
the stack profiles' expectations), this module (evaluation, baseline, output). The names
re-exported here (``__all__``) are its public interface.
"""

from __future__ import annotations

import datetime as _dt
import functools
import statistics
from pathlib import Path
from typing import Any, Callable, Iterable

from lab.core import paths
from lab.core import schema
from lab.core import writes
from lab.core.errors import CheckFailed, ConfigError, HostError
from lab.validate.gpuchecks import fleet_checks, fleet_medians, gpu_checks, split_snapshot, xid_checks
from lab.validate.loadchecks import burnin_failures, host_metric_checks
from lab.validate import dcgm, trends as trend, vendor
from lab.validate.actions import attach_actions, load_actions
from lab.validate.burnindoc import malformed, read_burnin, unreadable_check
from lab.validate.gathering import LEVEL_TIMEOUT_S, burnin_argv, gather_one, stacks_for, time_limits
from lab.validate.hostchecks import count_checks, stack_checks, installed_version, no_gpu_checks
from lab.validate.linkchecks import guarded, link_window
from lab.validate.toolchecks import beside, gpu_figures, gpu_tool_checks, host_figures, host_tool_checks
from lab.validate.gpurefs import REFERENCES, dump_references, load_references, model_key, model_label
from lab.validate.verdict import (FAIL, GPU_METRICS, HOST_METRICS, NO_GPU, PASS, UNITS, WARN, Verdicts,
                         host_field, check, judge_metric, ref_range, render_html, summary_text, worst,
                         write_outputs)

__all__ = ["FAIL", "GPU_METRICS", "HOST_METRICS", "LEVEL_TIMEOUT_S", "NO_GPU", "PASS", "REFERENCES", "UNITS", "WARN",
           "Verdicts", "build_references", "burnin_argv", "check", "dump_references", "evaluate", "gather_one", "read_burnin",
           "installed_version", "judge_metric", "load_references", "model_key", "model_label", "ref_range",
           "render_html", "split_snapshot", "stacks_for", "summary_text", "validate_fleet", "worst", "write_outputs"]

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
        reasons += [f"GPU {idx} {c['check']}: {c['reason']}" for c in g["checks"] if c["verdict"] == verdict and verdict != PASS]
    return {
        "host": name,
        "verdict": verdict,
        "reason": reasons[0] if reasons else "all checks passed",
        "reasons": reasons,
        "expected_model": host_field(host, "gpu_model") if host is not None else None,
        "expected_count": host_field(host, "gpu_count") if host is not None else None,
        "checks": checks,
        "gpus": gpus,
        "counts": {v: sum(1 for c in checks if c["verdict"] == v) + sum(
            1 for g in gpus.values() for c in g["checks"] if c["verdict"] == v) for v in (PASS, WARN, FAIL)},
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
            mine = [(model_key(g.get("name"), references), g, ((burnin or {}).get("gpus") or {}).get(str(g.get("index"))))
                    for g in probe.get("gpus") or [] if "error" not in g]
            fleet_medians(mine, references)
        except MALFORMED as exc:
            parsed[name] = (snap, exc, None)
            continue
        parsed[name] = (snap, probe, burnin)
        per_gpu += mine
    return parsed, per_gpu


def _gpu_record(g: dict, probe: dict, burnin: dict | None, host, xid, references: dict, medians: dict, past,
                trends) -> dict:
    """One GPU's record: its checks (probe, burn-in, fleet medians, tools, trends) and their worst verdict."""
    idx = g.get("index")
    if "error" in g:
        return {"index": idx, "name": None, "uuid": None, "serial": None, "pci_bus_id": None,
                "model": None, "verdict": FAIL, "checks": [check("readable", FAIL, None, "readable", g["error"])]}
    model = model_key(g.get("name"), references)
    bg = ((burnin or {}).get("gpus") or {}).get(str(idx))
    gc = gpu_checks(g, bg, host, references, model, xid, link_window(probe, burnin, idx),
                     len(probe["gpus"]))
    if burnin is not None:
        gc += burnin_failures(burnin, idx)
    gc += fleet_checks(model, bg, medians, references)
    gc += guarded("nvbandwidth", gpu_tool_checks, burnin, idx, references["models"].get(model) if model else None)
    if past is not None:
        gc += guarded("trends", trend.gpu_trends, g, bg, past, trends or trend.load_trends())
    return {"index": idx, "name": g.get("name"), "uuid": g.get("uuid"), "serial": g.get("serial"),
            "pci_bus_id": g.get("pci_bus_id"), "model": model,
            "verdict": worst(c["verdict"] for c in gc), "checks": gc}


def evaluate(snapshots: dict[str, Any], inventory_hosts: Iterable[Any], references: dict,
             stacks: dict | None = None, *, level: str | None = None, actions: dict | None = None,
             tools: dict | None = None, past: dict | None = None, trends: dict | None = None) -> Verdicts:
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

    out_hosts = {}
    for name in names:
        host = hosts.get(name)
        snap, probe, burnin = parsed[name]
        checks: list[dict] = []
        gpus: dict[str, dict] = {}
        try:
            if isinstance(probe, BaseException):
                raise probe
            if snap is None:
                checks.append(check("reachable", FAIL, None, "a probe document", "no result gathered from this host"))
            elif isinstance(snap, BaseException):
                msg = getattr(snap, "message", None) or str(snap) or type(snap).__name__
                label = "reachable" if isinstance(snap, HostError) or "unreachable" in msg else "runner"
                checks.append(check(label, FAIL, None, "a probe document", msg))
            elif probe is None or not isinstance(probe, dict) or "gpus" not in probe:
                checks.append(check("runner", FAIL, None, "a probe document", "the host's answer is not a probe or burn-in document"))
            elif not probe.get("gpus"):
                checks += no_gpu_checks(host, probe)     # a CPU host where the inventory expects no GPU
            else:
                checks += count_checks(host, probe, probe["gpus"])
                checks += stack_checks(probe, _expected_stack(stacks, name, host))
                xid = (burnin or {}).get("xid")
                if xid is not None:
                    orphans = [e for e in xid.get("events", []) if e.get("gpu") is None]
                    if orphans or xid.get("source") is None:
                        checks += xid_checks(references, orphans, xid.get("source"), xid.get("error"), "XID events (other devices)")
                if burnin is not None:
                    checks += unreadable_check(burnin)
                    if burnin.get("outcome") == "failed":
                        checks += burnin_failures(burnin, None)
                    checks += host_metric_checks(burnin, probe, references)
                    checks += guarded("standard tools", host_tool_checks, burnin, probe, references)
                for g in probe["gpus"]:
                    gpus[str(g.get("index"))] = _gpu_record(g, probe, burnin, host, xid, references, medians,
                                                            past, trends)
        except MALFORMED as exc:
            checks, gpus, probe, burnin = [malformed(exc)], {}, None, None
        cpu_host = any(c.get("cpu_host") for c in checks)
        if isinstance(snap, dict) and not cpu_host:      # DCGM and Fabric Manager have nothing to judge on a CPU host
            checks += vendor.checks(snap, probe, _expected_stack(tools, name, host), gpus)
        rec = _host_record(name, host, checks, gpus)
        rec["level"] = (burnin or {}).get("level") if isinstance(burnin, dict) else None
        rec["collected_at"] = (probe or {}).get("collected_at") if isinstance(probe, dict) else None
        try:
            rec["beside"] = beside(burnin) if isinstance(burnin, dict) else []
        except MALFORMED:
            rec["beside"] = []  # malformed tool figures: host_tool_checks says so
        out_hosts[name] = rec

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


# --------------------------------------------------------------------------- baseline


def _refuse_unmeasured(snapshots: dict[str, Any], names: list[str]) -> None:
    """CheckFailed naming each host that was unreachable, has no GPU or no completed burn-in."""
    bad = []
    for n in names:
        snap = snapshots.get(n)
        if not isinstance(snap, dict):
            bad.append(f"{n}: {getattr(snap, 'message', None) or snap or 'no result'}")
            continue
        probe, burnin = split_snapshot(snap)
        if not probe.get("gpus"):
            bad.append(f"{n}: {NO_GPU}")
        elif burnin is None or burnin.get("level") == "quick":
            bad.append(f"{n}: no burn-in measurements (run --level standard or burn-in)")
        elif burnin.get("outcome") != "completed":
            bad.append(f"{n}: burn-in {burnin.get('outcome')}: {burnin.get('reason')}")
    if bad:
        raise CheckFailed("baseline needs known-good hosts with burn-in results; " + "; ".join(bad))


def build_references(snapshots: dict[str, Any], references: dict, *, hosts: Iterable[str] | None = None,
                     note: str | None = None) -> dict:
    """A references document whose metrics are the medians of known-good hosts.

    Models and metrics seen in the snapshots replace those of ``references``;
    the rest is kept. Raises CheckFailed when a host is unreachable, has no GPU
    or fails a health check (a baseline is only made from good hosts).
    """
    import copy

    names = list(hosts) if hosts is not None else list(snapshots)
    _refuse_unmeasured(snapshots, names)
    # health of the candidates, judged without performance references
    health_refs = copy.deepcopy(references)
    for m in health_refs["models"].values():
        m["metrics"] = {}
    health = evaluate({n: snapshots[n] for n in names}, [{"name": n} for n in names], health_refs, None)
    failing = [f"{n}: {h['reason']}" for n, h in health.hosts.items() if h["verdict"] == FAIL]
    if failing:
        raise CheckFailed("baseline refused, hosts not healthy: " + "; ".join(failing))

    values: dict[str, dict[str, list[float]]] = {}
    gpu_names: dict[str, set[str]] = {}
    for n in names:
        probe, burnin = split_snapshot(snapshots[n])
        for g in probe["gpus"]:
            if "error" in g:
                continue
            model = model_key(g.get("name"), references) or model_label(g.get("name"))
            gpu_names.setdefault(model, set()).add(g.get("name"))
            bg = (burnin.get("gpus") or {}).get(str(g["index"])) or {}
            for metric, v in (bg.get("solo") or {}).items():
                values.setdefault(model, {}).setdefault(metric, []).append(float(v))
            pw = (bg.get("load") or {}).get("power_w_max")
            if pw is not None:
                values.setdefault(model, {}).setdefault("load_power_w", []).append(float(pw))
            for metric, v in gpu_figures(burnin, g["index"]).items():
                values.setdefault(model, {}).setdefault(metric, []).append(v)
        hm = {**(burnin.get("host_metrics") or {}), **host_figures(burnin, probe)}
        models = {model_key(g.get("name"), references) or model_label(g.get("name"))
                  for g in probe["gpus"] if "error" not in g}
        if len(models) == 1:
            for metric in HOST_METRICS:
                if metric in hm:
                    values.setdefault(next(iter(models)), {}).setdefault(metric, []).append(float(hm[metric]))

    out = copy.deepcopy(references)
    tol = references["baseline"]
    stamp = _dt.date.today().isoformat()
    for model, metrics in values.items():
        entry = out["models"].setdefault(model, {"names": sorted(gpu_names.get(model, [])), "metrics": {}})
        for metric, vs in sorted(metrics.items()):
            m = {
                "value": round(statistics.median(vs), 3),
                "unit": UNITS.get(metric, ""),
                "lower": tol["lower"],
                "upper": tol["upper"],
                "source": f"baseline {stamp}: median of {len(vs)} measurement(s) on {', '.join(names)}"
                          + (f" ({note})" if note else ""),
            }
            if tol.get("warn_lower") is not None:
                m["warn_lower"] = tol["warn_lower"]
            if metric in HOST_METRICS:
                m["scope"] = "host"
            entry["metrics"][metric] = m
    schema.conform(out, "gpu-references", "baseline references")
    return out

def validate_fleet(hosts: list, *, level: str = "quick", baseline: bool = False, as_json: bool = False,
                   out_dir: Path | str = Path("results/validate"), references: Path | str | None = None,
                   inventory: Path | str | None = None, stacks: dict | None = None,
                   echo: Callable[[str], None] = print, gather: Callable | None = None,
                   stacks_dir: Path | str | None = None, dcgm_level: Any = None,
                   dcgm_levels: dict | None = None, past: Callable[..., dict] | None = None,
                   limits: dict | None = None) -> Verdicts:
    """Gather every host's burn-in document, judge them, write validate.json/.html.

    DCGM's diagnostic runs at ``dcgm_level`` (--dcgm-level; 0: not at all), else at the level
    ``dcgm_levels`` (gpulab.validate.dcgm_levels) gives this validate level (lab.validate.dcgm.LEVELS).

    With ``baseline``, write ``references-baseline.yml`` (from these hosts)
    instead of verdicts. ``gather(host, level, stamp, local_dir)`` may replace
    the SSH gathering (default ``gather_one``). ``past(uuids, sources, depth)`` gives the gathered GPUs' own
    past as plain data (lab.validate.trends; the entry point reads it from the history database).
    """
    from lab.hosts import remote as rem

    if level not in LEVEL_TIMEOUT_S:
        raise ConfigError(f"--level {level!r}: choose quick, standard or burn-in")
    refs_path = Path(references) if references else REFERENCES
    refs = load_references(refs_path)
    table = trend.load_trends() if past is not None else None
    paths.folder(out_dir, "--out")             # every input is checked before the burn-in starts
    writes.writable_folder(out_dir, "--out")
    dcgm_run = 0 if baseline else dcgm.level_for(level, dcgm_levels, dcgm_level)
    limits = time_limits(limits)             # gpulab.validate.time_limits, checked before anything runs
    if stacks is None and not baseline:
        stacks = stacks_for(hosts, inventory, stacks_dir)
    tools = None if baseline else stacks_for(hosts, inventory, stacks_dir, what="tools")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(out_dir) / stamp
    if gather is None:   # over SSH: never to the example lab's documentation addresses
        rem.inventory.refuse_examples(hosts, inventory)
    gather = gather or functools.partial(gather_one, dcgm_level=dcgm_run, limits=limits)
    snapshots = rem.on_hosts(hosts, lambda h: gather(h, level, stamp, out))
    if baseline:
        data = build_references(snapshots, refs, hosts=[h.name for h in hosts], note=f"level {level}")
        path = out / "references-baseline.yml"
        writes.folder(out, "--out")
        writes.write_text(path, dump_references(data), "--out")
        echo(f"wrote {path} (from {len(hosts)} host(s); review it, then copy it over {refs_path})")
        return Verdicts({"hosts": {}, "verdict": PASS}, files=[path])
    history = past(trend.uuids(snapshots, split_snapshot), trend.sources(table), trend.depth(table)) \
        if past is not None else None
    verdicts = evaluate(snapshots, hosts, refs, stacks, level=level, tools=tools, past=history, trends=table)
    verdicts.files = write_outputs(verdicts, out)
    echo(verdicts.to_json() if as_json else summary_text(verdicts))
    if not as_json:
        for f in verdicts.files:
            echo(f"wrote {f}")
    return verdicts
