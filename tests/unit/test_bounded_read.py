"""Reading with bounds: a FIFO, a link to /dev/zero, a binary or oversized file never hangs, eats memory or
gives a traceback; the run it belongs to is skipped with the reason (report) or has a problem (collect)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.core import bounded
from lab.results import checksums
from lab.core import limits
import rundirs

ROOT = Path(__file__).resolve().parents[2]


def write_run(d: Path, seed: int = 1) -> Path:
    """A throughput run with a telemetry file (rundirs.write_run)."""
    return rundirs.write_run(
        d, seed=seed, mode="throughput", reason="measured", result={"samples_per_s": 100.0}, telemetry=True
    )


def fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def link(path: Path, target: str) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(target)


# each case: how a sound run directory is spoilt, and what the skip reason says
SPOILERS = {
    "mllog-fifo": (lambda d: fifo(d / "mllog.log"), "mllog.log is a FIFO, not a regular file"),
    "mllog-devzero": (lambda d: link(d / "mllog.log", "/dev/zero"), "mllog.log leads outside"),
    "sums-binary": (lambda d: (d / "SHA256SUMS").write_bytes(b"\xff\xfe\x00" * 100), "SHA256SUMS is not UTF-8"),
    "sums-fifo": (lambda d: fifo(d / "SHA256SUMS"), "SHA256SUMS is a FIFO"),
    "status-fifo": (lambda d: fifo(d / "status.json"), "status.json is a FIFO"),
    "status-devzero": (lambda d: link(d / "status.json", "/dev/zero"), "status.json leads outside"),
    "status-outside": (lambda d: link(d / "status.json", "/etc/hostname"), "status.json leads outside"),
    "telemetry-fifo": (lambda d: fifo(d / "telemetry.csv"), "telemetry.csv is a FIFO"),
    "stdout-devzero": (lambda d: link(d / "stdout.log", "/dev/zero"), None),  # not listed, not read: no effect
}


@pytest.fixture
def spoilt(tmp_path):
    sweep = tmp_path / "results" / "S"
    good = write_run(sweep / "here" / "ncf-throughput-tiny-cpu-s1")
    bad = {}
    for i, (case, (spoil, _)) in enumerate(sorted(SPOILERS.items()), 2):
        d = write_run(sweep / "here" / f"ncf-throughput-tiny-cpu-s{i}", seed=i)
        spoil(d)
        bad[case] = d
    return sweep, good, bad


def test_report_skips_each_spoilt_run_with_its_reason_and_never_hangs(spoilt, tmp_path):
    sweep, good, bad = spoilt
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "invoke", "report", str(sweep), "--format", "json", "--out", str(tmp_path / "rep")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # a FIFO read would block forever, /dev/zero would fill the memory
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    doc = json.loads((tmp_path / "rep" / "summary.json").read_text())
    skipped = {
        Path(s["source"]).name if Path(s["source"]).name.startswith("ncf") else Path(s["source"]).parent.name: s[
            "reason"
        ]
        for s in doc["skipped"]
    }
    for case, d in bad.items():
        why = SPOILERS[case][1]
        if why is None:
            assert d.name not in skipped
            continue
        assert why in skipped.get(d.name, ""), (case, skipped)
    assert good.name not in skipped


@pytest.mark.parametrize("case", ["mllog-fifo", "mllog-devzero", "sums-binary", "sums-fifo", "status-fifo"])
def test_collect_verification_reports_a_problem_instead_of_blocking(tmp_path, case):
    d = write_run(tmp_path / "run")
    SPOILERS[case][0](d)
    problems = checksums.verify(d)
    assert problems and all("\n" not in p for p in problems), problems


def test_bounded_reader_limits(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 1025 + b"{}")
    with pytest.raises(bounded.Unreadable, match="more than the 1024 bytes"):
        bounded.read_bytes(big, limit=1024)
    assert bounded.read_json(big, limit=4096) == {}
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(bounded.Unreadable, match="not JSON"):
        bounded.read_json(deep, limit=limits.JSON_BYTES)
    with pytest.raises(bounded.Missing):
        bounded.read_bytes(tmp_path / "absent")
    with pytest.raises(bounded.Unreadable, match="is a folder"):
        bounded.read_bytes(tmp_path)
    with pytest.raises(bounded.Unreadable, match="character device"):
        bounded.read_bytes("/dev/zero")
    inside = tmp_path / "root"
    inside.mkdir()
    (inside / "ok").write_text("x")
    (inside / "alias").symlink_to(inside / "ok")  # a link that stays inside its root is read
    assert bounded.read_text(inside / "alias", root=inside) == "x"
    (inside / "escape").symlink_to(big)
    with pytest.raises(bounded.Unreadable, match="leads outside"):
        bounded.read_text(inside / "escape", root=inside)
