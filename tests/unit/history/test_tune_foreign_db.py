"""`invoke tune` keeps its study in SQLite beside the history (results/history-tune.sqlite): a file there that
Optuna did not make is another program's (or a history database copied there), and Optuna wrote its own
tables into it. Now that is one line naming that file, exit 2, and the file is left as it was; a corrupt one
is named too (the line named results/history.sqlite, a file that need not exist). A study's trials are read
back as any input too: their stored results of another shape are left out of the report, never a traceback."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


def tune(tmp_path: Path) -> subprocess.CompletedProcess:
    inv = tmp_path / "inventory.yml"
    host = {"ansible_connection": "local", "gpulab_gpu_model": "cpu", "gpulab_gpu_count": 0}
    host |= {"gpulab_stack": "current", "gpulab_workdir": str(tmp_path / "workdir")}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"here": host}}}))
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_RESULTS=str(tmp_path / "results"))
    args = ["tune", "ncf", "--inventory", inv, "--host", "here", "--scale", "tiny", "--trials", "1", "--seeds", "2"]
    return subprocess.run(
        [sys.executable, "-m", "invoke", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line(p) -> str:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stdout + p.stderr
    return lines[0]


def test_a_foreign_sqlite_file_where_the_study_lives_is_refused_and_left_as_it_was(tmp_path):
    study = tmp_path / "results" / "history-tune.sqlite"
    study.parent.mkdir()
    with sqlite3.connect(study) as db:
        db.execute("CREATE TABLE precious (x)")
        db.execute("INSERT INTO precious VALUES (1)")
    db.close()
    before = study.read_bytes()
    line = one_line(tune(tmp_path))
    assert line == (
        f"gpulab: tune study database (sqlite:///{study}): holds tables Optuna did not make (precious): "
        "not a gpulab tune study; move it away"
    )
    assert study.read_bytes() == before
    assert sorted(os.listdir(study.parent)) == ["history-tune.sqlite"]
    assert not (tmp_path / "workdir").exists()


@pytest.mark.parametrize("content", [b"not a database\n", b"SQLite format 3\x00" + b"\xff" * 200])
def test_a_corrupt_study_file_is_named_itself(tmp_path, content):
    study = tmp_path / "results" / "history-tune.sqlite"
    study.parent.mkdir()
    study.write_bytes(content)
    line = one_line(tune(tmp_path))
    assert line.startswith(f"gpulab: tune study database (sqlite:///{study}): "), line
    assert study.read_bytes() == content and sorted(os.listdir(study.parent)) == ["history-tune.sqlite"]


@pytest.mark.parametrize(
    "attrs",
    [
        {"gpulab_seeds": "bogus"},
        {"gpulab_seeds": [{"seed": "1", "reached": "yes", "epochs": {}}, 7, None]},
        {"gpulab_seeds": [{"seed": 1, "reached": True, "epochs": "many"}], "gpulab_summary": "not an object"},
    ],
    ids=["seeds text", "seeds of other shapes", "epochs text, summary text"],
)
def test_a_study_whose_trials_another_writer_stored_is_reported_without_a_traceback(tmp_path, attrs):
    """The study is read back from its database as any input: a trial's per-seed results of another shape
    ended the tune report half-written (report.json, no report.md) in a TypeError traceback."""
    import optuna

    study = tmp_path / "results" / "history-tune.sqlite"
    study.parent.mkdir()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(storage=f"sqlite:///{study}", study_name="tune-ncf-tiny-here", direction="minimize")
    s.add_trial(
        optuna.trial.create_trial(params={}, distributions={}, value=1.0, user_attrs={"gpulab_baseline": True, **attrs})
    )
    p = tune(tmp_path)  # the study has its one trial: tune writes its report and starts nothing
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    folder = tmp_path / "results" / "tune-ncf-tiny-here"
    assert sorted(os.listdir(folder)) == ["recipe.yml", "report.json", "report.md"]
    assert "| reference recipe (trial 0) | - | - | - | - | 1 |" in (folder / "report.md").read_text()
    assert not (tmp_path / "workdir").exists()


@pytest.mark.parametrize(
    "attrs",
    [{"gpulab_heartbeat": "x"}, {"gpulab_heartbeat": {"at": 0, "owner": "elsewhere:1"}, "gpulab_sweep": "../x"}],
    ids=["heartbeat text", "stale, sweep out of its folder"],
)
def test_a_running_trial_another_writer_left_is_one_line_and_nothing_is_started(tmp_path, attrs):
    """A running trial gpulab did not start (no sweep name and epoch cap of its own) looked stale and was
    resumed: an AttributeError or KeyError traceback. Now it is refused before anything is written or run."""
    import optuna

    study = tmp_path / "results" / "history-tune.sqlite"
    study.parent.mkdir()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(storage=f"sqlite:///{study}", study_name="tune-ncf-tiny-here", direction="minimize")
    running = optuna.trial.TrialState.RUNNING
    s.add_trial(optuna.trial.create_trial(params={}, distributions={}, state=running, user_attrs=attrs))
    line = one_line(tune(tmp_path))
    assert line.startswith("gpulab: tune tune-ncf-tiny-here: trial 0 of the study's database has no sweep"), line
    assert s.get_trials()[0].user_attrs == attrs and s.get_trials()[0].state == running
    assert not (tmp_path / "workdir").exists()
