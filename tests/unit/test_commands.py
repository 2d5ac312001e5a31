"""The lab's commands as functions (lab.commands): a dry run, a report and a validate's baseline start without
Invoke, from plain arguments, and give what the task prints as typed results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.commands import report as report_cmd, sweep as sweep_cmd
from lab.core.errors import ConfigError
from lab.history import quarantine as q
from lab.history.db import open_db
from lab.hosts import inventory
from lab.sweep.hostrun import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "hosts.yml"


def t4_hosts():
    return inventory.load(EXAMPLE).select(device="t4")  # r740-01, r740-02: 4x T4 each (never contacted)


def test_a_dry_run_starts_without_invoke(tmp_path):
    """The entry point called from a plain Python process: Invoke is never imported, nothing is written, and the
    plan is the one `invoke sweep --device t4 --mode throughput --dry-run` prints (tests/unit/test_study.py)."""
    code = f"""
import json, sys
from pathlib import Path
from lab.commands import sweep, tune   # tune too: neither imports Invoke
from lab.hosts import inventory
from lab.sweep.hostrun import Settings
hosts = inventory.load({str(EXAMPLE)!r}).select(device="t4")
req = sweep.Request(workloads="all", gpus="all", seeds="auto", mode="throughput", scale="full", name="fig2")
out = sweep.dry_run(hosts, req, results_dir=Path({str(tmp_path / "results")!r}),
                    history_url="sqlite:///{tmp_path / "results" / "history.sqlite"}", settings=Settings())
print(json.dumps({{"lines": out.lines, "refused": out.refused, "name": out.name,
                  "invoke": sorted(m for m in sys.modules if m.split(".")[0] == "invoke")}}))
"""
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["invoke"] == [] and got["refused"] is None and got["name"] == "fig2"
    assert got["lines"][0] == "sweep fig2: mode throughput, scale full; 48 runs on 2 unit(s)"
    assert got["lines"][-1] == "48 runs planned for sweep fig2 on 2 unit(s); nothing started (--dry-run)"
    assert not (tmp_path / "results").exists()  # a dry run writes nothing, the history's folder included


@pytest.mark.parametrize(
    "kw, says",
    [
        (dict(gpus="9"), "--gpus: 9 GPUs asked but r740-01 has 4"),
        (dict(seeds=0), "--seeds: 0 is not a whole number from 1 to 1000 seeds"),
        (dict(backend="nope"), "--backend: 'nope' is not one of ssh, slurm, auto"),
        (dict(name="../x"), "--name: '../x' is not a study name"),
        (dict(scale="huge"), "--scale: 'huge' is not one of"),
    ],
)
def test_a_tune_refuses_bad_input_in_one_line_before_anything_is_written(tmp_path, kw, says):
    """lab.commands.tune.tune (what `invoke tune` calls) from plain arguments: every check comes before the
    study's database or folder is made."""
    from lab.commands import tune as tune_cmd

    with pytest.raises(ConfigError) as got:
        tune_cmd.tune(
            t4_hosts(),
            "ncf",
            results_dir=tmp_path / "results",
            history_url=f"sqlite:///{tmp_path / 'db' / 'history.sqlite'}",
            make_folder=True,
            **kw,
        )
    assert got.value.message.startswith(says) and "\n" not in got.value.message, got.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_dry_run_plans_around_the_quarantine_and_refuses_when_none_is_left(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    db = open_db(url)
    try:
        q.add(db, q.parse_target("r740-01:2"), reason="row remap pending", who="ops")
        q.add(db, q.parse_target("r740-02"), reason="fans", who="ops")
    finally:
        db.close()
    req = sweep_cmd.Request(workloads="ncf", gpus="all", seeds=1, mode="throughput", scale="full", name="q1")
    out = sweep_cmd.dry_run(t4_hosts(), req, results_dir=tmp_path, history_url=url, settings=Settings())
    assert out.lines[:3] == [
        "sweep q1: mode throughput, scale full; 3 runs on 1 unit(s)",
        "quarantine: r740-01: GPU(s) 2 quarantined (GPU 2: row remap pending): runs use GPU(s) 0,1,3",
        "quarantine: r740-02: skipped: quarantined (fans)",
    ]
    hosts = [h for h in t4_hosts() if h.name == "r740-02"]
    with pytest.raises(ConfigError, match="sweep q1: every selected host is quarantined: r740-02: skipped"):
        sweep_cmd.dry_run(hosts, req, results_dir=tmp_path, history_url=url, settings=Settings())
    with pytest.raises(ConfigError, match="--mode: 'fast' is not one of ttt, throughput"):  # bad input: one line
        sweep_cmd.dry_run(
            hosts,
            sweep_cmd.Request(workloads="ncf", mode="fast"),
            results_dir=tmp_path,
            history_url="sqlite:///" + str(tmp_path / "none" / "h.sqlite"),
            settings=Settings(),
        )
    assert not (tmp_path / "none").exists()  # and nothing written, the history's folder included


def test_a_request_left_empty_is_the_reference_study():
    """None is gpulab's setting: the study's six benchmarks, every GPU count, one seed in throughput mode, full
    scale (as `invoke sweep --mode throughput` with no other option)."""
    out = sweep_cmd.dry_run(
        t4_hosts(),
        sweep_cmd.Request(mode="throughput", name="s0"),
        results_dir=None,
        history_url="sqlite:////nonexistent/history.sqlite",
        settings=Settings(),
    )
    assert out.lines[0] == "sweep s0: mode throughput, scale full; 48 runs on 2 unit(s)"


def test_a_report_with_no_input_is_one_line_and_writes_nothing(tmp_path):
    with pytest.raises(ConfigError, match=r"report: ' , ': give a sweep directory"):
        report_cmd.report([" ", " "], out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_quarantine_and_history_commands_run_without_invoke(tmp_path):
    """add, list, release and show as functions: lines to print, the default database made only by a command that
    adds, bad input refused before anything is written."""
    from lab.commands import history as history_cmd

    url = f"sqlite:///{tmp_path / 'results' / 'history.sqlite'}"
    with pytest.raises(ConfigError, match="is not HOST or HOST:GPU_INDEX"):  # bad input: no database made
        history_cmd.quarantine_add(url, "r740 01", default=True, reason="XID 79", who="ops", echo=print)
    # a command that reads does not make the default database either
    assert history_cmd.quarantine_list(url, default=True) == ["nothing quarantined"]
    assert not (tmp_path / "results").exists()
    said = []
    done = history_cmd.quarantine_add(url, "r740-01:1", default=True, reason="XID 79", who="ops", echo=said.append)
    assert (done.target, done.added, done.slurm) == ("r740-01 GPU 1", True, None) and said == [
        "r740-01 GPU 1: quarantined"
    ]
    again = history_cmd.quarantine_add(url, "r740-01:1", default=True, reason="XID 79", who="ops", echo=said.append)
    assert not again.added and said[-1].startswith("r740-01 GPU 1: already quarantined since ")
    listed = history_cmd.quarantine_list(url, default=True, backend="ssh")
    assert any("r740-01" in line and "XID 79" in line for line in listed)
    released = history_cmd.quarantine_release(
        url, "r740-01:1", default=True, force=True, note="reseated", who="ops", echo=said.append
    )
    assert released.note and said[-1] == f"r740-01 GPU 1: released ({released.note})"
    assert history_cmd.show(url, default=True, host="r740-01") == history_cmd.show(url, default=True, host="r740-01")
    with pytest.raises(ConfigError, match="history.import: give a results folder"):
        history_cmd.import_files([" "], url)
