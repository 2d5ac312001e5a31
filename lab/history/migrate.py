"""The history database's schema: Alembic's migrations (lab/history/migrations), this gpulab's head revision,
the revision a database holds (read as any input: tables of another program, or a version table gpulab did
not write, are refused), and the upgrade to the head, one writer at a time. lab.history.db.open_db runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lab.core.errors import ConfigError, excerpt

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
PG_MIGRATION_LOCK = 30_000_030  # advisory lock id: one migration at a time on a shared server
VERSION_TABLE = "alembic_version"


def alembic_config(connection):
    """Alembic's configuration of lab/history/migrations, on ``connection`` (None: none)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def scripts():
    """The migration scripts (Alembic's ScriptDirectory)."""
    from alembic.script import ScriptDirectory

    cfg = alembic_config(None)
    return ScriptDirectory.from_config(cfg)


def head() -> str:
    """This gpulab's schema revision."""
    return scripts().get_current_head()


def current(connection) -> str | None:
    """The revision Alembic finds in the database on ``connection`` (None: none)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def revision(conn, name: str) -> str | None:
    """The schema revision a database holds (None: a new one), read as any input: a SQLite file with tables of
    another program, or a schema-version table gpulab did not write (not one row of text), is refused."""
    from sqlalchemy import inspect, text
    from sqlalchemy.exc import DBAPIError

    tables = set(inspect(conn).get_table_names())
    if VERSION_TABLE not in tables:
        if tables and conn.dialect.name == "sqlite":
            raise ConfigError(
                f"history database {name}: holds tables gpulab did not make "
                f"({excerpt(', '.join(sorted(tables)), 80)}): not a gpulab history database; "
                "give another file"
            )
        return None
    try:
        rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
    except DBAPIError:
        rows = None
    rev = rows[0][0] if rows and len(rows) == 1 else None
    if not isinstance(rev, str) or not 0 < len(rev) <= 32 or not rev.isprintable():
        raise ConfigError(
            f"history database {name}: its schema-version table {VERSION_TABLE} is not one gpulab "
            f"wrote ({'unreadable' if rows is None else f'{len(rows)} row(s)'}"
            f"{'' if rev is None else ', ' + excerpt(repr(rev), 40)}): not a gpulab history database"
        )
    return rev


def upgrade(engine: Engine, name: str) -> None:
    """Bring the database to this gpulab's head revision, one writer at a time (PostgreSQL: an advisory lock);
    a revision these migrations do not know is refused (ConfigError)."""
    from alembic import command
    from sqlalchemy import text

    found = scripts()
    known = {s.revision for s in found.walk_revisions()}
    with engine.connect() as conn:
        rev = revision(conn, name)
        conn.rollback()
    if rev is not None and rev not in known:
        raise ConfigError(
            f"history database {name}: schema revision {excerpt(repr(rev), 40)} is newer than this "
            f"gpulab knows (head {found.get_current_head()!r}): use the gpulab that wrote it"
        )
    if rev == found.get_current_head():
        return
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_MIGRATION_LOCK})
        if revision(conn, name) != found.get_current_head():  # another writer may have done it meanwhile
            command.upgrade(alembic_config(conn), "head")
