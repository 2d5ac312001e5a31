"""The terminal: verdicts in colour only where colour is wanted (a terminal, no NO_COLOR), the word always there;
numbers whole with their units in `invoke history`; aligned columns in `invoke quarantine`."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import pty
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.core import term
from lab.history import quarantine, query

ROOT = Path(__file__).resolve().parents[1].parent


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize(
    "value, text",
    [
        (53520.0, "53,520"),
        (5.352e4, "53,520"),
        (1234567, "1,234,567"),
        (12.345, "12.35"),
        (0.0123, "0.01230"),
        (0, "0"),
        (-2.5, "-2.500"),
        (999.94, "999.9"),
        (3, "3"),
        (1.5e-7, "0.0000001500"),
    ],
)
def test_numbers_are_written_out(value, text):
    assert term.number(value) == text and "e" not in term.number(value)


def test_colour_only_on_a_terminal_that_wants_it(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert term.verdict("FAIL", 6, Tty()) == "\x1b[1;31mFAIL  \x1b[0m"
    assert term.verdict("PASS", 0, io.StringIO()) == "PASS"  # a pipe: the word alone
    monkeypatch.setenv("NO_COLOR", "1")
    assert term.verdict("WARN", 4, Tty()) == "WARN"
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert term.verdict("PASS", 4, Tty()) == "PASS"


def rows():
    at = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.timezone.utc)
    return [
        dict(
            at=at,
            host="r740-01",
            gpu=2,
            uuid=None,
            metric="resnet50 throughput (images per second, fp16)",
            value=53520.0,
            unit="samples/s",
            verdict="PASS",
            stack=None,
            source="sweep demo-20261201-100000",
        ),
        dict(
            at=at,
            host="r740-01",
            gpu=2,
            uuid=None,
            metric="ECC corrected",
            value=3,
            unit=None,
            verdict="WARN",
            stack=None,
            source="validate standard",
        ),
        dict(
            at=at,
            host="r740-01",
            gpu=None,
            uuid=None,
            metric="GPU present",
            value=None,
            unit=None,
            verdict="FAIL",
            stack=None,
            source="sweep health gate",
        ),
    ]


def test_history_shows_each_value_whole_with_its_unit():
    lines = query.table(rows())
    text = "\n".join(lines)
    assert "53,520 samples/s" in text and "e+" not in text
    assert "resnet50 throughput (images per second, fp16)" in text and "sweep demo-20261201-100000" in text
    col = lines[0].index("verdict")
    assert all(line[col : col + 4] in ("verd", "PASS", "WARN", "FAIL") for line in lines)
    col = lines[0].index("from")
    assert [line[col:] for line in lines] == [
        "from",
        "sweep demo-20261201-100000",
        "validate standard",
        "sweep health gate",
    ]


def test_quarantine_columns_line_up():
    at = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.timezone.utc)
    entries = [
        SimpleNamespace(
            host="r740-03",
            gpu_index=2,
            added_at=at,
            who="gpulab validate",
            reason="validate: row remapping: row remap pending",
            action="reset_gpu: reset it",
            gpu_uuid="GPU-1",
        ),
        SimpleNamespace(
            host="a-much-longer-host-name-01",
            gpu_index=None,
            added_at=at,
            who="ops",
            reason="fan",
            action=None,
            gpu_uuid=None,
        ),
    ]
    lines = quarantine.table(entries)
    for word in ("since (UTC)", "who", "reason", "action"):
        col = lines[0].index(word)
        assert all(line[col - 2 : col] == "  " and line[col] != " " for line in lines), (word, lines)
    assert "gpulab validate" in lines[1] and "reset_gpu: reset it" in lines[1] and lines[2].endswith("-")


def test_invoke_history_in_colour_on_a_terminal_only(tmp_path):
    """`invoke history` on a pseudo-terminal: coloured verdicts; with NO_COLOR, or into a pipe: none."""
    from lab.history import db as hdb
    from lab.history.sources import CheckRecord, ValidationRecord
    from lab.history.store import add_validation

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    database = hdb.open_db(url)
    try:
        at = dt.datetime.now(dt.timezone.utc)
        add_validation(
            database,
            ValidationRecord(
                key=hashlib.sha256(b"t").hexdigest(),
                source="v",
                at=at,
                level="quick",
                verdict="FAIL",
                checks=[
                    CheckRecord(host="h1", name="GPU present", verdict="FAIL", value=0, at=at),
                    CheckRecord(host="h1", name="h2d bandwidth", verdict="PASS", value=24512.5, unit="MB/s", at=at),
                ],
            ),
        )
    finally:
        database.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_") and k != "NO_COLOR"}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm", COLUMNS="200")

    def on_pty(extra):
        main, sub = pty.openpty()
        p = subprocess.Popen(
            [sys.executable, "-m", "invoke", "history", "--url", url],
            cwd=ROOT,
            stdout=sub,
            stderr=subprocess.PIPE,
            env={**env, **extra},
        )
        os.close(sub)
        out = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        os.close(main)
        assert p.wait(timeout=120) == 0, p.stderr.read()
        return out.decode()

    coloured = on_pty({})
    assert "\x1b[1;31mFAIL" in coloured and "\x1b[32mPASS" in coloured and "24,512 MB/s" in coloured
    plain = on_pty({"NO_COLOR": "1"})
    assert "\x1b[" not in plain and "FAIL" in plain and "PASS" in plain
    piped = subprocess.run(
        [sys.executable, "-m", "invoke", "history", "--url", url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.returncode == 0 and "\x1b[" not in piped.stdout and "FAIL" in piped.stdout


def test_the_live_sweep_table_names_each_run_once_with_its_eta():
    """The live table: the run's name in one column (not again in what it does), elapsed and the time left by
    its estimate; a run past it says so; one without an estimate says that."""
    import time as _time

    from rich.console import Console

    from lab.sweep import progress as prog

    p = prog.Progress({"h1": 2, "h2": 1}, live=False, stream=io.StringIO())
    p.estimates["ncf-ttt-tiny-cpu-s1"] = 600.0
    p.run_started("h1", 1, 2, "ncf-ttt-tiny-cpu-s1")
    p.status("h1", "running")
    p.run_started("h2", 1, 1, "gnmt-ttt-tiny-cpu-s1")
    p.rows["h2"]["since"] = _time.monotonic() - 120
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(p._table())
    text = out.getvalue()
    (h1,) = [ln for ln in text.splitlines() if " h1 " in ln]
    assert h1.count("ncf-ttt-tiny-cpu-s1") == 1 and "running" in h1 and "10 min left" in h1 and "1 of 2" in h1
    (h2,) = [ln for ln in text.splitlines() if " h2 " in ln]
    assert "no estimate" in h2 and "2 min" in h2
    p.estimates["gnmt-ttt-tiny-cpu-s1"] = 60.0
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(p._table())
    assert "past its estimate" in out.getvalue()
    assert "(estimate 10 min)" in p.stream.getvalue()


def test_the_live_table_reads_the_running_epoch_from_the_runs_mllog(tmp_path):
    """lab.sweep.hostrun.last_epoch: one read-only command on the host (here this machine) for the live table."""
    from lab.hosts import inventory, remote
    from lab.sweep import progress as prog
    from lab.sweep.hostrun import last_epoch

    run = tmp_path / "run"
    run.mkdir()
    host = inventory.load(ROOT / "inventory" / "local.yml").select()[0]
    with remote.connect(host) as r:
        assert last_epoch(r, str(run)) is None  # no log yet
        (run / "mllog.log").write_text(
            ':::MLLOG {"key": "epoch_start", "value": null, "metadata": {"epoch_num": 1}}\n'
            ':::MLLOG {"key": "eval_accuracy", "value": 0.5, "metadata": {"epoch_num": 1}}\n'
            ':::MLLOG {"key": "epoch_start", "value": null, "metadata": {"epoch_num": 2}}\n'
        )
        assert last_epoch(r, str(run)) == 2
    p = prog.Progress({"h1": 1}, live=False, stream=io.StringIO())
    p.run_started("h1", 1, 1, "ncf-ttt-tiny-cpu-s1")
    p.epoch("h1", 2)
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(p._table())
    (row,) = [ln for ln in out.getvalue().splitlines() if " h1 " in ln]
    assert " 2 " in row and "epoch" in out.getvalue()


def test_a_hosts_words_in_the_sweep_tables_are_text_not_markup_or_escapes():
    """A run's reason and a unit's wait message come from hosts and Slurm: rich markup in them ('[/]' raised
    MarkupError at the end of a sweep, '[bold]' vanished) and escape sequences are shown as written."""
    from types import SimpleNamespace

    from rich.console import Console

    from lab.sweep import progress as prog

    words = "exit 1: [/] [bold]x\x1b[31m"
    run = SimpleNamespace(
        nodes=None, host="h1", run_id="ncf-1", state="failed", outcome="failed", gpu_ids=[0], reason=words
    )
    out = io.StringIO()
    prog.final_table([run], Console(file=out, width=200, color_system=None))
    assert "exit 1: [/] [bold]x\\x1b[31m" in out.getvalue() and "\x1b" not in out.getvalue()
    p = prog.Progress({"h1": 1}, live=False, stream=io.StringIO())
    p.status("h1", "waiting for h1: " + words)
    live = io.StringIO()
    Console(file=live, width=200, color_system=None).print(p._table())
    assert "[/] [bold]x\\x1b[31m" in live.getvalue() and "\x1b" not in p.stream.getvalue() + live.getvalue()
