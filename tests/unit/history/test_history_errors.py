"""A history database that cannot be used is bad input: one line, exit 2, no traceback, and the run
directories and validate outputs stay as they were (they import later)."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from histdata import write_sweep, write_validation
from pgserver import free_port

from lab.history import memory as history
from lab.core.errors import ConfigError
from lab.history import db as hdb
from lab.history import sources

ROOT = Path(__file__).resolve().parents[3]


def invoke(*args, results: Path):
    env = dict(
        os.environ,
        INVOKE_GPULAB_RESULTS=str(results),
        PYTHONPATH=str(ROOT),
        INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"),
    )
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120
    )


def one_line(p) -> str:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != hdb.DEFAULT_FILE:
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def results(tmp_path) -> Path:
    res = tmp_path / "results"
    write_sweep(res, "sw1", {"r740-01": 2})
    write_validation(res / "validate")
    return res


def test_the_cli_imports_then_finds_everything_there(results):
    first = invoke("history.import", str(results), results=results)
    assert first.returncode == 0, first.stderr
    assert re.fullmatch(
        r"2 run\(s\) added, 0 already there; 1 validation\(s\) added \(\d{3} checks\), "
        r"0 already there",
        first.stdout.strip(),
    ), first.stdout
    assert (results / hdb.DEFAULT_FILE).is_file()
    again = invoke("history.import", str(results), results=results)
    assert again.stdout.strip() == "0 run(s) added, 2 already there; 0 validation(s) added (0 checks), 1 already there"
    table = invoke("history", "--host", "r740-01", results=results)
    assert table.returncode == 0 and "ncf throughput" in table.stdout


def test_a_corrupt_database_file_is_one_line_and_nothing_changes(results):
    (results / hdb.DEFAULT_FILE).write_bytes(b"not a database at all\n" * 200)
    before = tree_digest(results) + (results / hdb.DEFAULT_FILE).read_text()
    for args in (("history.import", str(results)), ("history",), ("quarantine",)):
        p = invoke(*args, results=results)
        assert p.returncode == 2
        assert one_line(p).endswith("history.sqlite: not a readable SQLite database (corrupt, or another kind of file)")
    assert tree_digest(results) + (results / hdb.DEFAULT_FILE).read_text() == before


def test_a_newer_schema_is_one_line_through_the_cli(results):
    url = f"sqlite:///{results / hdb.DEFAULT_FILE}"
    hdb.open_db(url).close()
    with sqlite3.connect(results / hdb.DEFAULT_FILE) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'abcdef'")
    p = invoke("history.import", str(results), results=results)
    assert p.returncode == 2 and "schema revision 'abcdef' is newer than this gpulab knows" in one_line(p)


def test_a_locked_database_is_one_line_after_the_wait(results, monkeypatch):
    url = f"sqlite:///{results / hdb.DEFAULT_FILE}"
    hdb.open_db(url).close()
    monkeypatch.setattr(hdb, "LOCK_WAIT_S", 0.5)
    holder = sqlite3.connect(results / hdb.DEFAULT_FILE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ConfigError, match=r"history.sqlite: locked by another process for more than 0.5 s"):
            history.import_paths([results], url)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    added, _ = history.import_paths([results], url)  # the runs were not lost: they import now
    assert added.runs == 2


def test_a_server_that_does_not_answer_is_one_line(results):
    port = free_port()
    url = f"postgresql+psycopg://gpulab:secret@127.0.0.1:{port}/gpulab"
    p = invoke("history.import", str(results), "--url", url, results=results)
    assert p.returncode == 2
    line = one_line(p)
    assert (
        f"history database postgresql+psycopg://gpulab:***@127.0.0.1:{port}/gpulab: the database server does not answer"
        in line
        and "secret" not in line
    )


@pytest.mark.parametrize(
    "url, why",
    [
        ("nonsense", "not an SQLAlchemy URL"),
        ("sqlite://", "a SQLite database needs a file path"),
        ("sqlite:////nonexistent-folder/x.sqlite", "folder /nonexistent-folder does not exist"),
        ("oracle9://h/db", "Can't load plugin"),
    ],
)
def test_a_bad_url_is_one_line(results, url, why):
    p = invoke("quarantine", "--url", url, results=results)
    assert p.returncode == 2 and why in one_line(p)


@pytest.mark.parametrize(
    "args, why",
    [
        (("history.import", "nowhere"), "nowhere: no such file or directory"),
        (("history", "--gpu", "7"), "--gpu INDEX needs --host"),
        (("history", "--gpu", "x;y"), "is neither a GPU UUID"),
        (("history", "--since", "yesterday"), "--since: 'yesterday' is not a date"),
        (("history", "--limit", "0"), "--limit"),
        (("quarantine.add", "r740-01:1"), "--reason is required"),
        (("quarantine.add", "r740-01:77", "--reason", "x"), "GPU index"),
        (("quarantine.release", "r740-01"), "r740-01 is not quarantined"),
    ],
)
def test_bad_input_is_one_line(results, args, why):
    p = invoke(*args, results=results)
    assert p.returncode == 2 and why in one_line(p)


# a validate.json of one host whose GPU '1' is the entry given (%s), with one check that would be imported
GPU_ENTRY = (
    '{"kind": "gpulab-validate", "schema": %d, "generated_at": "2026-12-01T00:00:00Z", '
    '"hosts": {"r740-01": {"gpus": {"1": %%s}}}}' % max(sources.VALIDATE_SCHEMAS)
)
CHECK = '{"check": "memory bandwidth", "verdict": "PASS", "measured": 1}'


def test_a_validate_json_that_does_not_check_is_one_line(results, tmp_path):
    """A GPU entry whose index is no GPU index (1.0, 64, none) was dropped with its checks without a word."""
    bad = tmp_path / "validate.json"
    for text, why in (
        ('{"kind": "gpulab-validate", "schema": 7, "hosts": {}}', "schema 7 is not one"),
        ("[1, 2", "not JSON"),
        ('{"kind": "other"}', "not a validate.json"),
        (
            GPU_ENTRY % '{"index": 1.0, "checks": [%s]}' % CHECK,
            "host r740-01: GPU '1': index 1.0 is not a whole number",
        ),
        (GPU_ENTRY % '{"index": 64, "checks": [%s]}' % CHECK, "GPU '1': index 64 is not a whole number from 0 to 63"),
        (GPU_ENTRY % '{"checks": [%s]}' % CHECK, "GPU '1': index None is not a whole number"),
        (GPU_ENTRY % "[%s]" % CHECK, "GPU '1': is not an object"),
    ):
        bad.write_text(text)
        p = invoke("history.import", str(bad), results=results)
        assert p.returncode == 2 and why in one_line(p)
    assert not (results / hdb.DEFAULT_FILE).exists()  # checked before the database is opened


def test_a_folder_whose_every_run_is_skipped_imports_nothing_and_makes_no_database(results, tmp_path):
    """Everything found was skipped (here every status.json garbled): one line, exit 2, no database file,
    not "0 run(s) added" over a new empty database."""
    broken = tmp_path / "broken"
    write_sweep(broken, "sw2", {"r740-01": 2})
    statuses = sorted(broken.rglob("status.json"))
    assert len(statuses) >= 2
    for s in statuses:
        s.write_text("{not json")
    p = invoke("history.import", str(broken), results=results)
    line = one_line(p)
    assert p.returncode == 2 and line.startswith("gpulab: nothing to import: ") and "more skipped)" in line, line
    assert not (results / hdb.DEFAULT_FILE).exists()


def test_a_quarantine_round_trip_through_the_cli(results):
    assert invoke("history.import", str(results), results=results).returncode == 0
    add = invoke(
        "quarantine.add",
        "r740-01:1",
        "--reason",
        "XID 79 in run s1",
        "--action",
        "reseat",
        "--who",
        "ops",
        results=results,
    )
    assert add.returncode == 0 and add.stdout.strip() == "r740-01 GPU 1: quarantined"
    listed = invoke("quarantine", results=results).stdout
    line = next(ln for ln in listed.splitlines() if ln.startswith("r740-01 GPU 1"))
    assert "XID 79 in run s1" in line and line.endswith("  reseat") and "GPU-" in line  # the action: its column
    refused = invoke("quarantine.release", "r740-01:1", results=results)
    assert refused.returncode == 1 and "no validate of r740-01 GPU 1 since it was quarantined" in one_line(refused)
    forced = invoke("quarantine.release", "r740-01:1", "--force", "--note", "reseated", results=results)
    assert forced.returncode == 0 and forced.stdout.strip() == "r740-01 GPU 1: released (reseated)"
    assert invoke("quarantine", results=results).stdout.strip() == "nothing quarantined"


@pytest.mark.parametrize(
    "args, why",
    [
        # a typo keeps nothing out of a sweep: the sweep plans from the inventory's names
        (("r740-1",), "quarantine: {hosts}: no host r740-1 (hosts: r740-01, r740-02, r740-03, r740-04)"),
        (("r740-01:4",), "quarantine: r740-01:4: {hosts} gives r740-01 4 GPU(s) (gpulab_gpu_count), indices 0 to 3"),
        (("r740-03:3",), "quarantine: r740-03:3: {hosts} gives r740-03 3 GPU(s)"),
        (("r740-01", "--inventory", "{local}"), "quarantine: {local}: no host r740-01 (hosts: localhost)"),
    ],
)
def test_quarantine_add_takes_only_a_host_and_gpu_of_the_inventory(tmp_path, args, why):
    """The reference is the inventory sweeps plan from: --inventory, else gpulab.inventory (here hosts.yml)."""
    inventories = {"hosts": ROOT / "inventory" / "hosts.yml", "local": ROOT / "inventory" / "local.yml"}
    results = tmp_path / "results"
    p = invoke("quarantine.add", *(a.format(**inventories) for a in args), "--reason", "x", results=results)
    assert p.returncode == 2 and one_line(p).startswith("gpulab: " + why.format(**inventories))
    assert not results.exists()  # refused before the database is made
