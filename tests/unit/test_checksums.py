"""lab.checksums: the controller's check of fetched run directories."""

import hashlib

from lab import checksums


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
    (run / "mllog.log").write_text(":::MLLOG {\"tampered\": 1}\n")
    (run / "status.json").unlink()
    assert checksums.verify(run) == ["mllog.log: sha256 mismatch", "status.json: listed in SHA256SUMS but missing"]
    (run / "SHA256SUMS").unlink()
    assert checksums.verify(run) == ["SHA256SUMS is missing"]


def test_malformed_or_escaping_sums_lines_are_rejected(tmp_path):
    run = make_run(tmp_path)
    (run / "SHA256SUMS").write_text("abc  mllog.log\n")
    assert "line 1" in checksums.verify(run)[0]
    (run / "SHA256SUMS").write_text("0" * 64 + "  ../../etc/passwd\n")
    assert "line 1" in checksums.verify(run)[0]
