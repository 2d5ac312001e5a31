"""``invoke tune``'s request checked and put together: options and settings in, the search run.

Everything is checked before a host is touched or anything is written (bad input: ConfigError, exit 2):
the workload and scale, the study name, K seeds and the trial count (gpulab.tune.*), the space file, a
baseline recipe (its workload, scale and values inside the space), the database URL. Optuna and SQLAlchemy
load after that, when the study's storage is opened (``storage_for``): bad input is refused without them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lab.core import fields
from lab.core import limits
from lab.core import settings
from lab.core.errors import ConfigError
from lab.sweep import recipe as recipes
from lab.sweep import workloads as catalogue
from lab.tune import space as spaces

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,57}$")  # + "-t0000" stays a sweep name


@dataclass
class TuneRequest:
    """A checked request: what lab.tune.search.tune runs."""

    name: str  # the study's name (results/<name>/, the database's study name)
    space: spaces.Space
    seeds: int  # K
    trials: int  # trials with a result (complete or pruned) to reach
    limit: int  # the scale's epoch limit (max_epochs): a miss counts 2 x limit
    baseline: dict  # the reference recipe's values of the searched settings
    baseline_from: str = "the scale's own settings (runner/workloads/workloads.yml)"
    wave: int = 1  # seeds run at once (the fleet's units)
    p_threshold: float = settings.default("tune.p_threshold")  # gpulab.tune.* (lab.core.settings)
    retries: int = settings.default("tune.retries")
    heartbeat_s: float = settings.default("tune.heartbeat_s")
    stale_s: float = settings.default("tune.stale_s")
    gpus: str | None = None
    device: str = ""
    sampler_seed: int = 0
    storage_shown: str = ""  # the study's database for messages and provenance (never a password)


def default_name(workload: str, scale: str, device: str | None) -> str:
    return f"tune-{workload}-{scale}-{re.sub(r'[^A-Za-z0-9._-]', '_', device or 'fleet')}"[:58]


def request(
    workload: str,
    *,
    scale: str,
    name: str | None,
    device: str | None,
    seeds,
    trials,
    tune_settings: dict,
    space_file: str | Path | None = None,
    open_: bool = False,
    baseline: str | None = None,
    gpus: str | None = None,
    wave: int = 1,
    max_epochs=None,
) -> TuneRequest:
    fields.workload(workload, "WORKLOAD")
    catalogue.known([workload], "WORKLOAD")
    scale = fields.choice(scale, fields.SCALES, "--scale")  # any case: the lowercase word (study and sweep names)
    name = default_name(workload, scale, device) if name is None else name  # --name '': refused, not the default
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(f"--name: {name!r} is not a study name (letters, digits, . _ -; at most 58)")
    fields.sweep_name(name, "--name")  # results/<name>/: never a name gpulab keeps for its own files there
    tune_settings = {**settings.default("tune"), **tune_settings}
    k = limits.number(
        tune_settings["seeds"] if seeds is None else seeds, "--seeds", settings.declared("tune.seeds").range
    )
    n = limits.number(
        tune_settings["trials"] if trials is None else trials, "--trials", settings.declared("tune.trials").range
    )
    space = spaces.load(workload, scale, space_file or spaces.SPACE, open_)
    limit = catalogue.scale_settings(workload, scale).get("max_epochs")
    if not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"workload {workload}: the {scale} scale has no epoch limit (max_epochs)")
    if max_epochs is not None:  # a cheaper search: every run stops here (a miss counts 2 x this)
        limit = min(limit, limits.number(max_epochs, "--max-epochs", limits.MAX_EPOCHS))
    base, base_from = space.reference(), "the scale's own settings (runner/workloads/workloads.yml)"
    if baseline is not None:
        rec = recipes.load(baseline)
        if (rec.workload, rec.scale) != (workload, scale):
            raise ConfigError(
                f"--baseline {baseline}: a recipe of {rec.workload} at the {rec.scale} scale, not {workload} at {scale}"
            )
        space.check_values(rec.settings, f"--baseline {baseline}")
        base.update(rec.settings)
        base_from = f"{baseline} over the scale's own settings"
    for p in space.params:
        v = base[p.name]
        if p.kind != "choice" and not (p.low <= v <= p.high):
            raise ConfigError(
                f"reference recipe ({base_from}): {p.name} {v!r} lies outside the space "
                f"{p.low:g}..{p.high:g} ({space.path})"
            )
        if p.kind == "choice" and v not in p.choices:
            raise ConfigError(f"reference recipe ({base_from}): {p.name} {v!r} is none of the space's choices")
    return TuneRequest(
        name=name,
        space=space,
        seeds=k,
        trials=n,
        limit=limit,
        baseline=base,
        baseline_from=base_from,
        wave=max(1, wave),
        p_threshold=float(tune_settings["p_threshold"]),
        retries=int(tune_settings["retries"]),
        heartbeat_s=float(tune_settings["heartbeat_s"]),
        stale_s=float(tune_settings["stale_s"]),
        gpus=gpus,
        device=device or "",
    )


def check_plan(hosts, req: TuneRequest) -> None:
    """A trial's sweep planned once without touching a host: bad --gpus or hosts are ConfigError now, not
    after the study was written."""
    from lab.sweep import plan

    plan.plan(
        hosts,
        [req.space.workload],
        req.gpus,
        req.seeds,
        "ttt",
        req.space.scale,
        recipes={req.space.workload: dict(req.baseline)},
        spread=True,
        max_epochs=req.limit,
    )


def storage_for(history_url: str):
    """(Optuna storage, its URL for messages) for the lab's database."""
    from lab.tune import storage as tunestorage  # Optuna and SQLAlchemy: once the request is checked

    return tunestorage.open_storage(history_url), tunestorage.shown(history_url)
