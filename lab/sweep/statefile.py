"""sweep.json read back: bounded, typed and checked like the command line before any of it is used.

``load(root)`` is the one reader of a sweep's state for collect and resume.
The file is read with lab.core.bounded (a regular file inside the sweep folder,
capped), every field of every run is checked with the same lab.core.fields check
as its command-line option, and every run's folders (results/<sweep>/<host>/
<run id>) must stay inside the sweep folder. Anything else is one ConfigError
naming the file and the field (exit 2), before a host is touched.
"""

from __future__ import annotations

import re
from pathlib import Path

from lab.core import bounded
from lab.core import fields
from lab.core import limits
from lab.core import paths
from lab.core.errors import ConfigError
from lab.sweep import recipe

STATE_FILE = "sweep.json"
SCHEMA = 1


def _str(value, what: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{what}: {value!r} is not text")
    return value


def _int(value, what: str, rng: limits.Range) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{what}: {value!r} is not {rng.describe()}")
    return limits.number(value, what, rng)


def _number(value, what: str, rng: limits.Range) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"{what}: {value!r} is not {rng.describe()}")
    return limits.number(value, what, rng)


def _list(value, what: str) -> list:
    if not isinstance(value, list):
        raise ConfigError(f"{what}: {value!r} is not a list")
    return value


def _settings(value, what: str) -> dict:
    """A run's recipe settings (lab.sweep.recipe): names and plain values; the runner checks them again."""
    if not isinstance(value, dict):
        raise ConfigError(f"{what}: {type(value).__name__} is not a mapping of settings")
    for key, v in value.items():
        if not isinstance(key, str) or not recipe.KEY_RE.fullmatch(key) or key in recipe.NOT_SETTABLE:
            raise ConfigError(f"{what}: {str(key)[:40]!r} is not a setting a run may change")
        recipe.plain(v, f"{what}.{key}")
    return value


# field of a planned run -> its check (value, what) -> value; lab.sweep.plan.PlannedRun has these fields
RUN_FIELDS = {
    "host": fields.host_name,
    "workload": fields.workload,
    "gpus": fields.gpu_count,
    "seed": fields.seed,
    "mode": lambda v, w: fields.choice(v, fields.MODES, w),
    "scale": lambda v, w: fields.choice(v, fields.SCALES, w),
    "state": lambda v, w: fields.RunState(fields.choice(v, fields.STATES, w)),
    "outcome": lambda v, w: None if v is None else fields.choice(v, fields.OUTCOMES, w),
    "reason": _str,
    "started": lambda v, w: _str(v, w, optional=True),
    "ended": lambda v, w: _str(v, w, optional=True),
    "nodes": lambda v, w: [fields.host_name(h, f"{w}[{i}]") for i, h in enumerate(_list(v, w))],
    "gpu_ids": lambda v, w: [_int(g, f"{w}[{i}]", limits.GPU_INDEX) for i, g in enumerate(_list(v, w))],
    "attempts": lambda v, w: _int(v, w, limits.ATTEMPTS),
    "token": fields.token,
    "limit_s": lambda v, w: None if v is None else _number(v, w, limits.RUN_LIMIT_S),
    "settings": lambda v, w: _settings(v, w),
    "max_epochs": lambda v, w: None if v is None else _int(v, w, limits.MAX_EPOCHS),
    "slurm_job": lambda v, w: None if v is None else _slurm_job(v, w),
}


def _slurm_job(value, what: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]{1,12}_[0-9]{1,6}", value):
        raise ConfigError(f"{what}: {str(value)[:40]!r} is not a Slurm array task (<job id>_<task id>)")
    return value


REQUIRED = ("host", "workload", "gpus", "seed")


def conform_run(entry, where: str) -> dict:
    """The known fields of one run entry, each checked; ConfigError naming ``where.field``."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: {type(entry).__name__} is not a run (a JSON object)")
    for key in REQUIRED:
        if key not in entry:
            raise ConfigError(f"{where}: {key} is missing")
    return {key: read(entry[key], f"{where}.{key}") for key, read in RUN_FIELDS.items() if key in entry}


def conform(doc, source: str) -> dict:
    """The sweep document with checked runs (field dicts); ConfigError '<source>: <field>: ...'."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: not a sweep state (a JSON object)")
    if "schema" in doc and doc["schema"] != SCHEMA:
        raise ConfigError(f"{source}: schema: {doc['schema']!r} is not {SCHEMA}")
    name = fields.sweep_name(doc.get("name"), f"{source}: name")
    runs = _list(doc.get("runs"), f"{source}: runs")
    if len(runs) > limits.PLANNED_RUNS.hi:
        raise ConfigError(f"{source}: runs: {len(runs)} runs, more than {limits.PLANNED_RUNS.hi:g}")
    checked = [conform_run(r, f"{source}: runs[{i}]") for i, r in enumerate(runs)]
    tasks: dict[str, int] = {}  # one Slurm array task runs one run: a second run of it would never be watched
    for i, r in enumerate(checked):
        if r.get("slurm_job") is not None and tasks.setdefault(r["slurm_job"], i) != i:
            raise ConfigError(
                f"{source}: runs[{i}].slurm_job: {r['slurm_job']!r} is runs[{tasks[r['slurm_job']]}]'s Slurm task too"
            )
    hosts = doc.get("hosts", {})
    if not isinstance(hosts, dict):
        raise ConfigError(f"{source}: hosts: {type(hosts).__name__} is not a mapping of host name to facts")
    for h, facts in hosts.items():
        fields.host_name(h, f"{source}: hosts")
        if not isinstance(facts, dict):
            raise ConfigError(f"{source}: hosts.{h}: {type(facts).__name__} is not a mapping")
    options = doc.get("options", {})
    if not isinstance(options, dict):
        raise ConfigError(f"{source}: options: {type(options).__name__} is not a mapping")
    return {
        "name": name,
        "runs": checked,
        "hosts": hosts,
        "options": options,
        "created": _str(doc.get("created"), f"{source}: created", optional=True),
    }


def read(root: Path) -> dict:
    """Read and check ``root/sweep.json``; ConfigError when it is not a sound sweep state."""
    path = Path(root) / STATE_FILE
    doc = bounded.read_or(
        bounded.read_json,
        path,
        root=root,
        limit=limits.JSON_BYTES,
        missing=lambda: ConfigError(f"{root}: not a sweep directory (no {STATE_FILE})"),
        unreadable=lambda why: ConfigError(f"{path}: unreadable sweep state ({why})"),
    )
    return conform(doc, str(path))


def run_dir(root: Path, host: str, run_id: str, source: str = STATE_FILE) -> Path:
    """results/<sweep>/<host>/<run id>, refused when it would leave the sweep folder."""
    return paths.child(root, host, run_id, what=f"{source}: run folder of {host}")
