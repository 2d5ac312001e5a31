"""`python -m runner run` with values out of range or an --out that cannot be: one line, exit 2, nothing
started and nothing written (no process count of 100000, no traceback under /proc or below a file)."""

from __future__ import annotations

import pytest

from runner_helpers import runner


@pytest.mark.parametrize(
    "args, words",
    [
        (["--gpus", "0", "--cpu-procs", "100000"], "--cpu-procs 100000: must be in 1.."),
        (["--max-minutes", "inf"], "--max-minutes inf: must be in"),
        (["--max-minutes", "nan"], "--max-minutes nan"),
        (["--max-minutes", "1e9"], "--max-minutes 1000000000.0: must be in"),
        (["--measure-seconds", "1e12", "--mode", "throughput"], "--measure-seconds"),
        (["--max-epochs", "99999999"], "--max-epochs 99999999: must be in"),
        (["--warmup-steps", "99999999999"], "--warmup-steps"),
        (["--nnodes", "100000", "--rdzv-endpoint", "h:1"], "--nnodes 100000: must be in"),
        (["--seed", "99999999999999"], "--seed 99999999999999"),
    ],
)
def test_values_out_of_range_are_refused_before_anything_starts(tmp_path, args, words):
    out = tmp_path / "run"
    r = runner("run", "ncf", "--scale", "tiny", *args, "--out", str(out), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists() and r.stdout == ""  # the run directory comes first: nothing was started


@pytest.mark.parametrize(
    "where, words",
    [
        ("below-a-file", "is not a folder"),
        ("/proc/gpulab-run", "a system folder; give a folder of its own"),  # runner.cli.path_problem
        ("/proc/self/gpulab-run", "a system folder; give a folder of its own"),
    ],
)
def test_an_out_that_cannot_be_a_run_directory_is_refused(tmp_path, where, words):
    if where == "below-a-file":
        (tmp_path / "file").write_text("x")
        where = str(tmp_path / "file" / "run")
    r = runner("run", "ncf", "--scale", "tiny", "--gpus", "0", "--out", where, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
