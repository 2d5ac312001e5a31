"""`invoke report --out` apart from its inputs: never inside a run or sweep folder it reads (the report written
into the evidence, and read as input by the next report), never holding one. One line, exit 2, nothing written
(lab.core.paths.apart). PATH/report, the default, stays the one folder in an input a report writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.commands import report as cmd
from lab.core.errors import ConfigError
from tests.unit import checkout
from report_logs import v05_run, write_lines

ROOT = Path(__file__).resolve().parents[3]
# git status of the checkout: under --processes never beside the test lab's tests (tests/sharing.py)
pytestmark = pytest.mark.checkout


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def sweep(tmp_path) -> Path:
    write_lines(tmp_path / "in" / "sweep" / "host" / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    write_lines(tmp_path / "in" / "other" / "b.log", v05_run("gnmt", epochs=1, epoch_s=1.0, seed=2))
    return tmp_path / "in" / "sweep"


@pytest.mark.parametrize(
    "out, inputs, compare, problem",
    [
        ("sweep", ["sweep"], None, "{out} is the input {i0}"),
        ("sweep/host", ["sweep"], None, "{out} lies inside the input {i0}"),
        ("sweep/host/new", ["sweep"], None, "{out} lies inside the input {i0}"),
        (".", ["sweep"], None, "{out} holds the input {i0}"),
        ("sweep/host", ["sweep/host/a.log"], None, "{out} holds the input {i0}"),
        ("other/x", ["sweep"], "other", "{out} lies inside the input {c}"),
        ("other/report", ["sweep", "other"], None, "{out} lies inside the input {i1}"),  # not the first's default
        ("sweep/report", ["other", "sweep"], None, "{out} lies inside the input {i1}"),
    ],
)
def test_an_out_in_the_inputs_is_refused_and_nothing_is_written(sweep, out, inputs, compare, problem):
    base = sweep.parent
    before = tree(base)
    o, ins, c = str(base / out), [str(base / i) for i in inputs], str(base / compare) if compare else None
    with pytest.raises(ConfigError) as err:
        cmd.report(ins, out=o, formats=("html", "md", "json", "csv"), compare=c)
    said = problem.format(out=o, i0=ins[0], i1=ins[-1], c=c)
    assert err.value.message == f"--out: {said}; give a folder apart from what is read (nothing was written)"
    assert err.value.exit_code == 2 and tree(base) == before


def test_a_link_into_an_input_is_refused(sweep, tmp_path):
    (tmp_path / "link").symlink_to(sweep / "host")
    with pytest.raises(ConfigError, match="lies inside the input"):
        cmd.report([str(sweep)], out=str(tmp_path / "link" / "rep"), formats=("json",))


def test_an_out_apart_and_the_default_spelled_out_are_taken(sweep, tmp_path):
    assert cmd.report([str(sweep)], out=str(tmp_path / "rep"), formats=("json",)).files
    assert cmd.report([str(sweep)], out=str(sweep / "report"), formats=("json",)).files  # PATH/report: the default
    assert (sweep / "report" / "summary.json").is_file()


def test_on_the_command_line(sweep, tmp_path):
    before, git_before = tree(tmp_path), checkout.state()
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_RESULTS=str(tmp_path / "results"))
    p = subprocess.run(
        [sys.executable, "-m", "invoke", "report", str(sweep), "--out", str(sweep / "host")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and lines == [
        f"gpulab: --out: {sweep / 'host'} lies inside the input {sweep}; give a folder apart from what is read "
        "(nothing was written)"
    ], p.stderr[-2000:]
    assert tree(tmp_path) == before and checkout.state() == git_before
