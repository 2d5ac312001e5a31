"""Hardware validation: `invoke validate`'s entry point.

``validate_fleet`` gathers the documents over SSH (lab.hosts.remote: install the
runner, ``python -m runner burnin --level L --json``), evaluates them (``evaluate``,
lab.validate.evaluation: plain data in, plain data out) and
writes ``validate.json`` and ``validate.html`` (templates/validate.html.j2);
with ``baseline=True`` it writes a references file built from the hosts
instead (``build_references``).

Modules: lab.validate.verdict (PASS/WARN/FAIL, check records, ``Verdicts``),
lab.validate.gpurefs (the references file and model names), lab.validate.hostchecks (stack and
GPU count), lab.validate.gpuchecks (per GPU, XID, fleet), lab.validate.loadchecks (under load, host metrics),
lab.validate.vendor (DCGM's diagnostic, lab.validate.dcgm, and Fabric Manager,
lab.validate.fabric: gathered after the burn-in, their records beside these), lab.validate.burnindoc (the
document read back, checked), lab.validate.gathering (the burn-in and the vendor tools gathered over SSH;
the stack profiles' expectations), lab.validate.evaluation (the verdicts), this module (gathering them,
baseline, output). The names re-exported here (``__all__``) are its public interface.
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
from lab.core.errors import CheckFailed, ConfigError, excerpt
from lab.validate import dcgm, trends as trend
from lab.validate.burnindoc import UNREADABLE, read_burnin
from lab.validate.evaluation import evaluate
from lab.validate.gathering import LEVEL_TIMEOUT_S, burnin_argv, gather_one, stacks_for, time_limits
from lab.validate.gpuchecks import split_snapshot
from lab.validate.gpurefs import REFERENCES, dump_references, load_references, model_key, model_label
from lab.validate.hostchecks import installed_version
from lab.validate.toolchecks import gpu_figures, host_figures
from lab.validate.verdict import (
    FAIL,
    GPU_METRICS,
    HOST_METRICS,
    NO_GPU,
    PASS,
    UNITS,
    WARN,
    Verdicts,
    check,
    judge_metric,
    ref_range,
    render_html,
    summary_text,
    worst,
    write_outputs,
)

__all__ = [
    "FAIL",
    "GPU_METRICS",
    "HOST_METRICS",
    "LEVEL_TIMEOUT_S",
    "NO_GPU",
    "PASS",
    "REFERENCES",
    "UNITS",
    "WARN",
    "Verdicts",
    "build_references",
    "burnin_argv",
    "check",
    "dump_references",
    "evaluate",
    "gather_one",
    "read_burnin",
    "installed_version",
    "judge_metric",
    "load_references",
    "model_key",
    "model_label",
    "ref_range",
    "render_html",
    "split_snapshot",
    "stacks_for",
    "summary_text",
    "validate_fleet",
    "worst",
    "write_outputs",
]

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
        elif burnin.get(UNREADABLE):  # values left out as no measurement: the rest is no known-good figure either
            bad.append(f"{n}: its burn-in document had unreadable values ({'; '.join(burnin[UNREADABLE][:2])[:160]})")
    if bad:
        raise CheckFailed("baseline needs known-good hosts with burn-in results; " + "; ".join(bad))


def build_references(
    snapshots: dict[str, Any], references: dict, *, hosts: Iterable[str] | None = None, note: str | None = None
) -> dict:
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
                if v is not None:  # not measured
                    values.setdefault(model, {}).setdefault(metric, []).append(float(v))
            pw = (bg.get("load") or {}).get("power_w_max")
            if pw is not None:
                values.setdefault(model, {}).setdefault("load_power_w", []).append(float(pw))
            for metric, v in gpu_figures(burnin, g["index"]).items():
                values.setdefault(model, {}).setdefault(metric, []).append(v)
        hm = {**(burnin.get("host_metrics") or {}), **host_figures(burnin, probe)}
        models = {
            model_key(g.get("name"), references) or model_label(g.get("name"))
            for g in probe["gpus"]
            if "error" not in g
        }
        if len(models) == 1:
            for metric in HOST_METRICS:
                if hm.get(metric) is not None:
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


def validate_fleet(
    hosts: list,
    *,
    level: str = "quick",
    baseline: bool = False,
    as_json: bool = False,
    out_dir: Path | str = Path("results/validate"),
    references: Path | str | None = None,
    inventory: Path | str | None = None,
    stacks: dict | None = None,
    echo: Callable[[str], None] = print,
    gather: Callable | None = None,
    stacks_dir: Path | str | None = None,
    dcgm_level: Any = None,
    dcgm_levels: dict | None = None,
    past: Callable[..., dict] | None = None,
    limits: dict | None = None,
) -> Verdicts:
    """Gather every host's burn-in document, judge them, write validate.json/.html.

    DCGM's diagnostic runs at ``dcgm_level`` (--dcgm-level; 0: not at all), else at the level
    ``dcgm_levels`` (gpulab.validate.dcgm_levels) gives this validate level (lab.validate.dcgm.LEVELS).

    With ``baseline``, write ``references-baseline.yml`` (from these hosts)
    instead of verdicts. ``gather(host, level, stamp, local_dir)`` may replace
    the SSH gathering (default ``gather_one``). ``past(uuids, sources, depth)`` gives the gathered GPUs' own
    past as plain data (lab.validate.trends; the entry point reads it from the history database).
    """
    from lab.hosts.fleet import on_hosts
    from lab.hosts.inventory import refuse_examples

    if level not in LEVEL_TIMEOUT_S:
        raise ConfigError(f"--level {excerpt(repr(level), 40)}: choose quick, standard or burn-in")
    refs_path = Path(references) if references else REFERENCES
    refs = load_references(refs_path)
    table = trend.load_trends() if past is not None else None
    paths.folder(out_dir, "--out")  # every input is checked before the burn-in starts
    writes.writable_folder(out_dir, "--out")
    dcgm_run = 0 if baseline else dcgm.level_for(level, dcgm_levels, dcgm_level)
    limits = time_limits(limits)  # gpulab.validate.time_limits, checked before anything runs
    if stacks is None and not baseline:
        stacks = stacks_for(hosts, inventory, stacks_dir)
    tools = None if baseline else stacks_for(hosts, inventory, stacks_dir, what="tools")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(out_dir) / stamp
    if gather is None:  # over SSH: never to the example lab's documentation addresses
        refuse_examples(hosts, inventory)
    gather = gather or functools.partial(gather_one, dcgm_level=dcgm_run, limits=limits)
    snapshots = on_hosts(hosts, lambda h: gather(h, level, stamp, out))
    if baseline:
        data = build_references(snapshots, refs, hosts=[h.name for h in hosts], note=f"level {level}")
        path = out / "references-baseline.yml"
        writes.folder(out, "--out")
        writes.write_text(path, dump_references(data), "--out")
        echo(f"wrote {path} (from {len(hosts)} host(s); review it, then copy it over {refs_path})")
        return Verdicts({"hosts": {}, "verdict": PASS}, files=[path])
    history = (
        past(trend.uuids(snapshots, split_snapshot), trend.sources(table), trend.depth(table))
        if past is not None
        else None
    )
    verdicts = evaluate(snapshots, hosts, refs, stacks, level=level, tools=tools, past=history, trends=table)
    verdicts.files = write_outputs(verdicts, out)
    echo(verdicts.to_json() if as_json else summary_text(verdicts))
    if not as_json:
        for f in verdicts.files:
            echo(f"wrote {f}")
    return verdicts
