"""The lab's memory as the other stages and the tasks use it: import files, record a sweep or a validate,
a GPU's own past for validate's trends, what follows a failing validate, known-good figures, what a sweep
plans around. Each opens the database (lab.history.db) for one call and closes it.

The database modules (SQLAlchemy, Alembic: about half a second) load when a function is first called, not
when `invoke` starts and reads tasks.py.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from lab.core import advice
from lab.core.errors import ConfigError, nothing_read

if TYPE_CHECKING:
    from lab.history.store import Added


def import_paths(paths, url: str, make_folder: bool = False) -> tuple[Added, list[str]]:
    """Load run directories and validate.json files under ``paths`` into the database at ``url``.

    Everything is read (and checked) before the database is opened (and, with
    ``make_folder``, before a SQLite file's folder is made); returns what was
    added and one line per thing skipped. ConfigError when everything found was
    skipped: nothing to import, no database opened or made.
    """
    from lab.history.db import open_db, sqlite_folder
    from lab.history.sources import read_sources
    from lab.history.store import add_sources

    src = read_sources([Path(p) for p in paths])
    if not src.runs and not src.validations:  # read_sources refuses a path with nothing found
        raise nothing_read("nothing to import", src.skipped)
    if make_folder:
        sqlite_folder(url)
    db = open_db(url)
    try:
        return add_sources(db, src), src.skipped
    finally:
        db.close()


def record(paths, url: str, make_folder: bool = False) -> str:
    """What a sweep or a validate adds to the database once its files are written: the line to print.
    ``make_folder``: the default database's results folder is made (a fresh checkout), after the files
    are read.

    A database that fails is said in that line and changes nothing else: the
    files stay in results/ and ``invoke history.import`` loads them later.
    """
    try:
        added, _ = import_paths(paths, url, make_folder)
    except ConfigError as exc:
        where = ",".join(str(p) for p in paths)
        return advice.carry(
            f"history: not recorded: {exc.message}; the files stay (`invoke history.import {shlex.quote(where)}` later)"
        )
    return f"history: {added.line()}"


def for_sweep(url: str, sweep: str, make_folder: bool = False):
    """The sweep's side of the history (lab.history.sweeps.SweepMemory: the health gate's checks, the quarantine,
    each collected run; its database opened when first used). lab.sweep.driver.run_sweep calls it (its
    ``open_memory``) once the sweep's plan and preflight are accepted: a refused sweep loads no database modules."""
    from lab.history import sweeps

    return sweeps.open_for(url, sweep, make_folder=make_folder)


def _no_file(url: str) -> bool:
    """Whether ``url`` is a SQLite file that does not exist yet (a lab with no history)."""
    from lab.history.db import missing_file

    return missing_file(url)


def past_reader(url: str):
    """``read(uuids, sources, depth)``: the GPUs' own past for validate's trend checks (lab.history.past), as
    plain data; a database that cannot be read gives ``{"gpus": {}, "error": its line}`` (validate then says
    "not judged" and goes on), one that does not exist yet no points."""

    def read(uuids, sources, depth) -> dict:
        from lab.history import past
        from lab.history.db import open_db

        if _no_file(url):
            return {"gpus": {}, "error": None, "left_out": 0}
        try:
            db = open_db(url)
            try:
                return past.gpu_past(db, uuids, sources, depth)
            finally:
                db.close()
        except ConfigError as exc:
            return {"gpus": {}, "error": exc.message, "left_out": 0}

    return read


def after_validate(paths, doc: dict, url: str, quarantine: bool = True, make_folder: bool = False) -> list[str]:
    """What a validate adds to the lab's memory once validate.json is written: its checks and, with
    ``quarantine``, each failing host or GPU quarantined (lab.history.autoquarantine), in one transaction;
    the lines to print. ``make_folder``: the default database's results folder is made (a fresh checkout),
    after the files are read. A database that fails is said in a line, nothing is written; the files stay
    to be imported later."""
    from lab.history.autoquarantine import quarantine_in
    from lab.history.db import open_db, sqlite_folder
    from lab.history.sources import read_sources
    from lab.history.store import RETRIES, write_sources

    def write(s):
        added = write_sources(s, src)
        return [f"history: {added.line()}"] + (quarantine_in(s, doc) if quarantine else [])

    where = ",".join(str(p) for p in paths)
    try:
        src = read_sources([Path(p) for p in paths])
        if make_folder:
            sqlite_folder(url)
        db = open_db(url)
        try:
            return db.transaction(write, RETRIES)
        finally:
            db.close()
    except ConfigError as exc:
        return [
            advice.carry(
                f"history: not recorded: {exc.message}; the files stay "
                f"(`invoke history.import {shlex.quote(where)}` later)"
            )
        ]


def known_good(url: str, sources: dict) -> dict:
    """The figures of known-good GPUs per model and metric (lab.history.baseline), for `invoke validate --baseline
    --from-history`; {} where no database exists yet. A database that cannot be read: ConfigError."""
    from lab.history.baseline import known_good as read
    from lab.history.db import open_db

    if _no_file(url):
        return {}
    db = open_db(url)
    try:
        return read(db, sources)
    finally:
        db.close()


def quarantined(url: str, hosts) -> dict[str, dict]:
    """What a sweep of ``hosts`` plans around (quarantine.for_sweep); nothing where no database exists yet.

    A database that exists but cannot be read is a ConfigError: the sweep does
    not start without knowing what is quarantined.
    """
    if _no_file(url):  # before the database modules load: a sweep refused by its own checks never needs them
        return {}
    from lab.history import quarantine
    from lab.history.db import open_db

    db = open_db(url)
    try:
        return quarantine.for_sweep(db, [getattr(h, "name", h) for h in hosts])
    finally:
        db.close()
