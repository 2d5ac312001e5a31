"""Sweeps: hosts x workloads x GPU counts x seeds, run on the hosts, collected here.

A sweep is the directory ``results/<sweep>/`` with ``sweep.json`` (the plan,
each run's state and reason; rewritten atomically) and one run directory per
planned run under ``<host>/<run id>/``. The run id comes from the plan entry
(workload, mode, scale, nodes, GPU count, seed), so that running the same
sweep again finds it: runs already complete and verified are skipped.

How a sweep runs:

* every host is prepared in parallel: connected (strict host keys), its
  runner installed or upgraded to this checkout's version, its GPU topology
  probed (lab.sweep.topology picks each run's GPUs: same PCIe root, else NUMA node);
* one thread per unit (a host, or k hosts for ``--nodes k``), one run at a
  time, each run under the host's own lock (lab.sweep.hostlock), after a free-space
  check; the runner starts detached (``setsid nohup``, survives SSH), every
  process it starts carries a token in its environment
  (``GPULAB_RUN_TOKEN``), so that stopping a run reaches all of them, even
  processes that left the runner's process groups;
* the run is polled; past its time limit (the runner aborts itself at
  ``--max-minutes``; past a margin the controller stops it: SIGTERM to the
  runner, then SIGKILL to every tagged process), Ctrl-C stops every run the
  same way;
* each run directory is fetched (files listed in SHA256SUMS, or everything
  there is when the run never finished) and verified; a corrupt copy is
  fetched again. Each run ends ``complete`` (verified, outcome success or
  target_missed) or ``failed``/``interrupted`` with a one-line reason;
* on resume, a run this sweep started before (its token is in sweep.json) is
  asked of its host first (``UnitWorker._adopt``): finished there and
  verified, it is fetched and counted; still going, it is waited for (its
  lock taken over from the controller that is gone) and fetched; only a run
  that failed or left nothing runs again.

sweep.json is read back through lab.sweep.statefile (checked like the command line,
run folders kept inside the sweep); run-directory files through lab.core.bounded.

Modules, along the data flow: lab.sweep.plan (the plan), lab.sweep.state
(sweep.json), lab.sweep.hostrun (a run's processes on a host, fetching it back),
lab.sweep.unitworker (the thread per unit), this module (preparing the hosts, the
whole sweep, Ctrl-C); lab.sweep.collect (fetching a saved sweep's runs again). Its public names (``__all__``) are its own; the plan, the state and a
host's runs are imported from their modules (lab.sweep.plan, lab.sweep.state, lab.sweep.hostrun).
"""

from __future__ import annotations

import datetime as _dt
import functools
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lab.core import fields
from lab.core import paths
from lab.sweep import pilot
from lab.sweep import slurmworker
from lab.hosts import slurm
from lab.sweep import hostprep
from lab.sweep import preflight
from lab.hosts import runnerdist
from lab.sweep import study
from lab.sweep import supervise
from lab.sweep import statefile
from lab.core.errors import ConfigError
from lab.core.fields import RunState
from lab.hosts.inventory import Host, refuse_examples
from lab.sweep.plan import PlannedRun, parse_list, plan, plan_around, utcnow
from lab.sweep.state import Sweep
from lab.sweep.hostrun import Settings
from lab.sweep.unitworker import Node, UnitWorker


PLAN_OPTIONS = ("gpus", "seeds", "mode", "scale", "nodes", "spread", "max_epochs")  # what plan() takes of the options

__all__ = ["SweepResult", "check_name", "default_name", "resolve_backend", "run_sweep", "slurm_held"]

# --------------------------------------------------------------------------- the whole sweep


@dataclass
class SweepResult:
    sweep: Sweep
    quarantined: list[str] = field(default_factory=list)  # hosts left out, GPUs kept out (plan_around)

    @property
    def failed(self) -> list[PlannedRun]:
        return [r for r in self.sweep.runs if r.state != RunState.COMPLETE]

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> list[str]:
        runs = self.sweep.runs
        done = [r for r in runs if r.state == RunState.COMPLETE]
        lines = [
            f"sweep {self.sweep.name}: {len(done)}/{len(runs)} runs complete "
            f"({sum(1 for r in done if r.outcome == 'success')} reached their target); "
            f"results in {self.sweep.root}"
        ]
        lines += [f"  MISSED {r.host} {r.run_id}: {r.reason}" for r in done if r.outcome != "success"]
        lines += [f"  FAILED {'+'.join(r.hosts)} {r.run_id}: {r.state}: {r.reason}" for r in self.failed]
        lines += [f"  QUARANTINE {line}" for line in self.quarantined]
        return lines


def default_name(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("sweep-%Y%m%d-%H%M%S")


def check_name(name: str) -> None:
    fields.sweep_name(name)


def lowercase_words(gpus, seeds, mode, scale) -> tuple:
    """The plan's words given in any case as the lowercase word from here on (the plan, its run ids, sweep.json's
    options): ``--scale TINY`` is the sweep ``--scale tiny`` is."""
    mode, scale = fields.choice(mode, fields.MODES, "--mode"), fields.choice(scale, fields.SCALES, "--scale")
    return fields.word(gpus, ("all",)), fields.word(seeds, ("auto", "mlperf")), mode, scale


def resolve_backend(backend: str) -> str:
    """ssh or slurm: ``auto`` is Slurm where ``sinfo`` answers on this machine; ``slurm`` needs it to answer."""
    if backend not in ("ssh", "slurm", "auto"):
        raise ConfigError(f"--backend: {str(backend)[:40]!r} is not one of ssh, slurm, auto")
    if backend == "ssh":
        return "ssh"
    if slurm.available():
        return "slurm"
    if backend == "auto":
        return "ssh"
    raise ConfigError("--backend slurm: no Slurm controller answers `sinfo` on this machine (SLURM_CONF, munge)")


def slurm_held(hosts: list[Host], quarantine: dict[str, dict] | None) -> dict[str, dict]:
    """What a Slurm sweep plans around: gpulab's quarantine, every host that is no node of the cluster or is
    drained or down there (whoever drained it), and, whole, a host with a quarantined GPU: Slurm hands out
    a node's GPUs itself, so gpulab's jobs cannot avoid one GPU (README "On a Slurm cluster")."""
    held = {h: dict(q) for h, q in (quarantine or {}).items()}
    known = slurm.nodes()
    for h in hosts:
        node = known.get(h.name)  # Slurm's node names are the inventory's
        q = held.get(h.name)
        if node is None:
            held[h.name] = {"gpus": None, "reason": "no node of this Slurm cluster (scontrol show node)"}
        elif node.drained:
            held[h.name] = {"gpus": None, "reason": f"Slurm: {node.state.lower()}: {node.reason or 'no reason'}"}
        elif q and q.get("gpus") is not None:
            held[h.name] = {
                "gpus": None,
                "reason": f"{q['reason']}; Slurm picks a node's GPUs itself: the "
                f"host is left out of gpulab's Slurm jobs",
            }
    return held


def _units_to_run(sweep: Sweep, not_runnable: set, errors: dict) -> dict[tuple, list[PlannedRun]]:
    """Each unit (its hosts) with its runs, where every host was prepared and a run is left to do (a run the
    new plan could not place, ``not_runnable``, only where an earlier attempt completed it)."""
    unit_runs: dict[tuple, list[PlannedRun]] = {}
    for run in sweep.runs:
        if (run.host, run.run_id) not in not_runnable or run.state == RunState.COMPLETE:
            unit_runs.setdefault(tuple(run.hosts), []).append(run)
    return {
        u: rs
        for u, rs in unit_runs.items()
        if not any(n in errors for n in u) and any(r.state != RunState.COMPLETE for r in rs)
    }


def _estimate_runs(
    estimates: dict, runs: list[PlannedRun], hosts: list[Host], topologies: dict, results_dir: Path
) -> None:
    past = study.history(results_dir)
    for run in runs:
        minutes, _ = study.estimate(run, study.unit_device(hosts, run, topologies), past)
        if minutes is not None:
            estimates[run.run_id] = 60.0 * minutes


def _worker(
    backend: str,
    sweep: Sweep,
    nodes: list[Node],
    runs: list[PlannedRun],
    settings: Settings,
    progress,
    stop: threading.Event,
    pilots,
    memory,
    during: dict,
    slurm_settings,
) -> UnitWorker:
    """The thread that runs one unit's runs: gpulab's own over SSH, or as Slurm job arrays."""
    if backend == "slurm":
        return slurmworker.SlurmUnitWorker(
            sweep, nodes, runs, settings, progress, stop, pilots, memory, during, slurm_settings=slurm_settings
        )
    return UnitWorker(sweep, nodes, runs, settings, progress, stop, pilots, memory, during)


def _workers(
    backend: str,
    sweep: Sweep,
    todo_units: dict,
    hosts: list[Host],
    prepared,
    settings: Settings,
    progress,
    stop: threading.Event,
    memory,
    during: dict,
    slurm_settings,
) -> list[UnitWorker]:
    """One worker a unit, its nodes on the hosts as they were prepared, with the sweep's pilots (lab.sweep.pilot:
    compile once, then fan out)."""
    by_name = {h.name: h for h in hosts}
    pilots = pilot.for_sweep(sweep.root, sweep.runs, by_name, settings)
    return [
        _worker(
            backend,
            sweep,
            [Node(by_name[n], prepared[n][0], prepared[n][1], settings, sweep.name) for n in u],
            rs,
            settings,
            progress,
            stop,
            pilots,
            memory,
            during,
            slurm_settings,
        )
        for u, rs in todo_units.items()
    ]


def _started(sweep: Sweep, n_hosts: int, backend: str) -> str:
    """The line a sweep starts with: its runs, hosts, backend, and the runs a resume finds complete."""
    skipped = sum(1 for r in sweep.runs if r.state == RunState.COMPLETE)
    return (
        f"sweep {sweep.name}: {len(sweep.runs)} runs on {n_hosts} host(s)"
        + (" as Slurm jobs" if backend == "slurm" else "")
        + (f", {skipped} already complete (resumed)" if skipped else "")
    )


def _interrupted(sweep: Sweep) -> None:
    """Ctrl-C: the running runs are marked interrupted and the state is saved."""
    for run in sweep.runs:
        if run.state == RunState.RUNNING:
            run.state, run.reason, run.ended = RunState.INTERRUPTED, "interrupted (Ctrl-C)", utcnow()
    sweep.save()


def _checked(
    hosts: list[Host], workloads: list[str], planner, quarantine: dict | None, results_dir: Path, name: str
) -> tuple[list[Host], list[PlannedRun], list[str], Path]:
    """What is checked before any host is touched: (the hosts not quarantined, the plan for them, the lines
    of the hosts left out, the sweep's folder); bad input, an example address, a saved state that does not
    read back: one line of ConfigError."""
    hosts, early, held = plan_around(hosts, quarantine)  # quarantine: lab.history.quarantine.for_sweep's data
    left_out = [line for line in held if ": skipped: " in line]  # hosts planned around before any is touched
    if not hosts:
        raise ConfigError(f"sweep {name}: every selected host is quarantined: {'; '.join(held)}")
    planned = planner(hosts, workloads, topologies=early)  # bad input before any host is touched
    refuse_examples(hosts)  # the example lab's documentation addresses: one line, nothing contacted or written
    root = paths.child(results_dir, name, what="--name")
    if (root / statefile.STATE_FILE).exists() or (root / statefile.STATE_FILE).is_symlink():
        Sweep.load(root)  # a saved state to resume is checked before any host is touched too
    return hosts, planned, left_out, root


def _preflight(
    hosts: list[Host], planned: list[PlannedRun], datasets_catalogue, name: str, left_out: list[str], echo
) -> None:
    """The read-only preflight of the hosts (ConfigError when one is refused), then what is prepared and left out."""
    refused = preflight.refusal(preflight.gather(hosts, planned, datasets_catalogue))  # read-only
    if refused:
        raise ConfigError(refused)
    echo(f"sweep {name}: preparing {len(hosts)} host(s) (runner {runnerdist.local_version()})")
    for line in left_out:
        echo(f"sweep {name}: quarantine: {line}")


def _quarantined(left_out: list[str], held: list[str], during: dict[str, dict[int, str]]) -> list[str]:
    """What the sweep planned around (before and after preparing the hosts) and what failed runs quarantined."""
    return (
        left_out
        + held
        + [
            f"{h}: GPU {i} quarantined after a failed run ({why})"
            for h, got in sorted(during.items())
            for i, why in sorted(got.items())
        ]
    )


def run_sweep(
    hosts: list[Host],
    workloads: list[str],
    results_dir: Path,
    name: str,
    *,
    gpus: str | None = None,
    seeds=1,
    mode: str = "ttt",
    scale: str = "tiny",
    nodes: int = 1,
    settings: Settings | None = None,
    progress_factory=None,
    echo=print,
    datasets_catalogue=None,
    quarantine: dict[str, dict] | None = None,
    open_memory=None,
    recipes: dict[str, dict] | None = None,
    spread: bool = False,
    max_epochs: int | None = None,
    backend: str = "ssh",
    slurm_settings: slurmworker.SlurmSettings | None = None,
) -> SweepResult:
    """Check the prepared data, prepare the hosts (and their health gate), plan, run the plan (units in
    parallel, one run at a time each), collect. ``open_memory``: makes the history's side of the sweep
    (lab.history.memory.for_sweep), called once the plan and the preflight are accepted (a refused sweep loads no
    database modules) and closed at the end; None: no database. ``recipes``, ``spread``, ``max_epochs``: see
    lab.sweep.plan.plan (a recipe's settings per workload; seeds spread over the units; an epoch limit).
    ``backend``: how the units' runs start (ssh: gpulab's own controller, lab.sweep.unitworker; slurm: job
    arrays, lab.sweep.slurmworker; auto)."""
    from lab.sweep import progress as prog

    settings = settings or Settings()
    check_name(name)
    gpus, seeds, mode, scale = lowercase_words(gpus, seeds, mode, scale)
    backend = resolve_backend(backend)
    quarantine = slurm_held(hosts, quarantine) if backend == "slurm" else quarantine
    workloads = study.expand_workloads(parse_list(workloads, "workloads"))
    options = {"workloads": workloads, "gpus": gpus, "seeds": seeds, "mode": mode, "scale": scale, "nodes": nodes}
    options.update(timeout_s=settings.timeout_s, recipes=recipes or {}, spread=spread, max_epochs=max_epochs)
    options["backend"] = backend  # the options as sweep.json keeps them
    planner = functools.partial(plan, **{k: options[k] for k in PLAN_OPTIONS}, recipes=recipes)
    hosts, planned, left_out, root = _checked(hosts, workloads, planner, quarantine, results_dir, name)
    lock = supervise.SweepLock(root, name)  # one controller per sweep, taken before any host is touched
    memory = None
    try:
        _preflight(hosts, planned, datasets_catalogue, name, left_out, echo)
        memory = open_memory() if open_memory is not None else None
        prepared, topologies, quarantine, held, runs = hostprep.prepare_hosts(
            hosts, workloads, planner, quarantine, memory, settings, name, echo, results_dir
        )
        errors = prepared.reasons()
        not_runnable = {(r.host, r.run_id) for r in runs if r.state == RunState.FAILED}  # e.g. fewer GPUs than asked
        sweep = Sweep.open(root, name, runs, options)
        hostprep.record_hosts(sweep, hosts, errors, topologies, prepared, quarantine)
        stop = threading.Event()
        todo_units = _units_to_run(sweep, not_runnable, errors)
        progress = (progress_factory or prog.Progress)(
            {"+".join(u): sum(1 for r in rs if r.state != RunState.COMPLETE) for u, rs in todo_units.items()}
        )
        if isinstance(getattr(progress, "estimates", None), dict):  # the live table's ETA: each run's estimate
            _estimate_runs(progress.estimates, runs, hosts, topologies, results_dir)
        during: dict[str, dict[int, str]] = {}  # GPUs quarantined by a failed run's epilogue (lab.sweep.gate)
        workers = _workers(
            backend, sweep, todo_units, hosts, prepared, settings, progress, stop, memory, during, slurm_settings
        )
        echo(_started(sweep, len(hosts), backend))
        try:
            with progress:
                supervise.run_workers(workers, stop, settings.stop_grace_s, lambda: _interrupted(sweep), progress.print)
        finally:
            for got in prepared.succeeded.values():
                got[0].close()
            sweep.save()
        return SweepResult(sweep, quarantined=_quarantined(left_out, held, during))
    finally:
        lock.release(drop_if_empty=True)
        if memory is not None:
            memory.close()
