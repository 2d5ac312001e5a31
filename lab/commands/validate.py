"""A validate as a function (invoke validate): the fleet judged (lab.validate.fleet) with each GPU's own past
from the history, then its checks recorded and, with quarantine on, each failing host or GPU quarantined;
and references built from the history's known-good GPUs (--baseline --from-history)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lab.core import settings
from lab.history import db as historydb, memory
from lab.validate import fleet, gpurefs
from lab.validate.verdict import Verdicts


@dataclass
class Validated:
    """A validate that ran: its verdicts and files (``result``) and the history's lines (recorded, quarantined;
    none for a baseline or when no validate.json was written)."""

    result: Verdicts
    history_lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result.ok


@dataclass(frozen=True)
class HistoryBaseline:
    """References written from the history's known-good GPUs: the file, its figures and models."""

    path: Path
    figures: int
    models: int


def validate(
    hosts: list,
    *,
    history_url: str,
    level: str = "quick",
    baseline: bool = False,
    as_json: bool = False,
    out_dir: str | Path = Path("results/validate"),
    references: str | Path | None = None,
    inventory: str | Path | None = None,
    stacks_dir: str | Path | None = None,
    dcgm_level=None,
    dcgm_levels: dict | None = None,
    limits: dict | None = None,
    quarantine: bool | str = True,
    make_folder: bool = False,
) -> Validated:
    """Check each host's GPUs against references (lab.validate.fleet.validate_fleet), then, unless ``baseline``,
    record validate.json in the history at ``history_url`` and (``quarantine``: a yes/no as Invoke users write
    it) quarantine each failing host or GPU. ``make_folder``: the default database's results folder may be
    made. A database that fails is one of the history lines; the files stay."""
    result = fleet.validate_fleet(
        hosts,
        level=level,
        baseline=baseline,
        as_json=as_json,
        out_dir=out_dir,
        references=references,
        inventory=inventory,
        stacks_dir=stacks_dir,
        dcgm_level=dcgm_level,
        dcgm_levels=dcgm_levels,
        limits=limits,
        past=None if baseline else memory.past_reader(history_url),
    )
    written = [f for f in result.files if Path(f).name == "validate.json"]
    if not written or baseline:
        return Validated(result)
    held = settings.flag(quarantine, "config gpulab.validate.quarantine")
    return Validated(result, memory.after_validate(written, result.data, history_url, held, make_folder=make_folder))


def baseline_from_history(history_url: str, references: str | Path, out_dir: str | Path) -> HistoryBaseline:
    """``references-baseline.yml`` under ``out_dir`` from the known-good GPUs of the history at ``history_url``
    (lab.history.baseline); CheckFailed when it holds none."""
    stats = memory.known_good(history_url, gpurefs.history_sources())
    path = gpurefs.baseline_from_history(stats, references, out_dir, historydb.shown(history_url))
    return HistoryBaseline(path, sum(len(m) for m in stats.values()), len(stats))
