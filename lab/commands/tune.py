"""``invoke tune`` as a function: a hyperparameter search whose trials are sweeps, from plain arguments.

``tune`` checks the whole request before a host is touched or anything is written (lab.tune.entry: the
workload, scale, study name, seeds, trials, space and baseline; the backend; a trial's plan on the hosts),
before Optuna and SQLAlchemy load (a refused request is quick), then runs the study to its trial count
(lab.tune.search.tune), each trial a sweep with the history's quarantine planned around, and returns the
search's TuneResult (the study, its folder, the report's lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lab.core import paths
from lab.core.settings import default as declared_default
from lab.history import memory
from lab.sweep import driver, hostrun, slurmworker
from lab.tune import entry

if TYPE_CHECKING:
    from lab.tune import search


def tune(
    hosts: list,
    workload: str,
    *,
    results_dir: str | Path,
    history_url: str,
    settings: hostrun.Settings | None = None,
    scale: str | None = None,
    name: str | None = None,
    device: str | None = None,
    seeds=None,
    trials_count=None,
    tune_settings: dict | None = None,
    space_file: str | Path | None = None,
    open_space: bool = False,
    baseline: str | None = None,
    gpus: str | None = None,
    max_epochs=None,
    backend: str = "ssh",
    slurm_settings: slurmworker.SlurmSettings | None = None,
    make_folder: bool = False,
    echo=print,
) -> search.TuneResult:
    """Search ``workload``'s hyperparameters on ``hosts``; results under ``results_dir/<name>``, the study in the
    database at ``history_url``. None takes gpulab's setting (``scale``: gpulab.scale; ``seeds``,
    ``trials_count`` and ``tune_settings``: gpulab.tune.*; ``settings``: gpulab.sweep.*); ``device`` names the
    selection in the default study name; ``backend``: ssh, slurm or auto, as a sweep's; ``make_folder``: the
    default database's folder may be made (no gpulab.history_url). ConfigError on bad input, nothing written."""
    req = entry.request(
        workload,
        scale=declared_default("scale") if scale is None else scale,
        name=name,
        device=device,
        seeds=seeds,
        trials=trials_count,
        tune_settings=tune_settings or {},
        space_file=space_file,
        open_=open_space,
        baseline=baseline,
        gpus=gpus,
        wave=len(hosts),
        max_epochs=max_epochs,
    )
    kind = driver.resolve_backend(backend)  # slurm without a controller here: one line before the study is written
    entry.check_plan(hosts, req)  # --gpus and the hosts as a trial's sweep plans them
    results_dir = Path(results_dir)
    paths.apart(  # the study's folder gets recipe.yml and reports: never over the recipe or space it started from
        results_dir / req.name,
        [f for f in (baseline, space_file) if f],
        f"tune --name {req.name}",
        "copy the file out of the study's folder or give another --name",
    )
    from lab.tune import search, trials  # Optuna, SQLAlchemy, the results' readers: once the request is checked

    storage, req.storage_shown = entry.storage_for(history_url)
    on_fleet = trials.SweepBackend(
        hosts,
        results_dir / req.name,
        settings or hostrun.Settings(),
        history_url,
        make_folder=make_folder,
        echo=echo,
        kind=kind,
        slurm_settings=slurm_settings,
        quarantine=memory.quarantined(history_url, hosts),
    )
    return search.tune(req, storage, on_fleet, results_dir, echo=echo)
