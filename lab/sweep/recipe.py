"""A recipe: settings of one workload and scale that replace the catalogue's for every run of a sweep.

``invoke tune`` writes one (the best set it found, with its provenance); ``invoke sweep --recipe FILE``
runs with it; each run gets the settings as ``runner run --set KEY=VALUE`` and its manifest records them.
A recipe file is YAML checked against ``lab/schemas/recipe.schema.json``::

    schema: gpulab-recipe/1
    workload: ncf
    scale: tiny
    settings: {lr: 0.0213, beta1: 0.81}
    provenance: {study: ..., trial: 7, ...}     # what made it (free mapping; tune fills it)

Each setting must be one the workload declares (``runner list --json``: ``declared``); the runner checks
each value against its declaration when a run starts. Plain data; no host is touched here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lab.core import schema
from lab.core import writes
from lab.core.errors import ConfigError
from lab.sweep import workloads as catalogue

SCHEMA = "gpulab-recipe/1"
KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
NOT_SETTABLE = ("target", "data", "pretrained", "max_epochs")  # the runner refuses them too (runner.runplan)
MAX_SETTINGS = 64


def plain(value, what: str, level: int = 0):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > 2**53:
            raise ConfigError(f"{what}: {value!r} is out of range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{what}: {value!r} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > 200 or any(c in value for c in "\n\r\0"):
            raise ConfigError(f"{what}: text longer than 200 characters or with a line break")
        return value
    if isinstance(value, list) and level == 0 and len(value) <= 64:
        return [plain(v, f"{what}[{i}]", 1) for i, v in enumerate(value)]
    raise ConfigError(f"{what}: {type(value).__name__} is not a number, text, true/false or a short list of them")


def check_settings(settings, workload: str, what: str) -> dict:
    """``settings`` when every key is a setting ``workload`` declares and every value plain; ConfigError."""
    if not isinstance(settings, dict):
        raise ConfigError(f"{what}: {type(settings).__name__} is not a mapping of settings")
    if len(settings) > MAX_SETTINGS:
        raise ConfigError(f"{what}: {len(settings)} settings, at most {MAX_SETTINGS}")
    declared = catalogue.declared(workload)
    out = {}
    for key, value in settings.items():
        if not isinstance(key, str) or not KEY_RE.fullmatch(key):
            raise ConfigError(f"{what}: {str(key)[:40]!r} is not a setting name")
        if key in NOT_SETTABLE:
            raise ConfigError(f"{what}: {key}: belongs to the benchmark, a recipe cannot change it")
        if key not in declared:
            raise ConfigError(f"{what}: {key}: workload {workload} declares no such setting")
        out[key] = plain(value, f"{what}.{key}")
    return out


def set_args(settings: dict) -> list[str]:
    """The runner options of a recipe's settings: ``--set KEY=<JSON>`` each, in key order."""
    out: list[str] = []
    for key in sorted(settings or {}):
        out += ["--set", f"{key}={json.dumps(settings[key], separators=(',', ':'))}"]
    return out


@dataclass
class Recipe:
    workload: str
    scale: str
    settings: dict
    provenance: dict = field(default_factory=dict)
    path: str | None = None

    def to_doc(self) -> dict:
        return {
            "schema": SCHEMA,
            "workload": self.workload,
            "scale": self.scale,
            "settings": dict(self.settings),
            "provenance": dict(self.provenance),
        }


def load(path: str | Path) -> Recipe:
    """A recipe file read back: bounded, schema-checked, every setting declared; ConfigError naming it."""
    doc = schema.load_yaml(path, "recipe")
    recipe = Recipe(doc["workload"], doc["scale"], {}, dict(doc.get("provenance") or {}), str(path))
    recipe.settings = check_settings(doc["settings"], recipe.workload, f"{path}: settings")
    return recipe


def write(path: str | Path, recipe: Recipe) -> Path:
    """Write a recipe file (a new file renamed into place, never through a link)."""
    doc = recipe.to_doc()
    schema.conform(doc, "recipe", str(path))
    return writes.write_text(
        path, "# gpulab recipe: invoke sweep --recipe THIS_FILE\n" + yaml.safe_dump(doc, sort_keys=False), "recipe"
    )


def for_runs(recipe: Recipe | None, workloads: list[str], scale: str) -> dict:
    """The settings a sweep's runs get: the recipe's, when it names one of the sweep's workloads and its scale."""
    if recipe is None:
        return {}
    if recipe.workload not in workloads:
        raise ConfigError(
            f"--recipe {recipe.path}: a recipe of {recipe.workload}, but the sweep runs {', '.join(workloads)}"
        )
    if recipe.scale != scale:
        raise ConfigError(
            f"--recipe {recipe.path}: a recipe of the {recipe.scale} scale, but the sweep runs --scale {scale}"
        )
    return {recipe.workload: dict(recipe.settings)}
