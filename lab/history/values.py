"""The values the database takes and gives back, checked one way: before a row is written, and for a terminal.

``checked(model, values, what)`` passes a row when each value fits its
column: text valid UTF-8 (no lone surrogate, as a folder name of non-UTF-8
bytes or a JSON escape gives) without NUL and within the column's length,
integers within SQL's INTEGER (PostgreSQL's 32 bits), numbers finite, times
aware and within DATES; else one ConfigError naming the record and column.
``printable`` shows a stored text (another program's, or an imported host or
check name) on a terminal without sending its control characters raw.
"""

from __future__ import annotations

import datetime as dt
import math

from sqlalchemy import DateTime, Float, Integer, String, Text

from lab.core.errors import ConfigError, excerpt, printable

INT32 = 2**31  # PostgreSQL's INTEGER is 32 bits (SQLite's 64): the smaller bound for both
DATES = (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(2200, 1, 1, tzinfo=dt.timezone.utc))
FUTURE_SLACK = dt.timedelta(minutes=10)  # a host's clock ahead of this one by less: still "now", not the future


def in_range(t: dt.datetime | None) -> dt.datetime | None:
    """An aware time within DATES, else None."""
    return t if isinstance(t, dt.datetime) and t.tzinfo is not None and DATES[0] <= t < DATES[1] else None


def whole(v) -> int | None:
    """An int SQL's INTEGER holds, else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -INT32 <= v < INT32 else None


def finite(v) -> float | None:
    """A finite float, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def clean_text(value: str, what: str) -> str:
    """``value`` when it is text a database stores as written (valid UTF-8: no lone surrogate, as a folder
    name of non-UTF-8 bytes or a JSON escape gives; no NUL); ConfigError otherwise."""
    if not isinstance(value, str):
        raise ConfigError(f"{what}: {excerpt(repr(value), 60)} is not text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{what}: {excerpt(ascii(value), 60)} is not valid UTF-8 text") from None
    if "\0" in value:
        raise ConfigError(f"{what}: {excerpt(ascii(value), 60)} holds a NUL character")
    return value


def checked(model, values: dict, what: str) -> dict:
    """``values`` for a row of ``model`` when each fits its column (see the module's doc); ConfigError naming
    ``what`` and the column otherwise."""
    cols = model.__table__.columns
    for name, v in values.items():
        if v is None:
            continue
        col = cols[name]
        where = f"{excerpt(printable(what), 100)}: {name}"
        kind = col.type
        if isinstance(kind, Integer):
            if isinstance(v, bool) or not isinstance(v, int) or not -INT32 <= v < INT32:
                raise ConfigError(f"{where}: {excerpt(repr(v), 40)} is not a whole number SQL's INTEGER holds")
        elif isinstance(kind, Float):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                raise ConfigError(f"{where}: {excerpt(repr(v), 40)} is not a finite number")
        elif isinstance(kind, DateTime):
            if not isinstance(v, dt.datetime) or v.tzinfo is None or not DATES[0] <= v < DATES[1]:
                raise ConfigError(f"{where}: {excerpt(repr(v), 60)} is not a time from {DATES[0]:%Y} to {DATES[1]:%Y}")
        elif isinstance(kind, (String, Text)):
            clean_text(v, where)
            if kind.length is not None and len(v) > kind.length:
                raise ConfigError(f"{where}: longer than {kind.length} characters")
    return values


def text_ok(value) -> bool:
    try:
        clean_text(value, "")
    except ConfigError:
        return False
    return True
