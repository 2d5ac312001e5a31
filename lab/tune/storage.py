"""Where a tune study lives: Optuna's tables in the lab's database (the history's SQLAlchemy URL).

Optuna keeps its own schema, versioned with its own Alembic revisions, in a table that has the same name
as the history's (``alembic_version``): the two cannot share one namespace. So:

* PostgreSQL (a shared lab): the same database, Optuna's tables in their own schema ``gpulab_tune``
  (made when first used; every connection's ``search_path``). Several controllers, on several machines,
  may run trials of one study at once: each trial is its own row, every write one transaction.
* SQLite (the default, ``results/history.sqlite``): SQLite has one namespace per file, so the study is the
  file beside it, ``history-tune.sqlite``. It is for one machine: one writer at a time (others wait up to
  30 s, then fail), no shared access over a network file system (its locks are not reliable there), and
  no second controller elsewhere. A study there survives a controller crash and resumes all the same.

Failures are ConfigError lines naming the database without its password (lab.history.db).
"""

from __future__ import annotations

from pathlib import Path

import optuna
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from lab.core.errors import ConfigError, excerpt
from lab.history import db as historydb, migrate

PG_SCHEMA = "gpulab_tune"
SQLITE_SUFFIX = "-tune"


def tune_url(history_url: str) -> tuple[str, dict]:
    """(URL, engine keyword arguments) of the study storage for the history's URL."""
    try:
        parsed = make_url(history_url)
    except ArgumentError:
        raise ConfigError(f"history database {history_url[:60]!r}: not an SQLAlchemy URL") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        db = parsed.database
        if not db or db == ":memory:":
            raise ConfigError(f"history database {historydb.shown(history_url)}: a SQLite database needs a file")
        p = Path(db)
        tune_db = p.with_name(f"{p.stem}{SQLITE_SUFFIX}{p.suffix or '.sqlite'}")
        historydb.sqlite_files(tune_db, f"tune study database {tune_db}")
        return (
            parsed.set(database=str(tune_db)).render_as_string(hide_password=False),
            {"connect_args": {"timeout": historydb.LOCK_WAIT_S}},
        )
    if backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return (
            parsed.render_as_string(hide_password=False),
            {
                "connect_args": {
                    "connect_timeout": historydb.CONNECT_TIMEOUT_S,
                    "options": f"-csearch_path={PG_SCHEMA}",
                },
                "pool_pre_ping": True,
            },
        )
    raise ConfigError(f"history database {historydb.shown(history_url)}: tune studies need SQLite or PostgreSQL")


def _make_schema(url: str) -> None:
    engine = create_engine(url, connect_args={"connect_timeout": historydb.CONNECT_TIMEOUT_S})
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": migrate.PG_MIGRATION_LOCK + 1})
            conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}"))
    finally:
        engine.dispose()


OPTUNA_TABLES = {"studies", "version_info"}  # in every database Optuna made (its models.py)


def _refuse_foreign_sqlite(url: str, kwargs: dict, name: str) -> None:
    """ConfigError for a SQLite study file that holds tables Optuna did not make: Optuna would write its own
    tables into another program's database (or into a history database copied there)."""
    if not Path(make_url(url).database).exists():
        return  # a new study file: nothing to read (connecting would make it)
    engine = create_engine(url, **kwargs)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
    if tables and not OPTUNA_TABLES <= tables:
        raise ConfigError(
            f"tune study database ({name}): holds tables Optuna did not make "
            f"({excerpt(', '.join(sorted(tables)), 80)}): not a gpulab tune study; move it away"
        )


def open_storage(history_url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage for this lab's database; ConfigError (exit 2) naming the study's own database (for
    SQLite the file beside the history's) when it cannot be opened or is another program's."""
    url, kwargs = tune_url(history_url)
    name = historydb.shown(url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        if make_url(url).get_backend_name() == "postgresql":
            _make_schema(url)
        else:
            historydb.sqlite_folder(url)
            _refuse_foreign_sqlite(url, kwargs, name)
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    except ConfigError:
        raise
    except (SQLAlchemyError, OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"tune study database ({name}): {historydb.why(exc)}") from None


def shown(history_url: str) -> str:
    """The study storage's URL for messages and provenance: never a password."""
    return historydb.shown(tune_url(history_url)[0])
