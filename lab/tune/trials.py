"""One tune trial run on the fleet: a sweep of one workload, one set of settings, seeds spread over hosts.

A backend is a callable ``backend(request) -> list[SeedResult]``: it runs the request's seeds through a
sweep (the same run machinery, run directories, checks and history as ``invoke sweep``) and says per seed
what happened. ``SweepBackend`` runs it with lab.sweep.driver.run_sweep through the sweep's own backend
(gpulab's SSH controller or Slurm job arrays: ``invoke tune --backend``, as ``invoke sweep``);
lab.tune.search.tune does not know which one ran a trial. The same request (the same sweep name) resumes: runs complete and verified are kept,
runs still going on a host are adopted, only failed ones run again (lab.sweep).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from lab.core.errors import GpulabError
from lab.core.fields import RunState
from lab.results import logreader as results
from lab.sweep import driver
from lab.sweep import hostrun
from lab.tune.objective import SeedResult


@dataclass
class TrialRequest:
    sweep: str  # the trial's sweep name (results/<sweep>/): the same name resumes it
    workload: str
    scale: str
    seeds: int  # seeds 1..seeds (spread over the fleet, one run each)
    settings: dict  # the trial's settings (runner run --set)
    max_epochs: int | None = None  # each run's epoch limit (the early stop of lab.tune.objective.epoch_cap)
    gpus: str | None = None  # GPU counts (--gpus); None: every count, as a sweep plans it


class Backend(Protocol):
    def __call__(self, request: TrialRequest) -> list[SeedResult]: ...


def seed_results(sweep_root: Path, runs) -> list[SeedResult]:
    """Per planned run of a trial's sweep: its state, and from its run directory epochs and time to train."""
    found = {}
    try:
        for r in results.read_runs([sweep_root]).runs:
            found[(r.host, r.seed)] = r
    except GpulabError:
        pass  # nothing readable: every run below says what its sweep state is
    out = []
    for run in runs:
        got = found.get((run.host, run.seed))
        reached = run.state == RunState.COMPLETE and run.outcome == "success"
        out.append(
            SeedResult(
                seed=run.seed,
                host=run.host,
                state=run.state,
                reached=reached,
                epochs=getattr(got, "epochs", None),
                ttt_s=getattr(got, "ttt_s", None),
                reason=run.reason or "",
            )
        )
    return out


@dataclass
class SweepBackend:
    """Trials as sweeps of lab.sweep.driver.run_sweep, seeds spread over the hosts; ``kind`` is the sweep's own
    backend (ssh: gpulab's SSH controller; slurm: job arrays; auto), as ``invoke sweep --backend``."""

    hosts: list
    results_dir: Path
    settings: hostrun.Settings
    history_url: str
    make_folder: bool = True  # the SQLite file's folder may be made (the default database)
    echo: Callable = print
    quarantine: dict | None = None
    kind: str = "ssh"
    slurm_settings: object = None

    def __call__(self, request: TrialRequest) -> list[SeedResult]:
        from lab.history import memory as history
        from lab.sweep import progress

        result = driver.run_sweep(
            self.hosts,
            [request.workload],
            self.results_dir,
            request.sweep,
            gpus=request.gpus,
            seeds=request.seeds,
            mode="ttt",
            scale=request.scale,
            settings=self.settings,
            open_memory=functools.partial(history.for_sweep, self.history_url, request.sweep, self.make_folder),
            quarantine=self.quarantine,
            recipes={request.workload: request.settings},
            spread=True,
            max_epochs=request.max_epochs,
            echo=self.echo,
            backend=self.kind,
            slurm_settings=self.slurm_settings,
            progress_factory=lambda units: progress.Progress(units, live=False),
        )
        self.echo(history.record([result.sweep.root], self.history_url))
        return seed_results(result.sweep.root, result.sweep.runs)
