"""Opening the results database: the URL, the schema (its migrations: lab.history.migrate), and its failures as bad input.

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

from typing import TYPE_CHECKING

from lab.core import paths, settings, writes
from lab.core.errors import ConfigError, excerpt
from lab.history import migrate

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import sessionmaker

# SQLAlchemy (about a fifth of a second) is imported by the functions that parse a URL or open a database, not
# with this module: a command that refuses its input, or finds no database file (missing_file), never loads it.

DEFAULT_FILE = "history.sqlite"
LOCK_WAIT_S = 30  # how long a writer waits for a SQLite file another one holds
CONNECT_TIMEOUT_S = 10  # how long a server may take to answer
SQLITE_PREFIX = "sqlite:///"  # a SQLite file's URL: this, then the file's path


def default_url(results: str | Path) -> str:
    """The SQLite file under the results folder (checked, not made: see sqlite_folder)."""
    folder = paths.folder(results or "results", "config gpulab.results")
    return f"{SQLITE_PREFIX}{folder.resolve() / DEFAULT_FILE}"


def sqlite_folder(url: str) -> None:
    """Make the folder of a SQLite database file (the results folder of a fresh lab); other URLs: nothing."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        what = f"history database {shown(url)}"
        writes.folder(paths.folder(Path(parsed.database).parent, what), what)


SQLITE_FILES = ("", "-journal", "-wal", "-shm")  # the database and the files SQLite makes beside it


def sqlite_files(db: str | Path, what: str) -> None:
    """A SQLite database file and its journals: each a regular file or absent, never a link (SQLite opens
    them following links: a link planted there would have it write wherever it points); ConfigError.
    The folder is the user's, as for sweeps (lab.core.writes: a results folder may be a link to a data disk)."""
    for suffix in SQLITE_FILES:
        writes.writable_file(f"{db}{suffix}", what)


def resolve_url(configured: str | None, results: str | Path, lock_s=None, statement_s=None) -> str:
    """``gpulab.history_url`` if set, else the SQLite file results/history.sqlite. A PostgreSQL URL carries the
    waits (gpulab.history_lock_timeout_s, history_statement_timeout_s: lock_timeout and statement_timeout of
    each connection), so that another session holding a lock is one line after that wait, never a hang."""
    if configured in (None, ""):
        return default_url(results)
    if not isinstance(configured, str):
        raise ConfigError(f"config gpulab.history_url: {excerpt(repr(configured), 60)} is not a database URL")
    url = configured.strip()
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        return url  # open_db says so in one line
    if parsed.get_backend_name() != "postgresql" or "options" in parsed.query:
        return url
    waits = []
    for name, value in (("lock_timeout", lock_s), ("statement_timeout", statement_s)):
        key = f"history_{name}_s"
        secs = settings.read({} if value in (None, "") else {key: value}, key)  # its declared default and range
        waits.append(f"-c {name}={int(secs * 1000)}")
    return parsed.update_query_dict({"options": " ".join(waits)}).render_as_string(hide_password=False)


def shown(url) -> str:
    """The URL for messages: never its password (nor the waits resolve_url added), at most 200 characters."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return excerpt(make_url(url).difference_update_query(["options"]).render_as_string(hide_password=True), 200)
    except (ArgumentError, ValueError, TypeError):
        return "<unparsable URL>"


def _why(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text_ = " ".join(str(orig).split())
    low = text_.lower()
    if "file is not a database" in low or "database disk image is malformed" in low:
        return "not a readable SQLite database (corrupt, or another kind of file)"
    if "lock timeout" in low:
        return "waited longer than gpulab.history_lock_timeout_s for a lock another session holds"
    if "statement timeout" in low:
        return "a statement ran longer than gpulab.history_statement_timeout_s"
    if "database is locked" in low:
        return f"locked by another process for more than {LOCK_WAIT_S} s"
    if "unable to open database file" in low:
        return "cannot open the database file (missing folder or no permission)"
    if (
        "connection refused" in low
        or "could not connect" in low
        or "timeout expired" in low
        or "connection failed" in low
    ):
        return "the database server does not answer: " + text_[:200]
    if "password authentication failed" in low or "role" in low and "does not exist" in low:
        return "the server refused the login: " + text_[:200]
    if 'database "' in low and "does not exist" in low:
        return text_[:200]
    return text_[:300] or type(orig).__name__


why = _why  # what a database failure means, in one line (lab.tune.storage too)


def _engine(url: str) -> Engine:
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        raise ConfigError(
            f"history database {excerpt(repr(url), 80)}: not an SQLAlchemy URL "
            "(sqlite:///path or postgresql+psycopg://user@host/db)"
        ) from None
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
    except (NoSuchModuleError, ArgumentError, ImportError, ValueError, TypeError) as exc:
        raise ConfigError(f"history database {shown(url)}: {excerpt(exc, 200)}") from None
    if backend == "sqlite":
        _sqlite_events(engine)
    return engine


def _sqlite_events(engine: Engine) -> None:
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # SQLAlchemy's BEGIN below, not the driver's own
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # a writer takes the lock at its start: no upgrade deadlock


def _empty() -> Engine:
    """An empty database in memory: what a reading command sees where no SQLite file exists yet (none is made)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import StaticPool

    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    _sqlite_events(engine)
    return engine


def missing_file(url: str) -> bool:
    """Whether ``url`` is a SQLite file that does not exist yet (a lab with no history). default_url's form
    (the prefix, then a path with no ``?``) is read without SQLAlchemy: make_url takes that path unchanged."""
    if isinstance(url, str) and url.startswith(SQLITE_PREFIX) and "?" not in url:
        return _no_such_file(url[len(SQLITE_PREFIX) :])
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        return False
    return parsed.get_backend_name() == "sqlite" and _no_such_file(parsed.database)


def _no_such_file(database: str | None) -> bool:
    try:
        return (
            bool(database)
            and database != ":memory:"
            and not Path(database).exists()
            and not Path(database).is_symlink()
        )
    except (ValueError, TypeError):  # a NUL in the path
        return False


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
        """One transaction whose failures are one line (ConfigError) and leave the database as it was; commits
        on success. A stored value this gpulab cannot read back (another program's, or an older gpulab's) is
        one line too."""
        with self.sessions() as s:
            try:
                yield s
                s.commit()
            except BaseException as exc:
                s.rollback()
                self._fail(exc)
                raise

    def transaction(self, write, retries: int = 1):
        """``write(session)`` as one transaction, started again (up to ``retries`` times) after it lost a race
        on a unique key to another writer, whose rows it then finds; its result. Failures as ``session``."""
        from sqlalchemy.exc import IntegrityError

        for attempt in range(retries):
            with self.sessions() as s:
                try:
                    result = write(s)
                    s.commit()
                    return result
                except IntegrityError:
                    s.rollback()
                    if attempt < retries - 1:
                        continue
                    raise ConfigError(
                        f"history database {self.name}: another writer kept adding the same "
                        "rows; nothing was changed, try again"
                    ) from None
                except BaseException as exc:
                    s.rollback()
                    self._fail(exc)
                    raise
        raise ConfigError(f"history database {self.name}: nothing to do")  # pragma: no cover - retries >= 1

    def _fail(self, exc: BaseException) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        if isinstance(exc, SQLAlchemyError):
            raise ConfigError(f"history database {self.name}: {_why(exc)}; nothing was changed") from None
        if isinstance(exc, (ValueError, TypeError, OverflowError)):
            raise ConfigError(
                f"history database {self.name}: a stored value cannot be read back "
                f"({excerpt(exc, 120)}); nothing was changed"
            ) from None

    def file(self) -> Path | None:
        """The SQLite file of this database, made yet or not (None: a server's, or one in memory)."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            parsed = make_url(self.url)
        except (ArgumentError, ValueError, TypeError):
            return None
        if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
            return None
        return Path(parsed.database)

    def close(self) -> None:
        self.engine.dispose()


def open_db(url: str, *, create: bool = True, default: bool = False) -> Database:
    """The database at ``url``, at this gpulab's schema; ConfigError (exit 2, one line) if it cannot be.

    ``create=False`` (the commands that only read, or refuse): where ``url`` is a SQLite file that does not
    exist, an empty database in memory stands in for it and no file is made; its folder must exist unless
    it is the ``default`` one (results/, made by the first command that adds)."""
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError
    from sqlalchemy.orm import sessionmaker

    name = shown(url)
    if not create and default and missing_file(url):
        engine = _empty()
    else:
        engine = _engine(url)  # the URL checked (its folder there, no link in the file's place) either way
        if not create and missing_file(url):
            engine.dispose()
            engine = _empty()
    try:
        for attempt in range(3):
            try:
                migrate.upgrade(engine, name)
                break
            except DBAPIError as exc:  # two first writers of a new server database: the second retries
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
