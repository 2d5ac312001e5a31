"""The reference study as a sweep plan: the six benchmarks, run counts, and how long it takes.

``lab/data/study.yml`` (schema ``lab/schemas/study.schema.json``) says what
``--workloads all`` means (the study's six MLPerf v0.5 benchmarks) and holds
the figures that estimate a run's wall time, each with its source. A plan's
estimate per unit (a host, or the hosts of a multi-node run: their runs go one
after another, units in parallel) sums its runs:

* a complete run of this lab with the same workload, mode, scale, device and
  GPU count (``results/*/sweep.json``): the median wall time of those runs;
* else, at full scale, the data file's figures (see its header);
* else nothing: tiny and small are test scales, only earlier runs estimate them.

``describe`` prints the plan that way for ``invoke sweep --dry-run``.
"""

from __future__ import annotations

import datetime as _dt
import statistics
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lab.core import bounded
from lab.sweep import pilot
from lab.sweep import preflight
from lab.core.errors import ConfigError
from lab.core.mlperf import default_rules
from lab.core.schema import load_yaml
from lab.core.fields import RunState

DATA = Path(__file__).resolve().parents[1] / "data" / "study.yml"
ALL = "all"
SWEEP_STATE_MAX_BYTES = 64 << 20  # a sweep.json larger than this is not read for estimates


@dataclass(frozen=True)
class Study:
    path: Path
    title: str
    workloads: tuple[str, ...]
    estimates: dict
    time_limit: dict

    def factor(self, device: str, workload: str) -> float | None:
        """Time of an epoch on one GPU of ``device`` over one GPU of the reference device."""
        d = self.estimates["devices"].get(device)
        if d is None:
            return None
        if "factor" in d:
            return float(d["factor"])
        base = self.factor(d["relative_to"], workload)
        ratio = d["by_workload"].get(workload)
        return None if base is None or ratio is None else base * ratio

    def epochs(self, workload: str, device: str, gpus: int) -> float:
        e = self.estimates["workloads"][workload]["epochs"]
        table = (e.get("by_device") or {}).get(device) or {}
        return float(table.get(gpus, table.get(str(gpus), e["value"])))  # YAML reads `1: 12` as an int key

    def minutes(self, workload: str, mode: str, device: str | None, gpus: int) -> float | None:
        """The data file's estimate of one full-scale run; None where it has no figure."""
        w = self.estimates["workloads"].get(workload)
        if w is None or device is None or gpus < 1:
            return None
        if mode == "throughput":
            return float(w["throughput_run_minutes"]["value"])
        ref = w["reference"]
        f = self.factor(device, workload)
        ref_f = self.factor(ref["device"], workload)
        if f is None or not ref_f:
            return None
        per_gpu_epoch = ref["epoch_minutes"] * ref["gpus"] * f / ref_f
        eff = self.estimates["scaling_efficiency"]["value"] if gpus > 1 else 1.0
        return (
            self.epochs(workload, device, gpus) * per_gpu_epoch / (gpus * eff)
            + self.estimates["run_overhead_minutes"]["value"]
        )


@lru_cache(maxsize=4)
def load(path: Path | str | None = None) -> Study:
    """Read and check lab/data/study.yml; a bad file is one ConfigError naming the place."""
    path = Path(path) if path else DATA
    doc = load_yaml(path, "study")
    est = doc["estimates"]
    devices = est["devices"]
    for name, d in devices.items():
        seen = [name]
        while "relative_to" in d:
            if d["relative_to"] not in devices:
                raise ConfigError(
                    f"{path}: estimates.devices.{name}: relative_to {d['relative_to']!r} is not a device of this file"
                )
            if d["relative_to"] in seen:
                raise ConfigError(
                    f"{path}: estimates.devices.{name}: relative_to makes a loop "
                    f"({' -> '.join(seen + [d['relative_to']])})"
                )
            seen.append(d["relative_to"])
            d = devices[d["relative_to"]]
    for w in doc["workloads"]:
        entry = est["workloads"].get(w)
        if entry is None:
            raise ConfigError(f"{path}: estimates.workloads: no entry for the study's workload {w!r}")
        if entry["reference"]["device"] not in devices:
            raise ConfigError(
                f"{path}: estimates.workloads.{w}.reference.device "
                f"{entry['reference']['device']!r} is not a device of estimates.devices"
            )
    return Study(path, doc["study"], tuple(doc["workloads"]), est, doc["time_limit"])


def expand_workloads(workloads: list[str]) -> list[str]:
    """``all`` -> the study's six benchmarks; other lists are returned as they are."""
    if ALL not in workloads:
        return list(workloads)
    if len(workloads) > 1:
        raise ConfigError(
            f"--workloads: {ALL!r} stands for the study's benchmarks ({', '.join(load().workloads)}); give it alone"
        )
    return list(load().workloads)


# --------------------------------------------------------------------------- earlier runs

HOST = "host"  # first member of history()'s per-host keys


def _parse_time(value) -> _dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def _device_of(host_doc: dict, gpus: int, rules) -> str | None:
    if gpus == 0:
        return "CPU"
    topo = host_doc.get("topology") if isinstance(host_doc.get("topology"), dict) else {}
    names = [g.get("name") for g in topo.get("gpus") or [] if isinstance(g, dict) and isinstance(g.get("name"), str)]
    if names:
        return rules.device(names[0])
    model = host_doc.get("gpu_model")
    return rules.device(model) if isinstance(model, str) and model != "auto" else None


def history(results_dir: Path | str | None) -> dict[tuple, list[float]]:
    """Minutes of the complete runs of every sweep under ``results_dir``, by (workload, mode, scale, device,
    GPUs), and by ("host", host, workload, mode, scale, GPUs). Unreadable or odd files are passed over."""
    out: dict[tuple, list[float]] = defaultdict(list)
    root = Path(results_dir) if results_dir else None
    if root is None or not root.is_dir():
        return out
    rules = default_rules()
    for state in sorted(root.glob("*/sweep.json")):
        try:
            doc = bounded.read_json(state, root=root, limit=SWEEP_STATE_MAX_BYTES)
        except bounded.Unreadable:
            continue
        hosts = doc.get("hosts") if isinstance(doc, dict) and isinstance(doc.get("hosts"), dict) else {}
        for r in doc.get("runs") or [] if isinstance(doc, dict) else []:
            if not isinstance(r, dict) or r.get("state") != RunState.COMPLETE:
                continue
            t0, t1 = _parse_time(r.get("started")), _parse_time(r.get("ended"))
            gpus = r.get("gpus")
            host = hosts.get(r["host"]) if isinstance(r.get("host"), str) else None
            if (
                t0 is None
                or t1 is None
                or t1 <= t0
                or not isinstance(gpus, int)
                or gpus < 0
                or not isinstance(host, dict)
            ):
                continue
            minutes = (t1 - t0).total_seconds() / 60.0
            # the same host's own runs, by GPU count: what estimates a host whose model or count is 'auto'
            out[(HOST, r["host"], r.get("workload"), r.get("mode"), r.get("scale"), gpus)].append(minutes)
            device = _device_of(host, gpus, rules)
            if device is not None:
                out[(r.get("workload"), r.get("mode"), r.get("scale"), device, gpus)].append(minutes)
    return out


def _host_past(run, past: dict) -> float | None:
    """Minutes of ``run`` from its first host's own earlier runs of the same workload, mode and scale: of
    the same GPU count, or for a count not known yet ('all' on a host of 'auto') the sum over the counts
    that host ran (each count's median), as 'all' expands to them."""
    if not getattr(run, "hosts", None):
        return None
    own = {k[5]: v for k, v in past.items() if k[:5] == (HOST, run.hosts[0], run.workload, run.mode, run.scale) and v}
    if run.gpus >= 0:
        return statistics.median(own[run.gpus]) if run.gpus in own else None
    return sum(statistics.median(v) for v in own.values()) if own else None


# --------------------------------------------------------------------------- the plan


def host_device(host) -> str | None:
    """The device name of an inventory host (the GPU model catalogue's name), None when 'auto'."""
    if host.gpu_count == 0:
        return "CPU"
    if not isinstance(host.gpu_model, str) or host.gpu_model == "auto":
        return None
    return default_rules().device(host.gpu_model)


def estimate(run, device: str | None, past: dict, study: Study | None = None) -> tuple[float | None, str]:
    """Minutes of one planned run and where the figure comes from."""
    key = (run.workload, run.mode, run.scale, "CPU" if run.gpus == 0 else device, run.gpus)
    if past.get(key):
        return statistics.median(past[key]), "earlier runs"
    if device is None or run.gpus < 0:  # 'auto': what this host itself took before
        own = _host_past(run, past)
        if own is not None:
            return own, "earlier runs on this host"
    if run.scale != "full":
        return None, "test scale"
    study = study or load()
    if run.gpus < 0 or device is None:
        return None, "GPU model or count 'auto'"
    m = study.minutes(run.workload, run.mode, device, run.gpus)
    return (m, "lab/data/study.yml") if m is not None else (None, f"no figure for {run.workload} on {device}")


def unit_device(hosts: list, run, topologies: dict | None = None) -> str | None:
    """The device of a run's first node: its probed GPU names, else its inventory model."""
    head = next((h for h in hosts if h.name == run.hosts[0]), None)
    topo = (topologies or {}).get(run.hosts[0])
    if run.gpus == 0:
        return "CPU"
    names = [g.get("name") for g in (topo or {}).get("gpus") or [] if g.get("name")]
    if names:
        return default_rules().device(names[0])
    return host_device(head) if head is not None else None


def time_limit_minutes(run, device: str | None, past: dict, study: Study | None = None) -> float:
    """A run's time limit when ``run_timeout_minutes`` is ``auto`` (lab/data/study.yml, time_limit)."""
    study = study or load()
    t = study.time_limit
    m, _ = estimate(run, device, past, study)
    if m is None:
        return float(t["unknown_full_minutes"] if run.scale == "full" else t["unknown_test_minutes"])
    return min(float(t["maximum_minutes"]), max(float(t["minimum_minutes"]), t["factor"] * m))


def fmt_minutes(m: float | None) -> str:
    if m is None:
        return "unknown"
    if m < 1:
        return "under 1 min"
    if m < 60:
        return f"{round(m)} min"
    if m < 48 * 60:
        h, mm = divmod(round(m), 60)
        return f"{h} h {mm:02d} min"
    d, h = divmod(round(m / 60), 24)
    return f"{d} d {h} h"


def _counts(values) -> str:
    vs = sorted(set(values))
    return ",".join("all" if v < 0 else str(v) for v in vs)


@dataclass
class UnitEstimate:
    unit: tuple[str, ...]
    runs: int
    minutes: float  # sum of the runs with an estimate
    unknown: int  # runs without one


def describe(runs: list, hosts: list, *, past: dict | None = None, data=None) -> tuple[list[str], list[UnitEstimate]]:
    """The plan by unit and workload with estimated wall times (``data``: lab.sweep.preflight results by host)."""
    past = past or {}
    study = load()
    by_name = {h.name: h for h in hosts}
    units: dict[tuple, list] = defaultdict(list)
    for r in runs:
        units[tuple(r.hosts)].append(r)
    lines, totals = [], []
    for unit, rs in units.items():
        head = by_name.get(unit[0])
        device = host_device(head) if head is not None else None
        rows, total, unknown = [], 0.0, 0
        by_w: dict[str, list] = defaultdict(list)
        for r in rs:
            by_w[r.workload].append(r)
        for w, wr in by_w.items():
            mins, bases = 0.0, set()
            missing = 0
            for r in wr:
                m, basis = estimate(r, device, past, study)
                bases.add(basis)
                if m is None:
                    missing += 1
                else:
                    mins += m
            total += mins
            unknown += missing
            seeds = len({r.seed for r in wr})
            if missing == len(wr):
                est = "unknown"
            elif missing:
                est = f"{fmt_minutes(mins)} + {missing} unknown"
            else:
                est = fmt_minutes(mins)
            rows.append(
                f"  {w:<12} GPUs {_counts(r.gpus for r in wr):<8} x {seeds:>3} seed(s) "
                f"{len(wr):>5} runs  {est:<16} ({', '.join(sorted(bases))})"
            )
        count = f"{head.gpu_count}x " if head is not None and isinstance(head.gpu_count, int) and head.gpu_count else ""
        what = device or "GPU model auto"
        nodes = f"{len(unit)} nodes of " if len(unit) > 1 else ""
        lines.append(
            f"{'+'.join(unit)} ({nodes}{count}{what}): {len(rs)} runs, "
            f"{('about ' if total >= 1 else '') + fmt_minutes(total) if total else 'no estimate'}"
            + (f" (+ {unknown} runs without an estimate)" if unknown and total else "")
        )
        lines += rows
        for name in unit:
            if data is not None and name in data:
                lines += [f"  {name}: {x}" if len(unit) > 1 else f"  {x}" for x in data[name].lines()]
        totals.append(UnitEstimate(unit, len(rs), total, unknown))
    if totals:
        longest = max(t.minutes for t in totals)
        machine = sum(t.minutes * len(t.unit) for t in totals)
        lines.append(
            f"estimated wall time: {fmt_minutes(longest) if longest else 'unknown'} "
            f"(units run in parallel, each unit's runs one after another); "
            f"{fmt_minutes(machine) if machine else 'unknown'} of host time in all"
        )
    return lines, totals


def dry_run(
    hosts: list, runs: list, name: str, *, results_dir=None, catalogue=None, settings=None
) -> tuple[list[str], str | None]:
    """What ``invoke sweep --dry-run`` prints (with the pilot of each compile group, lab.sweep.pilot),
    and the refusal line when a host lacks prepared data. ``settings``: lab.sweep.hostrun.Settings (None: no pilots).

    The only contact with the hosts is lab.sweep.preflight's read-only probe (for runs that read prepared data)."""
    data = preflight.gather(hosts, runs, catalogue)
    lines, _ = describe(runs, hosts, past=history(results_dir), data=data)
    modes = ", ".join(sorted({r.mode for r in runs}))
    scales = ", ".join(sorted({r.scale for r in runs}))
    units = len({tuple(r.hosts) for r in runs})
    head = f"sweep {name}: mode {modes}, scale {scales}; {len(runs)} runs on {units} unit(s)"
    tail = f"{len(runs)} runs planned for sweep {name} on {units} unit(s); nothing started (--dry-run)"
    pilots = pilot.describe(
        runs,
        {h.name: h for h in hosts},
        settings.pilot_wait_s if settings else 0,
        bool(settings and settings.compile_cpu),
    )
    return [head, *lines, *pilots, tail], preflight.refusal(data)
