"""The results database against both backends (SQLite file, real PostgreSQL): schema, import, per-GPU keys,
idempotence, two writers at once, a newer schema refused, quarantine."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from histdata import gpu_uuid, write_run, write_sweep, write_validation

from lab.history import memory as history
from lab.core.errors import CheckFailed, ConfigError
from lab.history import db as hdb, migrate, quarantine as q, query
from lab.history.models import Base, Check, Gpu, Run, RunGpu, Validation

ROOT = Path(__file__).resolve().parents[3]


def counts(url) -> dict:
    d = hdb.open_db(url)
    try:
        with d.session() as s:
            return {
                m.__tablename__: s.scalar(sa.select(sa.func.count()).select_from(m))
                for m in (Gpu, Run, RunGpu, Validation, Check)
            }
    finally:
        d.close()


def test_a_new_database_is_at_the_head_revision_and_the_models_equal_the_migrations(db_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    d = hdb.open_db(db_url)
    try:
        with d.engine.connect() as conn:
            assert migrate.current(conn) == migrate.head() == "0002"
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == []
    finally:
        d.close()
    hdb.open_db(db_url).close()  # opening again migrates nothing


def test_import_keys_runs_and_checks_on_gpu_uuids_and_adds_nothing_twice(db_url, tmp_path):
    res = tmp_path / "results"
    write_sweep(res, "sw1", {"r740-01": 4, "r740-02": 2})
    write_validation(res / "validate", "h200-01", fail_gpu=2)
    added, skipped = history.import_paths([res], db_url)
    assert (added.runs, added.validations, skipped) == (4, 1, [])
    assert added.checks > 8 * 10
    again, _ = history.import_paths([res], db_url)
    assert (again.runs, again.runs_present, again.validations, again.validations_present) == (0, 4, 0, 1)
    n = counts(db_url)
    assert n["runs"] == 4 and n["validations"] == 1 and n["run_gpus"] == 4
    assert n["gpus"] == 8 + 4  # the H200 host's eight, and each GPU that a run used

    d = hdb.open_db(db_url)
    try:
        with d.session() as s:
            g = s.scalar(sa.select(Gpu).where(Gpu.uuid == gpu_uuid("r740-01", 1)))
            assert (g.serial, g.name, g.host) == ("1600000000001", "NVIDIA H200", "r740-01")
            run = s.scalar(sa.select(Run).where(Run.host == "r740-01", Run.seed == 1))
            assert (run.sweep, run.benchmark, run.outcome, run.samples_per_s, run.gpu_indices) == (
                "sw1",
                "ncf",
                "success",
                1001.0,
                "1",
            )
            assert run.stack == "current" and "torch 2.13.0" in run.stack_versions
        rows = query.history_rows(d, gpu=gpu_uuid("r740-01", 1))
        assert [(r["metric"], r["value"], r["uuid"]) for r in rows] == [
            ("ncf throughput", 1001.0, gpu_uuid("r740-01", 1))
        ]
        remap = query.history_rows(d, host="h200-01", gpu="2", metric="row remap")
        assert [(r["gpu"], r["verdict"]) for r in remap] == [(2, "FAIL")]
        assert remap[0]["uuid"].startswith("GPU-") and remap[0]["uuid"].endswith("02")
        bandwidth = [
            r for r in query.history_rows(d, host="h200-01", gpu="0", limit=500) if isinstance(r["value"], float)
        ]
        assert bandwidth and all(r["uuid"] == remap[0]["uuid"][:-2] + "00" for r in bandwidth)
        assert query.history_rows(d, host="h200-01", since="2099-01-01") == []
    finally:
        d.close()


def test_a_later_run_of_a_gpu_adds_to_its_history(db_url, tmp_path):
    res = tmp_path / "results"
    write_run(res / "one", "r740-03", "a", gpus=(2,), samples_per_s=1000.0, start="2026-11-01T10:00:00.000Z")
    write_run(res / "two", "r740-03", "a", gpus=(2,), samples_per_s=920.0, start="2026-12-01T10:00:00.000Z")
    history.import_paths([res / "one"], db_url)
    history.import_paths([res / "two"], db_url)
    d = hdb.open_db(db_url)
    try:
        rows = query.history_rows(d, gpu=gpu_uuid("r740-03", 2))
        assert [r["value"] for r in rows] == [920.0, 1000.0]  # newest first
        assert rows[0]["at"] == dt.datetime(2026, 12, 1, 10, tzinfo=dt.timezone.utc)
        with d.session() as s:
            g = s.scalar(sa.select(Gpu).where(Gpu.uuid == gpu_uuid("r740-03", 2)))
            assert hdb_aware(g.first_seen).month == 11 and hdb_aware(g.last_seen).month == 12
    finally:
        d.close()


def hdb_aware(t):
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t


WRITER = """
import sys
from lab.history import memory as history
added, _ = history.import_paths(sys.argv[2:], sys.argv[1])
print(added.runs, added.runs_present)
"""


def test_two_writers_at_once_lose_nothing(db_url, tmp_path):
    res = tmp_path / "results"
    a = write_sweep(res, "a", {"h1": 2, "h2": 2}, runs_per_host=6)
    b = write_sweep(res, "b", {"h2": 2, "h3": 4}, runs_per_host=6, day=2)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # both start on an empty database (both migrate it) and share sweep b, and so b's GPUs
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, db_url, str(a), str(b)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
        subprocess.Popen(
            [sys.executable, "-c", WRITER, db_url, str(b)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    added = [tuple(map(int, o.split())) for o, _ in outs]
    assert added[0][0] + added[1][0] == 24 and added[0][1] + added[1][1] == 12  # b's 12 runs: once each
    n = counts(db_url)
    assert n["runs"] == 24 and n["run_gpus"] == 24
    assert n["gpus"] == len(
        {(h, i) for h, k in (("h1", 2), ("h2", 2), ("h3", 4)) for i in range(k) if any(s % k == i for s in range(1, 7))}
    )


def test_a_database_of_a_newer_schema_is_refused(db_url):
    hdb.open_db(db_url).close()
    eng = sa.create_engine(db_url.replace("postgresql+psycopg", "postgresql+psycopg"))
    with eng.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    eng.dispose()
    with pytest.raises(ConfigError, match=r"schema revision '0099' is newer than this gpulab knows \(head '0002'\)"):
        hdb.open_db(db_url)


def test_quarantine_release_asks_for_a_passing_validate_since(db_url, tmp_path):
    d = hdb.open_db(db_url)
    try:
        t0 = dt.datetime(2026, 12, 1, 12, tzinfo=dt.timezone.utc)
        target = q.parse_target("h200-01:2")
        entry, added = q.add(d, target, reason="row remap pending", who="ops", action="reset the GPU", at=t0)
        assert added and entry.gpu_index == 2
        assert q.add(d, target, reason="again", who="ops")[1] is False
        q.add(d, q.parse_target("r740-09"), reason="fans", who="ops", at=t0)
        assert q.for_sweep(d, ["h200-01", "r740-09", "other"]) == {
            "h200-01": {"gpus": [2], "reason": "GPU 2: row remap pending"},
            "r740-09": {"gpus": None, "reason": "fans"},
        }
        assert "h200-01 GPU 2" in "\n".join(q.table(q.active(d)))

        with pytest.raises(CheckFailed, match="no validate of h200-01 GPU 2 since it was quarantined"):
            q.release(d, target, who="ops")
        history.import_paths([write_validation(tmp_path / "v1", fail_gpu=2, when="2026-12-01T13:00:00Z")], db_url)
        with pytest.raises(CheckFailed, match="the validate of 2026-12-01 13:00 UTC fails: GPU 2 row remapping"):
            q.release(d, target, who="ops")
        history.import_paths([write_validation(tmp_path / "v2", when="2026-12-01T14:00:00Z")], db_url)
        assert "the validate of 2026-12-01 14:00 UTC passed" in q.release(d, target, who="ops").release_note
        assert q.for_sweep(d, ["h200-01"]) == {}
        with pytest.raises(ConfigError, match="is not quarantined"):
            q.release(d, target, who="ops")
        assert q.release(d, q.parse_target("r740-09"), who="ops", force=True).release_note == "forced"
    finally:
        d.close()


@pytest.mark.parametrize("bad", ["", "a b", "h:99", "h;x", "../h", "-h", "h\x1b[2J", "h\udcff", "x" * 5000])
def test_a_bad_quarantine_target_is_one_line(bad):
    with pytest.raises(ConfigError, match="quarantine") as err:
        q.parse_target(bad)
    assert len(err.value.message) < 200 and err.value.message.isprintable()


@pytest.mark.parametrize("name", ["r740_01", "gpu@lab", "node+1", "_n", "a:b"])
def test_a_host_the_sweep_takes_can_be_quarantined(name):
    from lab.core import fields

    assert fields.host_name(name) == name  # the inventory's and the sweep's grammar
    assert q.parse_target(name) == q.Target(name) and q.parse_target(f"{name}:3") == q.Target(name, 3)
