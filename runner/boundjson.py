"""JSON the runner reads from files and tools it did not write in this run, bounded.

A spec file, a dataset manifest, a CUDA toolkit's version.json, a bandwidth tool's output: each is
read through here, so that a hostile one fails as a ValueError (which each caller already turns into
its one-line reason), never as a RecursionError or MemoryError further on. Text longer than ``limit``
characters is refused before it is scanned, brackets nested deeper than MAX_DEPTH before the parser
recurses into them, and an integer of more than MAX_INT_DIGITS digits while it is parsed. (The lab
side has the same bounds in lab.core.plaindata; the runner imports nothing of lab.)
"""

import json
import re

MAX_DEPTH = 64  # the documents the runner reads nest a few levels
MAX_INT_DIGITS = 20  # every unsigned 64-bit value fits
MAX_CHARS = 16 * 1024 * 1024
ANNOTATION_CHARS = 1 << 30  # COCO's train2017 instances file is about 450 MB
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _int(text):
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError("an integer of %d digits (at most %d)" % (digits, MAX_INT_DIGITS))
    return int(text)


_DECODER = json.JSONDecoder(parse_int=_int)


def loads(text, limit=MAX_CHARS):
    """``json.loads`` within the bounds above; ValueError on any failure."""
    if not isinstance(text, str):
        raise ValueError("not text")
    if len(text) > limit:
        raise ValueError("more than %d characters" % limit)
    level = 0
    for m in _BRACKETS.finditer(text):
        c = m.group()
        if c in "[{":
            level += 1
            if level > MAX_DEPTH:
                raise ValueError("nested deeper than %d levels" % MAX_DEPTH)
        elif len(c) == 1:
            level = max(0, level - 1)
    try:
        return _DECODER.decode(text)
    except RecursionError:  # pragma: no cover - the bracket scan comes first
        raise ValueError("nested too deep") from None


def read(path, limit=MAX_CHARS):
    """The JSON document of the file ``path``, read no further than ``limit`` characters; OSError as
    open() raises it (FileNotFoundError included), ValueError for anything else."""
    with open(path, encoding="utf-8") as f:
        text = f.read(limit + 1)
    return loads(text, limit)
