"""Load YAML data files and check them against the JSON schemas in lab/schemas/.

Every data file of gpulab (host variables, stack profiles, GPU references,
dataset catalogues, benchmark rules) goes through ``check`` or ``load_yaml``,
so that a wrong value is reported as one line naming the file and the place
in it, before anything is touched.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from lab.core import bounded
from lab.core import limits
from lab.core import plaindata
from lab.core.errors import ConfigError, excerpt

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"


@functools.lru_cache(maxsize=None)
def schema(name: str) -> dict:
    """The schema ``lab/schemas/<name>.schema.json``."""
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())


def _where(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def describe(error: jsonschema.ValidationError) -> str:
    """One readable clause for a schema violation."""
    if error.validator == "additionalProperties" and error.validator_value is False:
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"unknown key(s) {', '.join(extra)}"
    if error.validator == "required":
        return error.message.replace("is a required property", "is missing").replace("'", "")
    shown = excerpt(repr(error.instance), 60)  # a value quoted, never a whole file
    if error.validator in ("anyOf", "oneOf"):
        return f"{shown} is not valid here ({error.schema.get('description', 'see the schema')})"
    full = repr(error.instance)
    if error.message.startswith(full):
        return shown + error.message[len(full) :]
    return error.message


def conform(data: Any, schema_name: str, source: str) -> Any:
    """Validate ``data``; raise ConfigError '<source>: <where>: <what>' on the first error.

    Data larger or deeper than lab.core.plaindata allows (a YAML alias bomb)
    is refused before the validator walks it or an error message prints it."""
    if plaindata.size(data) > plaindata.MAX_NODES:
        raise ConfigError(
            f"{source}: more than {plaindata.MAX_NODES} values or {plaindata.MAX_DEPTH} levels "
            f"(YAML aliases count each time they are used)"
        )
    validator = jsonschema.Draft202012Validator(schema(schema_name))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        where = f"{_where(err)}: " if err.absolute_path else ""
        raise ConfigError(f"{source}: {where}{excerpt(describe(err), 200)}")
    return data


def read_yaml(path: Path | str) -> Any:
    """Parse a YAML file; a missing or malformed file is a ConfigError naming it."""
    path = Path(path)
    try:
        text = bounded.read_text(path, limit=limits.DATA_BYTES)
    except bounded.Missing:
        raise ConfigError(f"{path}: file not found") from None
    except bounded.Unreadable as exc:
        raise ConfigError(str(exc)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: {where}malformed YAML ({problem})") from None
    except RecursionError:  # PyYAML composes nested nodes recursively: flow or block nesting this deep
        raise ConfigError(f"{path}: YAML nested too deep") from None


def load_yaml(path: Path | str, schema_name: str) -> Any:
    """Read a YAML file and validate it against ``schema_name``."""
    return conform(read_yaml(path), schema_name, str(path))
