"""The ``gpulab:`` section of the Invoke configuration: its schema, its environment variables, its typed values.

invoke.yaml, ~/.invoke.yaml, ``invoke -f FILE`` and ``INVOKE_GPULAB_*``
variables all end in one section. ``check`` validates it against
lab/schemas/config.schema.json when a task starts (an unknown key or a wrong
type is one line naming ``gpulab.<key>``, exit 2); ``env_problem`` finds an
``INVOKE_GPULAB_*`` variable that names no setting or does not fit its type
before Invoke casts it (Invoke itself would end in a traceback). The values
with ranges (timeouts, sweep settings) are turned into numbers here, with
lab.core.limits, before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping

import jsonschema

from lab.core import limits
from lab.core import schema
from lab.core.errors import ConfigError

WHERE = "invoke.yaml, ~/.invoke.yaml, invoke -f FILE or INVOKE_GPULAB_*"
ENV_PREFIX = "INVOKE_"


def plain(node):
    """Invoke's config proxies as plain dicts and lists."""
    if isinstance(node, Mapping) or (hasattr(node, "keys") and hasattr(node, "__getitem__")):
        return {str(k): plain(node[k]) for k in node.keys()}
    if isinstance(node, (list, tuple)):
        return [plain(v) for v in node]
    return node


def check(section) -> dict:
    """The gpulab section as plain data; ConfigError naming the first key that does not fit the schema."""
    data = plain(section if section is not None else {})
    validator = jsonschema.Draft202012Validator(schema.schema("config"))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        key = ".".join(["gpulab", *map(str, err.absolute_path)])
        raise ConfigError(f"config {key}: {schema.describe(err)} ({WHERE})")
    return data


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, node


def env_problem(section, environ: Mapping[str, str]) -> str | None:
    """An INVOKE_GPULAB_* variable that names no gpulab setting or cannot take its type; None if all fit."""
    known = {(ENV_PREFIX + "_".join(("gpulab", *p))).upper(): (p, v) for p, v in _leaves(plain(section or {}))}
    for var in sorted(v for v in environ if v.upper().startswith(ENV_PREFIX + "GPULAB_")):
        if var not in known:
            return f"{var}: names no gpulab setting (the settings are the keys of invoke.yaml's gpulab section)"
        path, default = known[var]
        value = environ[var]
        key = ".".join(("gpulab", *path))
        if isinstance(default, bool) or default is None or isinstance(default, str):
            continue
        if isinstance(default, (int, float)):
            try:
                type(default)(value)
            except ValueError:
                kind = "a whole number" if isinstance(default, int) else "a number"
                return f"{var}={value!r}: {key} takes {kind}"
        else:
            return f"{var}: {key} is a {type(default).__name__}, which an environment variable cannot set"
    return None


def timeout_s(value, what: str = "--timeout") -> float | None:
    """Minutes (or 'auto': None, each run's own limit) as seconds, inside lab.core.limits.RUN_TIMEOUT_MINUTES."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return float(limits.number(value, what, limits.RUN_TIMEOUT_MINUTES)) * 60


def sweep_settings(section) -> dict:
    """gpulab.sweep.* as numbers inside their ranges (lab.core.limits.SWEEP_SETTINGS)."""
    out = {}
    for key, value in (plain(section) or {}).items():
        rng = limits.SWEEP_SETTINGS.get(key)
        if rng is None:
            raise ConfigError(f"config gpulab.sweep.{key}: no such setting ({WHERE})")
        out[key] = limits.number(value, f"config gpulab.sweep.{key}", rng)
    return out
