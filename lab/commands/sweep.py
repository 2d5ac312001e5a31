"""A sweep, its dry run and a collect as functions (invoke sweep, demo, sweep --dry-run, collect).

The options come in as a user gives them (workloads as a comma list or a list, GPU counts and seeds as
words or numbers) with the settings already read (lab.sweep.hostrun.Settings); they are checked in the
same order as the task always did: the workloads, the recipe, the name, then the history's quarantine
(a database that exists but cannot be read stops the sweep before it starts).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from lab.core.settings import default as declared_default
from lab.core.errors import ConfigError
from lab.history import memory
from lab.sweep import collect as refetch, driver, plan, recipe as recipes, slurmworker, study
from lab.sweep.hostrun import Settings


@dataclass(frozen=True)
class Request:
    """What a sweep runs: the options of invoke sweep; None: the declared default of gpulab's setting of that name
    (lab.core.settings: the reference study)."""

    workloads: str | list[str] | None = None
    gpus: str | None = None
    seeds: str | int | None = None
    mode: str | None = None
    scale: str | None = None
    nodes: int = 1
    name: str | None = None
    recipe: str | Path | None = None  # a recipe file (invoke tune writes one)


@dataclass
class DryRun:
    """What a dry run prints, and the refusal (a host lacks prepared data: exit 2) if any."""

    name: str
    lines: list[str]
    refused: str | None = None


@dataclass
class SweepDone:
    """A sweep that ran: lab.sweep.driver's result and the history's line (recorded, or why not)."""

    result: driver.SweepResult
    history_line: str = ""

    @property
    def ok(self) -> bool:
        return self.result.ok


@dataclass
class _Resolved:
    name: str
    args: dict  # lab.sweep.plan.plan's and lab.sweep.driver.run_sweep's keyword arguments
    recipes: dict  # workload -> a recipe's settings (--recipe)


def _resolve(req: Request) -> _Resolved:
    given = {k: getattr(req, k) for k in ("workloads", "gpus", "seeds", "mode", "scale")}
    given = {k: declared_default(k) if v is None else v for k, v in given.items()}
    args = dict(given, workloads=plan.parse_list(given["workloads"], "workloads"), nodes=req.nodes)
    chosen = {}
    if req.recipe is not None:  # invoke tune's recipe file: its settings for every run of its workload
        chosen = recipes.for_runs(recipes.load(req.recipe), study.expand_workloads(args["workloads"]), args["scale"])
        args["recipes"] = chosen
    name = driver.default_name() if req.name is None else req.name
    driver.check_name(name)
    return _Resolved(name, args, chosen)


def dry_run(
    hosts: list,
    req: Request,
    *,
    results_dir: Path,
    history_url: str,
    settings: Settings,
    catalogue: str | Path | None = None,
) -> DryRun:
    """The plan of ``req`` on ``hosts`` (quarantined hosts and GPUs planned around) with estimated wall times
    and each host's prepared data (one read-only command per host); nothing starts and nothing is written.
    ConfigError when every host is quarantined."""
    r = _resolve(req)
    held = memory.quarantined(history_url, hosts)
    left, topologies, notes = plan.plan_around(hosts, held)
    if not left:
        raise ConfigError(f"sweep {r.name}: every selected host is quarantined: {'; '.join(notes)}")
    lines, refused = study.dry_run(
        left,
        plan.plan(left, topologies=topologies, **r.args),
        r.name,
        results_dir=results_dir,
        catalogue=catalogue,
        settings=settings,
    )
    given = [
        f"recipe: {req.recipe}: {w}: " + ", ".join(f"{k}={v}" for k, v in sorted(rec.items()))
        for w, rec in r.recipes.items()
    ]
    return DryRun(r.name, [lines[0], *given, *(f"quarantine: {n}" for n in notes), *lines[1:]], refused)


def sweep(
    hosts: list,
    req: Request,
    *,
    results_dir: Path,
    history_url: str,
    settings: Settings,
    catalogue: str | Path | None = None,
    make_folder: bool = False,
    backend: str = "ssh",
    slurm_settings: slurmworker.SlurmSettings | None = None,
    echo=print,
) -> SweepDone:
    """Run ``req`` on ``hosts`` (lab.sweep.driver.run_sweep) with the history's health gate and quarantine,
    then record the sweep in the history. ``make_folder``: the default database's results folder may be made
    (no gpulab.history_url). ``echo``: where the sweep's progress lines go."""
    r = _resolve(req)
    held = memory.quarantined(history_url, hosts)  # what the plan leaves out (invoke quarantine)
    result = driver.run_sweep(
        hosts,
        results_dir=results_dir,
        name=r.name,
        settings=settings,
        datasets_catalogue=catalogue,
        quarantine=held,
        open_memory=functools.partial(memory.for_sweep, history_url, r.name, make_folder),  # health gate, quarantine
        backend=backend,
        slurm_settings=slurm_settings,
        echo=echo,
        **r.args,
    )
    return SweepDone(result, memory.record([result.sweep.root], history_url))


def collect(sweep_root: str | Path, inventory: str | Path, *, retries: int | None = None) -> refetch.CollectResult:
    """Fetch again every run of the sweep at ``sweep_root`` whose local copy is missing or fails verification, a
    copy that does not verify ``retries`` more times (gpulab.sweep.fetch_retries; None: its declared default;
    lab.sweep.collect.collect)."""
    return refetch.collect(Path(sweep_root), inventory, retries=retries)
