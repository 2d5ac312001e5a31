"""The lab's memory: per-GPU history of validate checks and runs in one SQL database.

SQLite under results/ by default (``results/history.sqlite``: nothing to
start), or any SQLAlchemy URL a lab shares (``gpulab.history_url``, e.g.
``postgresql+psycopg://gpulab@dbhost/gpulab``). The schema is versioned with
Alembic (migrations/ in this package); a database written by a newer gpulab is
refused. Run directories and validate outputs stay the source of truth: the
database is rebuilt from them with ``import_paths`` (idempotent).

Modules: db (URL, engine, migrations, failures as one line), models (tables),
sources (run directories through lab.results, validate.json files -> records),
store (records -> rows, idempotent, safe with two writers).
"""

from __future__ import annotations

from pathlib import Path

from lab.history.db import Database, open_db, resolve_url
from lab.history.sources import read_sources
from lab.history.store import Added, add_sources

__all__ = ["Added", "Database", "import_paths", "open_db", "resolve_url"]


def import_paths(paths, url: str) -> tuple[Added, list[str]]:
    """Load run directories and validate.json files under ``paths`` into the database at ``url``.

    Everything is read (and checked) before the database is opened; returns
    what was added and one line per thing skipped.
    """
    src = read_sources([Path(p) for p in paths])
    db = open_db(url)
    try:
        return add_sources(db, src), src.skipped
    finally:
        db.close()
