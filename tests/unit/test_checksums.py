"""lab.results.checksums: the controller's check of fetched run directories."""

import hashlib
import subprocess

import pytest

from lab.results import checksums
from lab.results import logreader
from runner import rundir


def make_run(tmp_path):
    (tmp_path / "mllog.log").write_text(":::MLLOG {}\n")
    (tmp_path / "status.json").write_text("{}\n")
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(tmp_path.iterdir())]
    (tmp_path / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_clean_run_verifies(tmp_path):
    assert checksums.verify(make_run(tmp_path)) == []


def test_corruption_missing_file_and_missing_sums_are_found(tmp_path):
    run = make_run(tmp_path)
    (run / "mllog.log").write_text(':::MLLOG {"tampered": 1}\n')
    (run / "status.json").unlink()
    assert checksums.verify(run) == [
        "mllog.log does not match SHA256SUMS (changed after the run)",
        "status.json is listed in SHA256SUMS but missing",
    ]
    (run / "SHA256SUMS").unlink()
    assert checksums.verify(run) == ["SHA256SUMS is missing"]


def test_malformed_or_escaping_sums_lines_are_rejected(tmp_path):
    run = make_run(tmp_path)
    (run / "SHA256SUMS").write_text("abc  mllog.log\n")
    assert "line 1" in checksums.verify(run)[0]
    (run / "SHA256SUMS").write_text("0" * 64 + "  ../../etc/passwd\n")
    assert "line 1" in checksums.verify(run)[0]


def _sha256sum(run, *flags):
    names = sorted(p.name for p in run.iterdir() if p.name != "SHA256SUMS")
    out = subprocess.run(["sha256sum", *flags, *names], cwd=run, capture_output=True, text=True, check=True).stdout
    (run / "SHA256SUMS").write_text(out)
    return out


@pytest.mark.parametrize("flags", [(), ("-b",)])
def test_files_written_by_sha256sum_text_and_binary_verify_everywhere(tmp_path, flags):
    """A SHA256SUMS from the real tool, text or binary (`*` marker) mode, verifies for sweep,
    collect (checksums.verify) and report (logreader.verify_sums) alike, and a change is found by both."""
    run = make_run(tmp_path)
    out = _sha256sum(run, *flags)
    assert (" *" in out) == bool(flags)
    assert checksums.verify(run) == []
    assert logreader.verify_sums(run, keep=("mllog.log",)) == (None, {"mllog.log": b":::MLLOG {}\n"})
    (run / "mllog.log").write_text("changed\n")
    assert checksums.verify(run) == ["mllog.log does not match SHA256SUMS (changed after the run)"]
    assert logreader.verify_sums(run) == ("mllog.log does not match SHA256SUMS (changed after the run)", {})


def test_what_the_runner_writes_the_controller_and_sha256sum_verify(tmp_path):
    """Both sides of the contract agree: runner.rundir writes, sha256sum -c and lab.results.checksums check."""
    run = make_run(tmp_path)
    (run / "sub").mkdir()
    (run / "sub" / "x y.txt").write_text("x")
    rundir.write_sums(run)
    r = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=run, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert checksums.read(run) == {
        n: hashlib.sha256((run / n).read_bytes()).hexdigest() for n in ("mllog.log", "status.json", "sub/x y.txt")
    }
    assert checksums.verify(run) == []
