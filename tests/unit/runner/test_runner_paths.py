"""The runner's path options checked where they enter (runner.cli.path_problem): long names, link loops and
system folders are one line, exit 2, and nothing is created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.cli import SYSTEM_TREES, path_problem

ROOT = Path(__file__).resolve().parents[3]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name_len=st.integers(1, 700), depth=st.integers(1, 3), loop=st.booleans(), made=st.booleans())
def test_names_and_loops(tmp_path, name_len, depth, loop, made):
    link = tmp_path / "loop"
    if not link.is_symlink():
        link.symlink_to("loop")
    path = str(link) + "/x" * depth if loop else str(tmp_path) + ("/" + "n" * name_len) * depth
    problem = path_problem(path, made_here=made)
    if loop or name_len > 255:
        assert problem and len(problem) < 160 and "\n" not in problem
    else:
        assert problem is None


@settings(max_examples=40, deadline=None)
@given(tree=st.sampled_from(SYSTEM_TREES), below=st.lists(st.sampled_from(["x", "gpulab", "1"]), max_size=2))
def test_no_run_folder_in_a_system_tree(tree, below):
    assert "a system folder" in path_problem("/".join([tree, *below]), made_here=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["run", "ncf", "--scale", "tiny", "--out", "{tmp}/run", "--cache-dir", "/proc/x"],
            "runner run: --cache-dir '/proc/x': a system folder",
        ),
        (
            ["run", "ncf", "--scale", "tiny", "--out", "/sys/gpulab-run"],
            "runner run: --out '/sys/gpulab-run': a system",
        ),
        (["run", "ncf", "--scale", "tiny", "--out", "{tmp}/" + "r" * 256], "a name longer than 255 bytes"),
        (["run", "ncf", "--scale", "tiny", "--out", "{tmp}/run", "--data", "{tmp}/loop"], "a symbolic link loop"),
        (["datasets", "check", "ncf", "--data", "{tmp}/loop"], "runner datasets check: --data"),
        (["datasets", "check", "ncf", "--data", "/" + "d" * 300], "a name longer than 255 bytes"),
    ],
)
def test_on_the_command_line_nothing_is_created(tmp_path, args, message):
    (tmp_path / "loop").symlink_to("loop")
    argv = [a.format(tmp=tmp_path) for a in args]
    r = subprocess.run(
        [sys.executable, "-m", "runner", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp_path)),
        timeout=120,
    )
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop"] and not os.path.lexists("/proc/x")
