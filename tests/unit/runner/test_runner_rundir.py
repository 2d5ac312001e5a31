"""Run-directory files: sums, verification, status document."""

import subprocess

import pytest

from runner import rundir


def _dir(tmp_path):
    (tmp_path / "mllog.log").write_text(":::MLLOG {}\n")
    (tmp_path / "status.json").write_text("{}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.txt").write_text("x")
    rundir.write_sums(tmp_path)
    return tmp_path


def test_sums_verify_with_sha256sum(tmp_path):
    d = _dir(tmp_path)
    r = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=d, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sub/x.txt: OK" in r.stdout
    assert rundir.verify(d) == []


def test_verify_names_a_changed_file(tmp_path):
    d = _dir(tmp_path)
    (d / "mllog.log").write_text("changed\n")
    assert any("mllog.log does not match" in p for p in rundir.verify(d))


def test_verify_names_missing_and_unlisted_files(tmp_path):
    d = _dir(tmp_path)
    (d / "sub" / "x.txt").unlink()
    (d / "extra").write_text("e")
    problems = rundir.verify(d)
    assert any("sub/x.txt is missing" in p for p in problems)
    assert any("extra is not listed" in p for p in problems)


def test_incomplete_without_status(tmp_path):
    (tmp_path / "a").write_text("a")
    rundir.write_sums(tmp_path)
    assert rundir.verify(tmp_path) == [f"{tmp_path}: no status.json"]


def test_status_rejects_unknown_outcome():
    with pytest.raises(ValueError):
        rundir.status_document(runner_version="0", workload="w", benchmark="b", framework="pytorch",
                               mode="ttt", scale="tiny", seed=1, precision="fp32", gpus=[],
                               world_size=1, nnodes=1, node_rank=0, start="s", end="e",
                               exit_code=0, outcome="great", reason="", result={})


def test_iso_times_are_utc_milliseconds():
    assert rundir.iso(0) == "1970-01-01T00:00:00.000Z"
    assert rundir.iso(1.5) == "1970-01-01T00:00:01.500Z"
