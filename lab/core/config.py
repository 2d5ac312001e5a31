"""The ``gpulab:`` section of the Invoke configuration: its layers, schema, environment variables and values.

Every setting is declared once, in lab.core.settings (its default, type,
range, unit and doc). ``defaults`` is the section of those defaults, which
tasks.py puts at Invoke's collection level, below every file and variable a
user or a lab sets (/etc/invoke.yaml, ~/.invoke.yaml, a project-level
invoke.yaml, then ``INVOKE_GPULAB_*``, ``invoke -f FILE`` and the command
line, Invoke's own order). ``conform_layer`` checks each layer's section
before Invoke merges them (a list where the defaults hold a mapping would end
Invoke's merge in a traceback; lab.core.program finds the layers); ``conform`` validates the merged section once,
when a task starts. Both check the declared schema (an unknown key or a wrong
type) and the declared ranges (a number out of its range), and name
``gpulab.<key>`` and the file in one line, exit 2. ``env_section`` reads the
``INVOKE_GPULAB_*`` variables in Invoke's place, typed by the declaration
rather than by the layer below, and refuses one that names no setting or does
not fit, naming the variable (Invoke itself would end in a traceback).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jsonschema

from lab.core import limits
from lab.core import schema
from lab.core import settings
from lab.core.errors import ConfigError, excerpt
from lab.core.settings import WHERE

ENV_PREFIX = "INVOKE_"


def defaults() -> dict:
    """gpulab's own settings (the defaults of lab.core.settings.DECLARED): Invoke's collection-level layer."""
    return {"gpulab": _checked(settings.defaults(), "lab.core.settings")}


@functools.lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(settings.schema())


def _checked(data, source: str):
    """``data`` if it fits the declared schema and ranges; ConfigError naming the first key and ``source``."""
    errors = sorted(
        _validator().iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
    )
    if errors:
        err = errors[0]
        key = ".".join(["gpulab", *map(str, err.absolute_path)])
        raise ConfigError(f"config {key}: {excerpt(schema.describe(err), 160)} ({source})")
    settings.problems(data, source)
    return data


def conform_layer(section, where: str) -> None:
    """ConfigError naming the first key of one layer's ``gpulab:`` section (``where``: its file) that does not fit
    the declared schema or its range (lab.core.settings)."""
    _checked(plain(section), where)


def plain(node):
    """Invoke's config proxies as plain dicts and lists."""
    if isinstance(node, Mapping) or (hasattr(node, "keys") and hasattr(node, "__getitem__")):
        return {str(k): plain(node[k]) for k in node.keys()}
    if isinstance(node, (list, tuple)):
        return [plain(v) for v in node]
    return node


def conform(section) -> dict:
    """The merged gpulab section as plain data; ConfigError naming the first key that does not fit the schema."""
    return _checked(plain(section if section is not None else {}), WHERE)


def _set_leaf(doc: dict, path: tuple, value) -> dict:
    node = doc
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return doc


def _takes_text(path: tuple, value: str) -> bool:
    """Whether the schema takes ``value`` as text at ``path`` (a count may be a word, a list a comma list)."""
    return not any(
        tuple(map(str, e.absolute_path)) == path for e in _validator().iter_errors(_set_leaf({}, path, value))
    )


def env_section(section, environ: Mapping[str, str]) -> dict:
    """The INVOKE_GPULAB_* variables as a gpulab section, each value typed by its declaration; ConfigError on one
    that names no setting or does not fit (its type or its range), naming the variable.

    Invoke would cast a variable to the type of the value below it (a user's
    ``seeds: 3`` would make INVOKE_GPULAB_SEEDS=mlperf a traceback); here a
    yes/no setting is read as one, and every other value stays text that the
    declaration takes (a number's text is checked against its range)."""
    section = plain(section or {})
    known = {(ENV_PREFIX + "_".join(("gpulab", *s.key.split(".")))).upper(): s for s in settings.DECLARED}
    out: dict = {}
    for var in sorted(v for v in environ if v.upper().startswith(ENV_PREFIX + "GPULAB_")):
        if var not in known:
            raise ConfigError(f'{var}: names no gpulab setting (README "Settings" lists them)')
        s, value = known[var], environ[var]
        path, key = tuple(s.key.split(".")), f"gpulab.{s.key}"
        if s.kind == "flag":
            typed = settings.flag(value, f"{var} ({key})", layer="environment variable")
        elif s.kind == "number" and not _takes_text(path, value):
            kind = "a whole number" if s.range.integer else "a number"
            raise ConfigError(
                f"{var}={excerpt(repr(value))}: {key} takes {kind}" + "".join(f" or {w}" for w in s.words)
            )
        else:
            typed = value
        settings.problems(_set_leaf({}, path, typed), var)  # its range, naming the variable
        _set_leaf(out, path, typed)
    return out


def timeout_s(value, what: str = "--timeout") -> float | None:
    """Minutes (or 'auto': None, each run's own limit) as seconds, inside lab.core.limits.RUN_TIMEOUT_MINUTES."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return float(limits.number(value, what, limits.RUN_TIMEOUT_MINUTES)) * 60


def tune_settings(section) -> dict:
    """gpulab.tune.* as numbers inside their declared ranges, the declared default for a key not given."""
    return settings.group("tune", plain(section), WHERE)


def backend(value, what: str = "config gpulab.sweep.backend") -> str:
    """ssh, slurm or auto."""
    words = settings.declared("sweep.backend").words
    if not isinstance(value, str) or value.strip().lower() not in words:
        raise ConfigError(f"{what}: {str(value)[:40]!r} is not one of {', '.join(words)}")
    return value.strip().lower()


def slurm_settings(section) -> dict:
    """gpulab.slurm.*: texts (one word each: partition, account, qos; a constraint expression) and numbers;
    ``time_limit_minutes`` auto is None."""
    out = settings.group("slurm", plain(section), WHERE)
    if out["time_limit_minutes"] == "auto":
        out["time_limit_minutes"] = None
    return out


def sweep_settings(section) -> dict:
    """gpulab.sweep.* as numbers inside their declared ranges; ``backend`` is read by ``backend()``."""
    out = settings.group("sweep", plain(section), WHERE)
    out.pop("backend")
    return out
