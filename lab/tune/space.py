"""The search space of a workload: the settings the MLPerf v0.5 closed rules let a submitter change.

``load(workload, scale, path=SPACE, open_=False)`` reads ``lab/data/tune_space.yml`` (checked against
``lab/schemas/tune-space.schema.json``) and returns a ``Space``: one ``Param`` per setting, its bounds
resolved for the scale (``factor`` times the scale's own value from ``runner list --json``, or absolute
``low``/``high``, or the scale's own bounds), its Optuna distribution, and the rule that allows it.
Parameters marked ``open`` (outside the v0.5 closed rules) are in the space only with ``open_``.
Every problem is one ConfigError naming the file and parameter; nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lab.core import schema
from lab.core.errors import ConfigError
from lab.sweep import workloads as catalogue

if TYPE_CHECKING:
    import optuna

SPACE = Path(__file__).resolve().parents[1] / "data" / "tune_space.yml"


@dataclass
class Param:
    name: str  # the workload setting it sets (runner run --set NAME=VALUE)
    kind: str  # float | int | choice
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()
    rule: str = ""
    open: bool = False
    base: object = None  # the scale's own value (the reference recipe), None when it has none

    def distribution(self) -> optuna.distributions.BaseDistribution:
        import optuna  # when the search runs: a refused request loads no Optuna

        if self.kind == "choice":
            return optuna.distributions.CategoricalDistribution(list(self.choices))
        if self.kind == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log)
        return optuna.distributions.FloatDistribution(float(self.low), float(self.high), log=self.log)


@dataclass
class Space:
    workload: str
    scale: str
    params: list[Param]
    source: dict
    left_out: list[str] = field(default_factory=list)  # "name: why" for parameters not searched
    path: str = str(SPACE)

    def distributions(self) -> dict:
        return {p.name: p.distribution() for p in self.params}

    def reference(self) -> dict:
        """The reference recipe's values of the searched settings (the scale's own; None where it has none)."""
        return {p.name: p.base for p in self.params}

    def digest(self) -> str:
        """Names a space: a study resumed with another space is refused (lab.tune.search)."""
        doc = [[p.name, p.kind, p.low, p.high, p.log, list(p.choices)] for p in self.params]
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def check_values(self, values: dict, what: str) -> dict:
        """``values`` (a baseline recipe's) restricted to the space: every key searched, no value off its kind."""
        names = {p.name: p for p in self.params}
        for key, value in values.items():
            if key not in names:
                raise ConfigError(
                    f"{what}: {key!r} is not searched for {self.workload} "
                    f"(the space has {', '.join(names) or 'nothing'})"
                )
            p = names[key]
            if p.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{what}: {key}: {value!r} is not a whole number")
            if p.kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ConfigError(f"{what}: {key}: {value!r} is not a number")
        return values


def _bounds(name: str, entry: dict, scale: str, base, where: str) -> tuple[float, float] | None:
    own = (entry.get("scales") or {}).get(scale)
    if own is not None:
        return own["low"], own["high"]
    if "factor" in entry:
        if isinstance(base, bool) or not isinstance(base, (int, float)) or base <= 0:
            return None
        a, b = entry["factor"]
        return base * a, base * b
    if "low" in entry and "high" in entry:
        return entry["low"], entry["high"]
    raise ConfigError(f"{where}: give factor, low and high, or per-scale bounds")


def _param(name: str, entry: dict, scale: str, values: dict, where: str) -> Param | str:
    base = values.get(name)
    if base is None:
        return f"{name}: the {scale} scale has no value of its own (the reference recipe must have one)"
    p = Param(
        name,
        entry["kind"],
        log=bool(entry.get("log", False)),
        rule=entry["rule"],
        open=bool(entry.get("open", False)),
        base=base,
    )
    if p.kind == "choice":
        if "choices" not in entry:
            raise ConfigError(f"{where}: a choice needs choices")
        p.choices = tuple(entry["choices"])
        return p
    if "choices" in entry:
        raise ConfigError(f"{where}: choices are for kind choice")
    got = _bounds(name, entry, scale, base, where)
    if got is None:
        return f"{name}: the {scale} scale has no value to scale by factor and no bounds of its own"
    low, high = got
    if p.kind == "int":
        low, high = math.ceil(low), math.floor(high)
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise ConfigError(f"{where}: empty range {low:g}..{high:g} for the {scale} scale")
    if p.log and low <= 0:
        raise ConfigError(f"{where}: a log range must be above 0 (low {low:g})")
    if p.kind == "int" and low < 1 and name == "batch_size":
        raise ConfigError(f"{where}: a batch size below 1")
    p.low, p.high = low, high
    return p


def load(workload: str, scale: str, path: str | Path = SPACE, open_: bool = False) -> Space:
    """The space of ``workload`` at ``scale``; ConfigError (exit 2) for a bad file or an unknown workload."""
    doc = schema.load_yaml(path, "tune-space")
    entries = doc["workloads"]
    if workload not in entries:
        raise ConfigError(f"{path}: no search space for workload {workload!r} (it has {', '.join(entries) or 'none'})")
    values = catalogue.scale_settings(workload, scale)
    declared = catalogue.declared(workload)
    params, left = [], []
    for name, entry in entries[workload]["params"].items():
        where = f"{path}: workloads.{workload}.params.{name}"
        if name not in declared:
            raise ConfigError(f"{where}: workload {workload} declares no setting {name!r}")
        if name in ("target", "data", "pretrained", "max_epochs"):
            raise ConfigError(f"{where}: {name} belongs to the benchmark, not to a recipe")
        got = _param(name, entry, scale, values, where)
        if isinstance(got, str):
            left.append(got)
        elif got.open and not open_:
            left.append(f"{name}: outside the v0.5 closed rules (--open searches it)")
        else:
            params.append(got)
    if not params:
        raise ConfigError(
            f"{path}: workload {workload}: nothing to search at the {scale} scale "
            f"({'; '.join(left) or 'no parameters'})"
        )
    return Space(workload, scale, params, dict(doc["source"]), left, str(path))
