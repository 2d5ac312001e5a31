"""The ``gpulab:`` section of the Invoke configuration: its defaults, layers, schema, environment variables and values.

``defaults`` is lab/data/settings.yml, which tasks.py puts at Invoke's
collection level, below every file and variable a user or a lab sets
(/etc/invoke.yaml, ~/.invoke.yaml, a project-level invoke.yaml, then
``INVOKE_GPULAB_*``, ``invoke -f FILE`` and the command line, Invoke's own
order). ``check_layer`` checks each layer's section before Invoke merges
them (a list where the defaults hold a mapping would end Invoke's merge in a
traceback; lab.core.program finds the layers); ``check`` validates the merged section against
lab/schemas/config.schema.json once, when a task starts (an unknown key or a wrong
type is one line naming ``gpulab.<key>``, exit 2); ``env_section`` reads the
``INVOKE_GPULAB_*`` variables in Invoke's place, typed by the schema rather
than by the layer below, and refuses one that names no setting or does not
fit (Invoke itself would end in a traceback). The values
with ranges (timeouts, sweep settings) are turned into numbers here, with
lab.core.limits, before anything starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import jsonschema

from lab.core import limits
from lab.core import schema
from lab.core.errors import ConfigError, excerpt

WHERE = "~/.invoke.yaml, invoke.yaml, invoke -f FILE or INVOKE_GPULAB_*"
ENV_PREFIX = "INVOKE_"
SETTINGS = Path(__file__).resolve().parents[1] / "data" / "settings.yml"


def defaults() -> dict:
    """gpulab's own settings (lab/data/settings.yml), checked against the schema: the collection-level layer."""
    data = schema.read_yaml(SETTINGS)
    if not isinstance(data, dict) or set(data) != {"gpulab"}:
        raise ConfigError(f"{SETTINGS}: holds one mapping, gpulab:")
    return {"gpulab": _checked(data["gpulab"], str(SETTINGS))}


def _checked(data, source: str):
    validator = jsonschema.Draft202012Validator(schema.schema("config"))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        key = ".".join(["gpulab", *map(str, err.absolute_path)])
        raise ConfigError(f"config {key}: {excerpt(schema.describe(err), 160)} ({source})")
    return data


def check_layer(section, where: str) -> None:
    """ConfigError naming the first key of one layer's ``gpulab:`` section (``where``: its file) that does not fit
    the schema."""
    _checked(plain(section), where)


def plain(node):
    """Invoke's config proxies as plain dicts and lists."""
    if isinstance(node, Mapping) or (hasattr(node, "keys") and hasattr(node, "__getitem__")):
        return {str(k): plain(node[k]) for k in node.keys()}
    if isinstance(node, (list, tuple)):
        return [plain(v) for v in node]
    return node


def check(section) -> dict:
    """The merged gpulab section as plain data; ConfigError naming the first key that does not fit the schema."""
    return _checked(plain(section if section is not None else {}), WHERE)


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, node


def _set_leaf(doc: dict, path: tuple, value) -> dict:
    node = doc
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return doc


def _takes_text(section: dict, path: tuple, value: str) -> bool:
    """Whether the schema takes ``value`` as text at ``path`` (a count may be a word, a list a comma list)."""
    probe = _set_leaf({k: v for k, v in section.items()}, path, value) if len(path) == 1 else \
        _set_leaf(plain(section), path, value)
    validator = jsonschema.Draft202012Validator(schema.schema("config"))
    return not any(tuple(map(str, e.absolute_path)) == path for e in validator.iter_errors(probe))


def env_section(section, environ: Mapping[str, str]) -> dict:
    """The INVOKE_GPULAB_* variables as a gpulab section, each value typed by the schema; ConfigError on one that
    names no setting or does not fit.

    Invoke would cast a variable to the type of the value below it (a user's
    ``seeds: 3`` would make INVOKE_GPULAB_SEEDS=mlperf a traceback); here a
    setting the schema takes as text stays text, and the others are cast as
    Invoke does (whole numbers, numbers, true/false)."""
    section = plain(section or {})
    known = {(ENV_PREFIX + "_".join(("gpulab", *p))).upper(): (p, v) for p, v in _leaves(section)}
    out: dict = {}
    for var in sorted(v for v in environ if v.upper().startswith(ENV_PREFIX + "GPULAB_")):
        if var not in known:
            raise ConfigError(f"{var}: names no gpulab setting (the settings are the keys of lab/data/settings.yml)")
        path, below = known[var]
        value = environ[var]
        key = ".".join(("gpulab", *path))
        if isinstance(below, bool):
            typed = flag(value, f"{var} ({key})", layer="environment variable")
        elif below is None or isinstance(below, str) or _takes_text(section, path, value):
            typed = value
        elif isinstance(below, (int, float)):
            try:
                typed = type(below)(value)
            except ValueError:
                kind = "a whole number" if isinstance(below, int) else "a number"
                raise ConfigError(f"{var}={excerpt(repr(value))}: {key} takes {kind}") from None
        else:
            raise ConfigError(f"{var}: {key} is a {type(below).__name__}, which an environment variable cannot set")
        _set_leaf(out, path, typed)
    return out


FLAG_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
FLAG_HELP = "true/false, yes/no, on/off or 1/0"


def flag(value, what: str, layer: str | None = WHERE) -> bool:
    """A yes/no setting as Invoke users write it (``true/false``, ``yes/no``, ``on/off``, ``1/0``, any case, in a
    file, a variable or on the command line) as a bool; anything else is one ConfigError line naming ``what``
    (the setting or variable) and the layer."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in FLAG_WORDS:
        return FLAG_WORDS[value.strip().lower()]
    where = f" ({layer})" if layer else ""
    raise ConfigError(f"{what}: {excerpt(repr(value), 40)} is not {FLAG_HELP}{where}")


def timeout_s(value, what: str = "--timeout") -> float | None:
    """Minutes (or 'auto': None, each run's own limit) as seconds, inside lab.core.limits.RUN_TIMEOUT_MINUTES."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return float(limits.number(value, what, limits.RUN_TIMEOUT_MINUTES)) * 60


def tune_settings(section) -> dict:
    """gpulab.tune.* as numbers inside their ranges (lab.core.limits.TUNE_SETTINGS)."""
    out = {}
    for key, value in (plain(section) or {}).items():
        rng = limits.TUNE_SETTINGS.get(key)
        if rng is None:
            raise ConfigError(f"config gpulab.tune.{key}: no such setting ({WHERE})")
        out[key] = limits.number(value, f"config gpulab.tune.{key}", rng)
    return out


def backend(value, what: str = "config gpulab.sweep.backend") -> str:
    """ssh, slurm or auto."""
    if not isinstance(value, str) or value.strip().lower() not in limits.BACKENDS:
        raise ConfigError(f"{what}: {str(value)[:40]!r} is not one of {', '.join(limits.BACKENDS)}")
    return value.strip().lower()


def slurm_settings(section) -> dict:
    """gpulab.slurm.*: texts (one word each: partition, account, qos; a constraint expression) and numbers."""
    out = {}
    for key, value in (plain(section) or {}).items():
        where = f"config gpulab.slurm.{key}"
        if key in ("partition", "account", "qos", "constraint"):
            text = "" if value is None else value
            if not isinstance(text, str) or len(text) > 500 or not re.fullmatch(r"[A-Za-z0-9_.,:|&*\[\]!-]*", text):
                raise ConfigError(f"{where}: {str(value)[:60]!r} is not a Slurm name or constraint")
            out[key] = text
        elif key == "time_limit_minutes" and isinstance(value, str) and value.strip().lower() == "auto":
            out[key] = None
        elif key in limits.SLURM_SETTINGS:
            out[key] = limits.number(value, where, limits.SLURM_SETTINGS[key])
        else:
            raise ConfigError(f"{where}: no such setting ({WHERE})")
    return out


def sweep_settings(section) -> dict:
    """gpulab.sweep.* as numbers inside their ranges (lab.core.limits.SWEEP_SETTINGS); ``backend`` is
    read by ``backend()``."""
    out = {}
    for key, value in (plain(section) or {}).items():
        if key == "backend":
            continue
        rng = limits.SWEEP_SETTINGS.get(key)
        if rng is None:
            raise ConfigError(f"config gpulab.sweep.{key}: no such setting ({WHERE})")
        out[key] = limits.number(value, f"config gpulab.sweep.{key}", rng)
    return out
