"""Load YAML data files and check them against the JSON schemas in lab/schemas/.

Every data file of gpulab (host variables, stack profiles, GPU references,
dataset catalogues, benchmark rules) goes through ``check`` or ``load_yaml``,
so that a wrong value is reported as one line naming the file and the place
in it, before anything is touched.
"""

from __future__ import annotations

import functools
import json
import math
import re
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
        return _unknown(_additional(error.instance, error.schema))
    if isinstance(error.instance, float) and not math.isfinite(error.instance):  # _finite_number's refusal
        return f"{error.instance!r} is not a finite number"
    if error.validator == "required":
        return error.message.replace("is a required property", "is missing").replace("'", "")
    shown = excerpt(repr(error.instance), 60)  # a value quoted, never a whole file
    if error.validator == "pattern" and isinstance(error.schema.get("choices"), list):  # a setting's word, any case
        return f"{shown} is not one of {', '.join(error.schema['choices'])}"
    if error.validator in ("anyOf", "oneOf"):
        return f"{shown} is not valid here ({error.schema.get('description', 'see the schema')})"
    full = repr(error.instance)
    if error.message.startswith(full):
        return shown + error.message[len(full) :]
    return error.message


@functools.lru_cache(maxsize=None)
def _anchored(pattern: str) -> re.Pattern:
    """``pattern`` as JSON Schema means it (ECMA-262): a ``$`` outside a character class ends the text, where
    Python's ``$`` also matches before a final newline (``current\\n`` would match ``^[a-z0-9._-]*$``)."""
    out, in_class, escaped = [], False, False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        elif ch == "$" and not in_class:
            ch = r"\Z"
        out.append(ch)
    return re.compile("".join(out))


def _pattern(validator, pattern: str, instance, _schema):
    """The ``pattern`` keyword with ``_anchored``'s end of text."""
    if validator.is_type(instance, "string") and not _anchored(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _additional(instance: dict, schema: dict) -> list:
    """The keys of ``instance`` that neither ``properties`` nor (by ``_anchored``) ``patternProperties`` name."""
    properties, patterns = schema.get("properties", {}), [_anchored(p) for p in schema.get("patternProperties", {})]
    return [k for k in instance if k not in properties and not any(p.search(k) for p in patterns)]


def _unknown(keys: list) -> str:
    """'unknown key(s) a, b': a key with a newline or other unprintable character quoted, so that it shows."""
    shown = sorted(k if isinstance(k, str) and k.isprintable() else repr(k) for k in keys)
    return f"unknown key(s) {', '.join(shown)}"


def _pattern_properties(validator, pattern_properties: dict, instance, _schema):
    """``patternProperties`` with ``_anchored``'s end of text (a key ``"coco\\n"`` matches no ``...$``)."""
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            if _anchored(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, allowed, instance, schema):
    """``additionalProperties`` over ``_additional``'s keys."""
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        yield jsonschema.ValidationError(_unknown(extras))


def _finite_number(checker, value) -> bool:
    """JSON Schema's number, as JSON has them: ``.nan`` and ``.inf`` of a YAML file pass no bound (every
    comparison with NaN is false) and are not numbers here."""
    return jsonschema.Draft202012Validator.TYPE_CHECKER.is_type(value, "number") and (
        not isinstance(value, float) or math.isfinite(value)
    )


_VALIDATOR = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("number", _finite_number),
    validators={
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


def conform(data: Any, schema_name: str, source: str) -> Any:
    """Validate ``data``; raise ConfigError '<source>: <where>: <what>' on the first error.

    Data larger or deeper than lab.core.plaindata allows (a YAML alias bomb)
    is refused before the validator walks it or an error message prints it."""
    if plaindata.size(data) > plaindata.MAX_NODES:
        raise ConfigError(
            f"{source}: more than {plaindata.MAX_NODES} values or {plaindata.MAX_DEPTH} levels "
            f"(YAML aliases count each time they are used)"
        )
    validator = _VALIDATOR(schema(schema_name))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        where = f"{_where(err)}: " if err.absolute_path else ""
        raise ConfigError(f"{source}: {where}{excerpt(describe(err), 200)}")
    return data


def _libyaml_bounded() -> bool:
    """Whether PyYAML's C loader is there and its libyaml refuses deep nesting itself (0.2.6 stops at 1000
    levels); an older libyaml composes nested nodes recursively in C, past Python's recursion limit, and a
    50,000-level flow sequence crashes the process, so the pure-Python loader (RecursionError) reads then."""
    if not getattr(yaml, "__with_libyaml__", False):
        return False
    try:
        from yaml import _yaml
    except ImportError:  # pragma: no cover - __with_libyaml__ says it imported
        return False
    return tuple(_yaml.get_version()) >= (0, 2, 6)


_READ_FAILURES = (ValueError, TypeError, KeyError, AttributeError, OverflowError)


def bounded_loader(base: type) -> type:
    """``base`` (yaml.SafeLoader or yaml.CSafeLoader) whose constructors' failures are YAML errors at the
    value's place: ``!!int abc``, ``!!timestamp x`` and an integer of 5,000 digits raise ValueError,
    KeyError or AttributeError in PyYAML's safe constructors, not a YAMLError."""

    class Loader(base):
        def construct_object(self, node, deep=False):
            try:
                return super().construct_object(node, deep=deep)
            except _READ_FAILURES as exc:
                kind = str(node.tag).rsplit(":", 1)[-1]
                value = excerpt(repr(node.value), 40) if isinstance(node.value, str) else "here"
                problem = f"{kind} value {value} cannot be read: {excerpt(exc, 80)}"
                raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None

    Loader.__name__ = Loader.__qualname__ = f"Bounded{base.__name__}"
    return Loader


# libyaml's loader reads gpulab's data files several times faster than PyYAML's pure-Python one
LOADER = bounded_loader(yaml.CSafeLoader if _libyaml_bounded() else yaml.SafeLoader)


def _place(exc: yaml.YAMLError, text: str) -> str:
    """'line L, column C: ' of a YAML error, or '' where it has none."""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: "
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.position, int):
        pos = exc.position  # characters into the text; libyaml counts bytes of its UTF-8
        if getattr(yaml, "CSafeLoader", None) and issubclass(LOADER, yaml.CSafeLoader):
            pos = len(text.encode("utf-8")[:pos].decode("utf-8", "ignore"))
        line, line_start = text.count("\n", 0, pos) + 1, text.rfind("\n", 0, pos) + 1
        return f"line {line}, column {pos - line_start + 1}: "
    return ""


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.character, int):
        return f"unacceptable character #x{exc.character:04x}"  # each loader words the reason its own way
    return getattr(exc, "problem", None) or str(exc)


def read_yaml(path: Path | str) -> Any:
    """Parse a YAML file; a missing or malformed file is a ConfigError naming it (and the place in it)."""
    path = Path(path)
    try:
        text = bounded.read_text(path, limit=limits.DATA_BYTES)
    except bounded.Missing:
        raise ConfigError(f"{path}: file not found") from None
    except bounded.Unreadable as exc:
        raise ConfigError(str(exc)) from None
    try:
        return yaml.load(text, Loader=LOADER)  # a safe loader: SafeLoader or CSafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: {_place(exc, text)}malformed YAML ({_problem(exc)})") from None
    except RecursionError:  # PyYAML composes nested nodes recursively: flow or block nesting this deep
        raise ConfigError(f"{path}: YAML nested too deep") from None


def load_yaml(path: Path | str, schema_name: str) -> Any:
    """Read a YAML file and validate it against ``schema_name``."""
    return conform(read_yaml(path), schema_name, str(path))
