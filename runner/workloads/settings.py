"""Typed workload settings: the declarations of workloads.yml and their checks.

Each catalogue entry declares its own settings under ``settings:`` (name: declaration); the
settings every workload shares are declared here (``COMMON``). When the catalogue loads, every
key of every scale must be declared, and its value must match its declaration; the worker's
``ctx.cfg`` is a ``Settings`` mapping that refuses reads and writes of undeclared names. This
module imports no deep-learning framework.

A declaration is one line of text (or, for a mapping with fixed keys, a YAML mapping of
declarations: a record; each of its keys may be left out, no other key is allowed)::

    int | number | bool | str | any     a type ('number' takes integers too)
    int 1..  number 0..1  int ..8       the type, within inclusive bounds
    token | sentence                    one of these words (two or more)
    list of DECL   list[2] of DECL      a list (of that length) of values matching DECL
    map of DECL                         a mapping of names or numbers to values matching DECL
    DECL or null                        that, or null

``check(decl, value)`` returns None or the problem in a few words.
"""

from __future__ import annotations

import math
import re

from runner.workloads.errors import WorkloadError

TYPES = ("int", "number", "bool", "str", "any")
_RANGE = re.compile(r"^(-?[0-9.e+-]*)\.\.(-?[0-9.e+-]*)$")


class DeclarationError(ValueError):
    """A declaration that does not parse (the catalogue is malformed)."""


def _num(text: str) -> float | None:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise DeclarationError(f"bound {text!r} is not a number") from None


def _type_ok(kind: str, value) -> bool:
    if kind == "any":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    return isinstance(value, (int, float)) and math.isfinite(value)  # number


_NAMES = {"int": "an integer", "number": "a number", "bool": "true or false", "str": "a string", "any": "a value"}


def _describe_range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" in {lo:g}..{hi:g}"
    if lo is not None:
        return f" >= {lo:g}"
    return f" <= {hi:g}" if hi is not None else ""


def parse(decl) -> tuple:
    """The parsed form of a declaration (DeclarationError when it does not parse)."""
    if isinstance(decl, dict):
        if not decl or not all(isinstance(k, str) for k in decl):
            raise DeclarationError("a record must map names to declarations")
        return ("record", {k: parse(v) for k, v in decl.items()})
    if not isinstance(decl, str) or not decl.strip():
        raise DeclarationError(f"{decl!r} is no declaration (a line of text or a mapping)")
    text = " ".join(decl.split())
    if text.endswith(" or null"):
        return ("nullable", parse(text[: -len(" or null")]))
    m = re.match(r"^list(?:\[(\d+)\])? of (.+)$", text)
    if m:
        return ("list", int(m.group(1)) if m.group(1) else None, parse(m.group(2)))
    if text.startswith("map of "):
        return ("map", parse(text[len("map of ") :]))
    if "|" in text:
        words = [w.strip() for w in text.split("|")]
        if len(words) < 2 or not all(re.fullmatch(r"[A-Za-z0-9_.-]+", w) for w in words):
            raise DeclarationError(f"{text!r}: choices are two or more words separated by '|'")
        return ("choice", tuple(words))
    parts = text.split(" ")
    if parts[0] not in TYPES or len(parts) > 2:
        raise DeclarationError(f"{text!r}: expected one of {', '.join(TYPES)}, a list, a map or choices")
    lo = hi = None
    if len(parts) == 2:
        m = _RANGE.match(parts[1])
        if parts[0] not in ("int", "number") or not m:
            raise DeclarationError(f"{text!r}: only int and number take bounds, written lo..hi")
        lo, hi = _num(m.group(1)), _num(m.group(2))
    return ("scalar", parts[0], lo, hi)


def describe(p: tuple) -> str:
    """A declaration in words, for error lines."""
    kind = p[0]
    if kind == "nullable":
        return f"{describe(p[1])} or null"
    if kind == "list":
        return f"a list{'' if p[1] is None else f' of {p[1]}'} of ({describe(p[2])})"
    if kind == "map":
        return f"a mapping of ({describe(p[1])})"
    if kind == "choice":
        return "one of " + ", ".join(p[1])
    if kind == "record":
        return "a mapping of " + ", ".join(p[1])
    return _NAMES[p[1]] + _describe_range(p[2], p[3])


def problem(p: tuple, value, where: str) -> str | None:
    """None, or ``where`` and what is wrong with ``value`` for the parsed declaration ``p``."""
    kind = p[0]
    if kind == "nullable":
        return None if value is None else problem(p[1], value, where)
    if kind == "list":
        if not isinstance(value, list) or (p[1] is not None and len(value) != p[1]):
            return f"'{where}' must be {describe(p)}"
        for i, v in enumerate(value):
            bad = problem(p[2], v, f"{where}[{i}]")
            if bad:
                return bad
        return None
    if kind in ("map", "record"):
        if not isinstance(value, dict):
            return f"'{where}' must be {describe(p)}"
        for k, v in value.items():
            if isinstance(k, bool) or not isinstance(k, (str, int, float)):
                return f"'{where}' has a key {str(k)[:40]!r} that is neither a name nor a number"
            if kind == "record" and k not in p[1]:
                return f"'{where}' has an unknown key {str(k)[:40]!r} (known: {', '.join(p[1])})"
            bad = problem(p[1] if kind == "map" else p[1][k], v, f"{where}.{k}")
            if bad:
                return bad
        return None
    if kind == "choice":
        return None if isinstance(value, str) and value in p[1] else f"'{where}' must be {describe(p)}"
    _, t, lo, hi = p
    ok = _type_ok(t, value) and (lo is None or value >= lo) and (hi is None or value <= hi)
    return None if ok else f"'{where}' must be {describe(p)} (not {_excerpt(value)})"


def _excerpt(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check(decl, value, where: str = "value") -> str | None:
    """``problem`` for a declaration not yet parsed."""
    return problem(parse(decl), value, where)


#: settings every workload may have; the catalogue loader checks the rules between them
COMMON = {
    "target": "any",  # a number or a mapping of numbers: checked by the loader
    "max_epochs": "int 1..",
    "eval_every": "int 1..",
    "eval_epochs": "list of int 1..",
    "data": "generated | prepared",
    "batch_size": "int 1..",
    "lr_schedule": "str",  # a name of runner/workloads/schedules.py: checked by the loader
    "compile": "bool",  # false: this scale compiles nothing (runner.workloads.compiling)
    "compile_mode": "default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs",
    "inductor": "map of any",  # torch._inductor.config settings: checked by the loader
    "pretrained": "any",  # runner.artifacts.check_entry
    "throughput": {
        "batch_size": "int 1.. or null",
        "batch_by_memory": "map of int 1..",
        "seq_len": "int 1..",
        "warmup_steps": "int 0..",
        "measure_s": "number 0..",
        "min_steps": "int 1..",
        "chunk_steps": "int 1..",
    },
}


def declarations(own: dict) -> dict:
    """The parsed declarations of a workload: ``COMMON`` and its own (which may not redeclare one)."""
    out = {k: parse(v) for k, v in COMMON.items()}
    for k, v in own.items():
        if k in COMMON:
            raise DeclarationError(f"'{k}' is a shared setting (runner/workloads/settings.py COMMON)")
        try:
            out[k] = parse(v)
        except DeclarationError as exc:
            raise DeclarationError(f"'{k}': {exc}") from None
    return out


def check_scale(values: dict, declared: dict) -> str | None:
    """None, or the first problem of one scale's settings against the parsed ``declared``."""
    for key, value in values.items():
        if key not in declared:
            return f"unknown setting {str(key)[:40]!r} (declare it under the workload's 'settings')"
        bad = problem(declared[key], value, key)
        if bad:
            return bad
    return None


class Settings(dict):
    """One scale's checked settings (``ctx.cfg``): a dict that refuses undeclared names."""

    def __init__(self, values: dict = (), declared: dict | None = None, where: str = "settings"):
        super().__init__(values)
        self.declared = declared
        self.where = where

    def _known(self, key) -> None:
        if self.declared is not None and key not in self.declared:
            raise WorkloadError(f"{self.where}: {key!r} is no declared setting")

    def __getitem__(self, key):
        self._known(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._known(key)
        return super().get(key, default)

    def __setitem__(self, key, value):
        self._known(key)
        bad = None if self.declared is None else problem(self.declared[key], value, key)
        if bad:
            raise WorkloadError(f"{self.where}: {bad}")
        super().__setitem__(key, value)

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value
