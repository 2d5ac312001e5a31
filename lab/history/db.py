"""Opening the results database: the URL, the schema (Alembic migrations), and its failures as bad input.

``open_db(url)`` returns a ``Database`` whose schema is this gpulab's head
revision: a new database is created, an older one is migrated, and one that a
newer gpulab wrote (a revision these migrations do not know) is refused. Every
way a database can fail to open (no such server, a password refused, a file
that is not a database, one locked by another writer past the wait, a URL that
does not parse) is a ``ConfigError``: one line naming the database (never its
password), exit 2. Nothing in results/ is touched either way.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from lab.core import paths, writes
from lab.core.errors import ConfigError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
DEFAULT_FILE = "history.sqlite"
LOCK_WAIT_S = 30            # how long a writer waits for a SQLite file another one holds
CONNECT_TIMEOUT_S = 10      # how long a server may take to answer
PG_MIGRATION_LOCK = 30_000_030   # advisory lock id: one migration at a time on a shared server


def default_url(results: str | Path) -> str:
    """The SQLite file under the results folder (checked, not made: see sqlite_folder)."""
    folder = paths.folder(results or "results", "config gpulab.results")
    return f"sqlite:///{folder.resolve() / DEFAULT_FILE}"


def sqlite_folder(url: str) -> None:
    """Make the folder of a SQLite database file (the results folder of a fresh lab); other URLs: nothing."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        what = f"history database {shown(url)}"
        writes.folder(paths.folder(Path(parsed.database).parent, what), what)


SQLITE_FILES = ("", "-journal", "-wal", "-shm")   # the database and the files SQLite makes beside it


def sqlite_files(db: str | Path, what: str) -> None:
    """A SQLite database file and its journals: each a regular file or absent, never a link (SQLite opens
    them following links: a link planted there would have it write wherever it points); ConfigError.
    The folder is the user's, as for sweeps (lab.core.writes: a results folder may be a link to a data disk)."""
    for suffix in SQLITE_FILES:
        writes.check_file(f"{db}{suffix}", what)


def resolve_url(configured: str | None, results: str | Path) -> str:
    """``gpulab.history_url`` if set, else the SQLite file results/history.sqlite."""
    if configured in (None, ""):
        return default_url(results)
    if not isinstance(configured, str):
        raise ConfigError(f"config gpulab.history_url: {configured!r} is not a database URL")
    return configured.strip()


def shown(url) -> str:
    """The URL for messages: never its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        return "<unparsable URL>"


def _why(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text_ = " ".join(str(orig).split())
    low = text_.lower()
    if "file is not a database" in low or "database disk image is malformed" in low:
        return "not a readable SQLite database (corrupt, or another kind of file)"
    if "database is locked" in low:
        return f"locked by another process for more than {LOCK_WAIT_S} s"
    if "unable to open database file" in low:
        return "cannot open the database file (missing folder or no permission)"
    if "connection refused" in low or "could not connect" in low or "timeout expired" in low \
            or "connection failed" in low:
        return "the database server does not answer: " + text_[:200]
    if "password authentication failed" in low or "role" in low and "does not exist" in low:
        return "the server refused the login: " + text_[:200]
    if 'database "' in low and "does not exist" in low:
        return text_[:200]
    return text_[:300] or type(orig).__name__


why = _why   # what a database failure means, in one line (lab.tune.storage too)


def _engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"history database {url!r}: not an SQLAlchemy URL "
                          "(sqlite:///path or postgresql+psycopg://user@host/db)") from None
    backend = parsed.get_backend_name()
    args: dict = {}
    if backend == "sqlite":
        db = parsed.database
        if not db or db == ":memory:":
            raise ConfigError(f"history database {shown(url)}: a SQLite database needs a file path")
        if not Path(db).parent.is_dir():
            raise ConfigError(f"history database {shown(url)}: folder {Path(db).parent} does not exist")
        sqlite_files(db, f"history database {shown(url)}")
        args = {"timeout": LOCK_WAIT_S}
    elif backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        args = {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        engine = create_engine(parsed, connect_args=args, pool_pre_ping=True)
    except (NoSuchModuleError, ArgumentError, ImportError) as exc:
        raise ConfigError(f"history database {shown(url)}: {' '.join(str(exc).split())[:200]}") from None
    if backend == "sqlite":
        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):
            dbapi_conn.isolation_level = None    # SQLAlchemy's BEGIN below, not the driver's own
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn):
            conn.exec_driver_sql("BEGIN IMMEDIATE")   # a writer takes the lock at its start: no upgrade deadlock
    return engine


def _alembic_config(connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def _scripts():
    from alembic.script import ScriptDirectory

    cfg = _alembic_config(None)
    return ScriptDirectory.from_config(cfg)


def head() -> str:
    return _scripts().get_current_head()


def current(connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


@dataclass
class Database:
    url: str
    engine: Engine
    sessions: sessionmaker

    @property
    def name(self) -> str:
        return shown(self.url)

    @contextlib.contextmanager
    def session(self):
        """A session whose failures are one line (ConfigError); commits on success."""
        with self.sessions() as s:
            try:
                yield s
                s.commit()
            except DBAPIError as exc:
                s.rollback()
                raise ConfigError(f"history database {self.name}: {_why(exc)}") from None

    def close(self) -> None:
        self.engine.dispose()


def _upgrade(engine: Engine, name: str) -> None:
    from alembic import command

    scripts = _scripts()
    known = {s.revision for s in scripts.walk_revisions()}
    with engine.connect() as conn:
        rev = current(conn)
        conn.rollback()
    if rev is not None and rev not in known:
        raise ConfigError(f"history database {name}: schema revision {rev!r} is newer than this gpulab "
                          f"knows (head {scripts.get_current_head()!r}): use the gpulab that wrote it")
    if rev == scripts.get_current_head():
        return
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_MIGRATION_LOCK})
        if current(conn) != scripts.get_current_head():   # another writer may have done it meanwhile
            command.upgrade(_alembic_config(conn), "head")


def open_db(url: str) -> Database:
    """The database at ``url``, at this gpulab's schema; ConfigError (exit 2, one line) if it cannot be."""
    engine = _engine(url)
    name = shown(url)
    try:
        for attempt in range(3):
            try:
                _upgrade(engine, name)
                break
            except DBAPIError as exc:   # two first writers of a new server database: the second retries
                if attempt == 2 or "already exists" not in str(exc).lower():
                    raise
                time.sleep(0.2)
    except ConfigError:
        engine.dispose()
        raise
    except (SQLAlchemyError, OSError) as exc:
        engine.dispose()
        raise ConfigError(f"history database {name}: {_why(exc)}") from None
    return Database(url=url, engine=engine, sessions=sessionmaker(engine, expire_on_commit=False))
