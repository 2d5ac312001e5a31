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
    lines = (d / "SHA256SUMS").read_text().splitlines()
    assert [rundir.sums_entry(ln)[1] for ln in lines] == ["mllog.log", "status.json", "sub/x.txt"]


@pytest.mark.parametrize(
    "line",
    [
        "abc  mllog.log",
        "0" * 64 + "  ../x",
        "0" * 64 + "  /etc/passwd",
        "0" * 64 + " mllog.log",
        "0" * 64 + "\tmllog.log",
        "\\" + "0" * 64 + "  a\\nb",
    ],
)
def test_sums_grammar_rejects_malformed_and_escaping_lines(line):
    assert rundir.sums_entry(line) is None


def test_sums_grammar_takes_text_and_binary_markers():
    assert rundir.sums_entry("A" * 64 + "  a b") == ("a" * 64, "a b")
    assert rundir.sums_entry("a" * 64 + " *sub/x") == ("a" * 64, "sub/x")


def test_status_rejects_unknown_outcome():
    with pytest.raises(ValueError):
        rundir.status_document(
            runner_version="0",
            workload="w",
            benchmark="b",
            framework="pytorch",
            mode="ttt",
            scale="tiny",
            seed=1,
            precision="fp32",
            gpus=[],
            world_size=1,
            nnodes=1,
            node_rank=0,
            start="s",
            end="e",
            exit_code=0,
            outcome="great",
            reason="",
            result={},
        )


def test_iso_times_are_utc_milliseconds():
    assert rundir.iso(0) == "1970-01-01T00:00:00.000Z"
    assert rundir.iso(1.5) == "1970-01-01T00:00:01.500Z"
