"""What the terminal shows: verdict words in colour where colour is wanted, numbers whole and with units.

Colour only on a terminal and never with ``NO_COLOR`` set (no-color.org) or ``TERM=dumb``: the word
itself (PASS, WARN, FAIL, success, failed) is always there, so that a pipe, a log file or a screen
reader reads the same verdict. Numbers are written out in full (``53,520``, ``0.0123``), never
in exponent form, and never cut.
"""

from __future__ import annotations

import math
import os
import sys

# ANSI SGR codes: green, yellow, bold red
COLOURS = {
    "PASS": "32",
    "WARN": "33",
    "FAIL": "1;31",
    "success": "32",
    "complete": "32",
    "target_missed": "33",
    "interrupted": "33",
    "failed": "1;31",
}


def colour_on(stream=None) -> bool:
    """Whether ``stream`` (default stdout) is a terminal that wants colour."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a file
        return False


def verdict(word: str, width: int = 0, stream=None) -> str:
    """``word`` padded to ``width``, in its colour on a terminal that wants colour."""
    text = f"{word:<{width}}"
    code = COLOURS.get(word)
    return f"\x1b[{code}m{text}\x1b[0m" if code and colour_on(stream) else text


def number(value) -> str:
    """A number written out: thousands separated from 1,000 on, four significant digits below, no exponent."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    digits = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}"


def table(head: tuple, rows: list[tuple], *, verdict_col: int | None = None, stream=None) -> list[str]:
    """Rows aligned under ``head`` (every cell whole); the ``verdict_col`` cells coloured as verdicts."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(head)]

    def line(cells, colour):
        out = []
        for i, (cell, w) in enumerate(zip(cells, widths)):
            last = i == len(widths) - 1
            if colour and i == verdict_col:
                out.append(verdict(str(cell), 0 if last else w, stream))
            else:
                out.append(str(cell) if last else f"{str(cell):<{w}}")
        return "  ".join(out)

    return [line(head, False), *(line(r, True) for r in rows)]
