"""JSON and Python literals read from files and hosts, bounded before and while they are parsed.

Every JSON text gpulab reads (log lines, status.json, entry.json, systems
files, sweep.json, what a host prints) and every v0.5/v0.6 Python literal goes
through here, so that a hostile file fails as a ValueError (which each caller
already turns into its one-line reason) and never as a RecursionError, a
MemoryError or an OverflowError further on:

* nesting deeper than MAX_DEPTH is refused by a scan of the brackets before
  the parser sees the text (the parsers recurse per level);
* an integer of more than MAX_INT_DIGITS digits is refused while parsing (a
  400-digit ``time_ms`` would overflow the first float or datetime it meets);
  20 digits hold every unsigned 64-bit value NVML and DCGM print
  (18446744073709551615), so a reader that stores an integer in a narrower
  type (SQLite's signed 64 bits) checks its own range;
* floats keep Python's own range (1e999 is inf), except in a document read
  with ``finite=True`` (what a host prints about itself: a probe, a burn-in,
  DCGM's diagnostic), where inf, -inf and NaN (also JSON's non-standard
  ``NaN``/``Infinity`` words) are refused: a measurement that is not a finite
  number would compare as neither above nor below its reference;
* text longer than ``limit`` characters is refused before it is scanned;
* a string escape that leaves a lone surrogate (``"\\udcff"``, half of a pair) is refused: such a string
  is no text, and no file, database or terminal takes it (every write of it would fail);
* a literal holds only None, booleans, bounded integers, floats, text, lists,
  tuples and mappings (``1+2j`` parses as a complex number and is refused).
"""

from __future__ import annotations

import ast
import json
import math
import re

MAX_DEPTH = 64  # the documents gpulab reads nest a few levels; MLPerf's metadata at most 3
MAX_INT_DIGITS = 20  # |n| < 10**20: every uint64 (NVML, DCGM), count, time in ms, seed or epoch fits
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[\[\]{}()]')
_OPEN = frozenset("[{(")


def depth(text: str, limit: int = MAX_DEPTH) -> int:
    """How deep brackets nest in ``text`` (outside strings), counted up to ``limit + 1``."""
    level = deepest = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in _OPEN:
            level += 1
            if level > deepest:
                deepest = level
                if deepest > limit:
                    return deepest
        elif len(c) == 1:
            level = max(0, level - 1)
    return deepest


def _check_depth(text: str) -> None:
    if depth(text) > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a number out of range ({text[:24]})")
    return value


def _constant(name: str):
    raise ValueError(f"{name} is not a finite number")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _text_only(value):
    """``value`` when none of its strings holds a lone surrogate; ValueError otherwise."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("a string escape makes a lone surrogate (half of a UTF-16 pair), not text") from None
    return value


def _no_lone_surrogate(text: str, value):
    """``value`` decoded from ``text``, walked by ``_text_only`` only where ``text`` has a ``\\uD800``..``\\uDFFF``
    escape (the only way a decoded string gets a lone surrogate)."""
    return _text_only(value) if _SURROGATE_ESCAPE.search(text) else value


_DECODER = json.JSONDecoder(parse_int=_int)
_FINITE = json.JSONDecoder(parse_int=_int, parse_float=_finite, parse_constant=_constant)


def loads(text: str, *, finite: bool = False, limit: int | None = None):
    """``json.loads`` with the bounds above; ValueError on any failure.

    ``finite``: refuse inf and NaN; ``limit``: refuse text of more than ``limit`` characters."""
    if not isinstance(text, str):
        raise ValueError("not text")
    if limit is not None and len(text) > limit:
        raise ValueError(f"more than {limit} characters")
    _check_depth(text)
    try:
        return _no_lone_surrogate(text, (_FINITE if finite else _DECODER).decode(text))
    except RecursionError:  # pragma: no cover - the depth scan comes first
        raise ValueError("nested too deep") from None


def raw_decode(text: str, start: int = 0):
    """``JSONDecoder.raw_decode`` with the bounds above: (value, end); ValueError on any failure."""
    _check_depth(text[start:])
    try:
        value, end = _DECODER.raw_decode(text, start)
    except RecursionError:  # pragma: no cover
        raise ValueError("nested too deep") from None
    return _no_lone_surrogate(text[start:end], value), end


def checked(value, _level: int = 0):
    """``value`` when it is plain data within the bounds (types, integer size, depth); ValueError otherwise."""
    if _level > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        return _text_only(value)
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        if abs(value) >= 10**MAX_INT_DIGITS:
            raise ValueError(f"an integer of more than {MAX_INT_DIGITS} digits")
        return value
    if isinstance(value, (list, tuple)):
        for v in value:
            checked(v, _level + 1)
        return value
    if isinstance(value, dict):
        for k, v in value.items():
            checked(k, _level + 1)
            checked(v, _level + 1)
        return value
    raise ValueError(f"a {type(value).__name__} value is not plain data")


MAX_NODES = 1_000_000  # values in one document: a YAML alias bomb expands far past this


def size(value, limit: int = MAX_NODES) -> int:
    """Values in ``value`` counted as they would print (a value reached twice counts twice), up to ``limit + 1``;
    the walk stops there, so a YAML alias bomb (a few lines that expand to billions) is measured in no time."""
    count, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        count += 1
        if count > limit or level > MAX_DEPTH:
            return limit + 1
        if isinstance(node, dict):
            stack.extend((v, level + 1) for v in node.values())
            count += len(node)
        elif isinstance(node, (list, tuple)):
            stack.extend((v, level + 1) for v in node)
    return count


def literal(text: str):
    """``ast.literal_eval`` of a v0.5/v0.6 value with the bounds above; ValueError on any failure."""
    if not isinstance(text, str):
        raise ValueError("not text")
    _check_depth(text)
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, MemoryError, RecursionError, TypeError) as exc:
        raise ValueError(f"not a literal ({type(exc).__name__})") from None
    return checked(value)
