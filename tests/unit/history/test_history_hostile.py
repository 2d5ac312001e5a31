"""The lab's memory under hostile input (issue 45): nothing lost, nothing half-written, a refused command
changes nothing, waits are bounded, values read back are shown safely. Each case on SQLite and on the real
PostgreSQL of the test set-up (db_url); the commands are run in-process (lab.commands.historytasks through
lab.core.cli.task_errors, as `invoke` runs them) to keep the time lean."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from histdata import write_run, write_sweep, write_validation
from invoke import Config, Context, Exit
from sqlalchemy import func, insert, select, text

from lab.core import config
from lab.core.settings import flag
from lab.core.errors import ConfigError
from lab.history import db as hdb, migrate
from lab.history import quarantine as q
from lab.history import query, sweeps
from lab.commands import historytasks as htasks
from lab.history.models import Check, Quarantine, Run, Validation
from lab.history.sources import CheckRecord, ValidationRecord, read_sources
from lab.history.store import add_sources


def ctx(results: Path, **gpulab) -> Context:
    section = copy.deepcopy(config.defaults()["gpulab"])
    section.update(results=str(results), **gpulab)
    return Context(Config(overrides={"gpulab": section}))


def refused(fn, c, *args, **kwargs) -> str:
    """The one line a refused task ends with (exit 2)."""
    with pytest.raises(Exit) as err:
        fn(c, *args, **kwargs)
    assert err.value.code == 2, err.value.message
    line = err.value.message
    assert "\n" not in line and line.isprintable() and len(line) < 400, line
    return line


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def counts(url: str) -> tuple:
    d = hdb.open_db(url)
    try:
        with d.session() as s:
            return tuple(s.scalar(select(func.count()).select_from(m)) for m in (Run, Validation, Check, Quarantine))
    finally:
        d.close()


# ------------------------------------------------------------------ 1. all or nothing


def test_an_import_that_fails_part_way_leaves_the_database_as_it_was(db_url, tmp_path):
    res = tmp_path / "results"
    write_sweep(res, "sw1", {"r740-01": 2})
    src = read_sources([res])
    bad = ValidationRecord(
        key="f" * 64,
        source="hostile",
        at=None,
        level="standard",
        verdict="PASS",
        checks=[CheckRecord(host="r740-01", name="bad \udc80 name", verdict="PASS")],
    )
    src.validations.append(bad)  # after the runs: on ac25178 they were committed one by one before it
    d = hdb.open_db(db_url)
    try:
        with pytest.raises(ConfigError, match=r"hostile: name: .* is not valid UTF-8 text"):
            add_sources(d, src)
    finally:
        d.close()
    assert counts(db_url) == (0, 0, 0, 0)


def test_runs_whose_sha256sums_lists_nothing_are_two_runs_not_one(db_url, tmp_path):
    res = tmp_path / "results"
    for seed in (1, 2):
        d = write_run(res / "sw", "r740-01", f"ncf-s{seed}", seed=seed)
        (d / "SHA256SUMS").write_bytes(b"")
    src = read_sources([res])
    assert len(src.runs) == 2 and src.runs[0].key != src.runs[1].key, src.skipped
    d = hdb.open_db(db_url)
    try:
        assert add_sources(d, src).runs == 2
        assert add_sources(d, read_sources([res])).runs_present == 2  # and importing again adds nothing
    finally:
        d.close()


def test_two_quarantine_adds_of_one_target_at_once_leave_one_open_entry(db_url):
    """The second writer's read sees no entry (the first has not committed): the database's unique index,
    not that read, keeps one open entry per target."""
    first, second = hdb.open_db(db_url), hdb.open_db(db_url)
    try:
        conn = first.engine.connect()
        trans = conn.begin()
        conn.execute(
            insert(Quarantine).values(
                host="r740-01", gpu_index=2, reason="one", who="a", added_at=dt.datetime.now(dt.timezone.utc)
            )
        )
        out = {}
        t = threading.Thread(target=lambda: out.update(r=q.add(second, q.Target("r740-01", 2), reason="two", who="b")))
        t.start()
        time.sleep(0.5)
        trans.commit()
        conn.close()
        t.join(60)
        entry, added = out["r"]
        assert not added and entry.reason == "one"
        assert [(e.host, e.gpu_index) for e in q.active(second)] == [("r740-01", 2)]
    finally:
        first.close()
        second.close()


# ------------------------------------------------------------------ 2. values checked in and out


def test_a_foreign_sqlite_file_is_refused_and_gets_no_tables(tmp_path):
    path = tmp_path / "notes.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    with pytest.raises(ConfigError, match=r"holds tables gpulab did not make \(notes\)"):
        hdb.open_db(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["notes"]


@pytest.mark.parametrize("rows", [["0001", "0002"], [7], [None], []])
def test_a_hostile_schema_version_table_is_one_line(db_url, rows):
    hdb.open_db(db_url).close()
    d = hdb.open_db(db_url)
    with d.engine.begin() as conn:
        conn.execute(text("DELETE FROM alembic_version"))
        if rows and not isinstance(rows[0], str):
            conn.execute(text("DROP TABLE alembic_version"))
            conn.execute(text("CREATE TABLE alembic_version (version_num INTEGER)"))
        for r in rows:
            conn.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": r})
    d.close()
    with pytest.raises(ConfigError, match="schema-version table alembic_version is not one gpulab wrote"):
        hdb.open_db(db_url)


def test_stored_values_of_another_program_are_one_line_and_escapes_are_not_printed_raw(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    url = f"sqlite:///{res / hdb.DEFAULT_FILE}"
    hdb.open_db(url).close()
    with sqlite3.connect(res / hdb.DEFAULT_FILE) as conn:
        conn.execute("INSERT INTO validations (key, source, imported_at) VALUES ('k', 's', '2026-12-01 10:00:00')")
        conn.execute(
            "INSERT INTO checks (validation_id, host, name, verdict, value_text, at) VALUES "
            "(1, 'evil\x1b[2J', 'name\x1b]0;owned\x07', 'PASS', 'x', '2026-12-01 10:00:00')"
        )
        conn.execute(
            "INSERT INTO quarantine (host, reason, who, added_at) VALUES "
            "('h\x1b[31m', 'why\x1b[2J', 'ops', '2026-12-01 10:00:00')"
        )
    d = hdb.open_db(url)
    try:
        shown = "\n".join(query.table(query.history_rows(d)) + q.table(q.active(d)))
    finally:
        d.close()
    assert "\x1b" not in shown and "\x07" not in shown and "evil\\x1b[2J" in shown and "why\\x1b[2J" in shown
    with sqlite3.connect(res / hdb.DEFAULT_FILE) as conn:
        conn.execute("UPDATE checks SET at = 'not a time at all'")
    line = refused(htasks.history_show, ctx(res))
    assert "a stored value cannot be read back" in line


def test_records_dated_in_the_future_pass_no_gate_and_release_nothing(db_url, tmp_path):
    write_validation(tmp_path / "v", "r740-01", when="2099-01-01T00:00:00Z")  # a passing validate, far ahead
    d = hdb.open_db(db_url)
    try:
        q.add(d, q.Target("r740-01"), reason="suspect", who="ops")
        add_sources(d, read_sources([tmp_path / "v" / "validate.json"]))
        with pytest.raises(Exception, match="no validate of r740-01 since it was quarantined"):
            q.release(d, q.Target("r740-01"), who="ops")
    finally:
        d.close()
    mem = sweeps.open_for(db_url, "sw")
    try:
        from lab.validate.health import Health

        health = Health(ok=True, at="2099-01-01T00:00:00Z", boot_id="b", uptime_s=1.0)
        mem.record_health("r740-01", health, {"x": 1})
        assert not mem.recent_pass("r740-01", 24)
    finally:
        mem.close()


# ------------------------------------------------------------------ 3. a refused command changes nothing


def test_history_page_never_overwrites_the_database_or_another_file(tmp_path):
    res = tmp_path / "results"
    write_sweep(res, "sw1", {"r740-01": 2})
    c = ctx(res)
    htasks.quarantine_add(
        c,
        "r740-01:1",
        reason="XID 79",
        who="ops",
        inventory=str(Path(__file__).resolve().parents[3] / "inventory" / "hosts.yml"),
    )
    dbfile = res / hdb.DEFAULT_FILE
    before = digest(dbfile)
    line = refused(htasks.history_page, c, str(dbfile))
    assert "history.sqlite" in line and ("history database itself" in line or "not an HTML page" in line)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert "exists and is not an HTML page" in refused(htasks.history_page, c, str(notes))
    assert "system folder" in refused(htasks.history_page, c, "/var/history.html")
    assert digest(dbfile) == before and notes.read_text() == "my notes\n"
    assert not Path("/var/history.html").exists()
    assert q.table(q.active(hdb.open_db(f"sqlite:///{dbfile}")))[1].startswith("r740-01 GPU 1")


@pytest.mark.parametrize(
    "task, args, kwargs, why",
    [
        ("history_show", (), {"since": "yesterday"}, "--since"),
        ("history_show", (), {"gpu": "x;y"}, "neither a GPU UUID"),
        ("history_show", (), {"host": "a b"}, "--host"),
        ("history_page", ("out/page.txt/../x.html",), {"since": "nope"}, "--since"),
        ("history_page", ("/usr/history.html",), {}, "system folder"),
        ("quarantine_release", ("r740-01",), {}, "r740-01 is not quarantined"),
        ("quarantine_release", ("r740-01",), {"force": True, "note": "n" * 3000}, "--note is longer"),
        ("quarantine_add", ("r740-01",), {"reason": "r" * 3000}, "--reason is longer"),
        # an index out of range is refused as r740-01:64 is, never quarantined as a host named 'r740-01:100'
        ("quarantine_add", ("r740-01:100",), {"reason": "r"}, "'100' is not a whole number from 0 to 63"),
        ("quarantine_add", ("r740-01:-1",), {"reason": "r"}, "'-1' is not a whole number from 0 to 63"),
        ("quarantine_add", ("r740-01:",), {"reason": "r"}, "'' is not a whole number from 0 to 63"),
        ("quarantine_release", ("r740-01:100",), {}, "GPU index: '100'"),
    ],
)
def test_a_refused_command_leaves_no_database_and_no_folder(tmp_path, task, args, kwargs, why):
    res = tmp_path / "results"
    line = refused(getattr(htasks, task), ctx(res), *args, **kwargs)
    assert why in line
    assert not res.exists() and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ 4. bounded waits


def test_a_lock_another_session_holds_is_one_line_after_the_wait(pg_server):
    url = pg_server.new_database()
    hdb.open_db(url).close()
    holder = hdb.open_db(url)
    conn = holder.engine.connect()
    trans = conn.begin()
    conn.execute(text("LOCK TABLE quarantine IN ACCESS EXCLUSIVE MODE"))
    try:
        waiting = hdb.resolve_url(url, "results", lock_s=1)
        started = time.monotonic()
        with pytest.raises(
            ConfigError,
            match="waited longer than gpulab.history_lock_timeout_s for a lock "
            "another session holds; nothing was changed",
        ):
            d = hdb.open_db(waiting)
            try:
                q.active(d)
            finally:
                d.close()
        assert time.monotonic() - started < 20
        assert "options" not in hdb.shown(waiting) and "lock_timeout" in waiting
    finally:
        trans.rollback()
        conn.close()
        holder.close()


# ------------------------------------------------------------------ 5. booleans as Invoke users write them


@pytest.mark.parametrize(
    "word, value",
    [
        ("false", False),
        ("no", False),
        ("OFF", False),
        ("0", False),
        ("true", True),
        ("yes", True),
        ("on", True),
        ("1", True),
    ],
)
def test_a_yes_no_setting_is_read_as_written_in_every_layer(word, value):
    env = config.env_section(config.defaults()["gpulab"], {"INVOKE_GPULAB_VALIDATE_QUARANTINE": word})
    assert env == {"validate": {"quarantine": value}}
    config.conform({"validate": {"quarantine": word}})  # a file layer takes the same words
    assert flag(word, "config gpulab.validate.quarantine") is value


@pytest.mark.parametrize("word", ["maybe", "", "2", "tru"])
def test_any_other_word_is_one_line_naming_the_setting_and_the_layer(word):
    with pytest.raises(
        ConfigError,
        match=r"INVOKE_GPULAB_VALIDATE_QUARANTINE \(gpulab.validate.quarantine\): "
        r".* is not true/false, yes/no, on/off or 1/0 \(environment variable\)",
    ):
        config.env_section(config.defaults()["gpulab"], {"INVOKE_GPULAB_VALIDATE_QUARANTINE": word})
    with pytest.raises(
        ConfigError,
        match=r"config gpulab.validate.quarantine: .* \(true/false, yes/no, on/off or "
        r"1/0\) \(invoke.yaml\)",
    ):
        config._checked({"validate": {"quarantine": word}}, "invoke.yaml")


# ------------------------------------------------------------------ inputs the database takes


def test_a_big_validate_json_is_not_one_query_per_check(tmp_path):
    """100 hosts x 8 GPUs x the checks of a standard validate go in with a few statements per table."""
    write_validation(tmp_path / "v", "h200-01")
    doc = json.loads((tmp_path / "v" / "validate.json").read_text())
    one = doc["hosts"]["h200-01"]
    doc["hosts"] = {f"h200-{i:03d}": copy.deepcopy(one) for i in range(100)}
    for i, h in enumerate(doc["hosts"].values()):
        for g in h["gpus"].values():
            g["uuid"] = f"GPU-{i:04d}-{g['index']:04d}"
    big = tmp_path / "big" / "validate.json"
    big.parent.mkdir()
    big.write_text(json.dumps(doc))
    src = read_sources([big])
    n = len(src.validations[0].checks)
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    d = hdb.open_db(url)
    statements = []
    from sqlalchemy import event

    event.listen(d.engine, "before_cursor_execute", lambda *a: statements.append(1))
    try:
        added = add_sources(d, src)
    finally:
        d.close()
    assert added.checks == n > 10_000
    assert len(statements) < 200, len(statements)


def test_an_older_database_with_two_open_entries_of_one_target_is_migrated_to_one(db_url):
    """A database of revision 0001 (before the unique index) that two concurrent adds left with two open
    entries of one target: migration 0002 keeps the first open, releases the other with a note."""
    from alembic import command
    from sqlalchemy import create_engine

    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        command.upgrade(migrate.alembic_config(conn), "0001")
        for who in ("a", "b"):
            conn.execute(
                insert(Quarantine).values(
                    host="r740-01", gpu_index=1, reason=f"by {who}", who=who, added_at=dt.datetime.now(dt.timezone.utc)
                )
            )
    engine.dispose()
    d = hdb.open_db(db_url)
    try:
        entries = q.active(d)
        assert [(e.host, e.gpu_index, e.reason) for e in entries] == [("r740-01", 1, "by a")]
        with d.session() as s:
            released = s.scalars(select(Quarantine).where(Quarantine.released_at.is_not(None))).all()
        assert [(e.who, e.released_by) for e in released] == [("b", "gpulab migration 0002")]
    finally:
        d.close()


def test_a_check_text_that_is_not_a_text_is_stored_as_json_writes_it(tmp_path):
    """validate.json is another program's file: a check's unit or expected that is an object or a boolean is
    kept as the JSON text the file holds, not as Python's repr of it."""
    write_validation(tmp_path / "v", "h200-01")
    path = tmp_path / "v" / "validate.json"
    doc = json.loads(path.read_text())
    check = doc["hosts"]["h200-01"]["gpus"]["0"]["checks"][0]
    check.update(unit={"per": "GPU"}, expected=True, reason=["a", "b"])
    path.write_text(json.dumps(doc))
    (rec,) = read_sources([path]).validations
    (stored,) = [c for c in rec.checks if c.gpu and c.gpu.index == 0 and c.name == check["check"]]
    assert (stored.unit, stored.expected, stored.reason) == ('{"per": "GPU"}', "true", '["a", "b"]')
