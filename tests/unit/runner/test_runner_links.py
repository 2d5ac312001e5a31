"""The runner's own writes never go through a planted link (issue 27, class 5).

Every file of a run directory (stdout.log, mllog.log, telemetry.csv,
manifest.json, status.json, SHA256SUMS) and the burn-in's documents are
opened with O_NOFOLLOW and must be regular files, or written to a fresh
temporary name and renamed into place; a link at --out itself is bad input
(exit 2, nothing written, nothing started). What a planted link points at is
left as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import rundir
from runner.mllog import MLLog

ROOT = Path(__file__).resolve().parents[3]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PLANTS = ("link-to-file", "link-to-folder", "dangling", "loop", "fifo", "folder")


def _fresh(tmp: Path) -> tuple[Path, Path]:
    import shutil

    for p in list(tmp.iterdir()):
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    outside, run = tmp / "outside", tmp / "run"
    (outside / "victim-dir").mkdir(parents=True)
    (outside / "victim.txt").write_text("keep me\n")
    run.mkdir()
    return outside, run


def _plant(where: Path, kind: str, outside: Path) -> None:
    if kind == "link-to-file":
        where.symlink_to(outside / "victim.txt")
    elif kind == "link-to-folder":
        where.symlink_to(outside / "victim-dir")
    elif kind == "dangling":
        where.symlink_to(outside / "not-there")
    elif kind == "loop":
        where.symlink_to(where.name)
    elif kind == "fifo":
        os.mkfifo(where)
    else:
        where.mkdir()


def _outside(outside: Path) -> dict:
    return {str(p.relative_to(outside)): (p.read_bytes() if p.is_file() else None) for p in outside.rglob("*")}


def _bounded(fn, seconds: float = 10.0):
    """Run ``fn`` in a thread and fail if it blocks (a FIFO opened for writing blocks without O_NONBLOCK)."""
    out: list = []

    def target():
        try:
            out.append(("ok", fn()))
        except BaseException as exc:  # handed back to the test
            out.append(("raised", exc))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert out, "blocked"
    return out[0]


@FAST
@given(name=st.sampled_from(rundir.RUN_FILES), kind=st.sampled_from(PLANTS), append=st.booleans())
def test_a_run_file_is_never_opened_through_a_planted_entry(tmp_path, name, kind, append):
    outside, run = _fresh(tmp_path)
    _plant(run / name, kind, outside)
    before = _outside(outside)
    how, exc = _bounded(lambda: rundir.open_file(run / name, append=append).close())
    assert how == "raised" and isinstance(exc, OSError)
    assert rundir.run_dir_problem(run) and name in rundir.run_dir_problem(run)
    assert _outside(outside) == before


@FAST
@given(
    name=st.sampled_from([rundir.MANIFEST, rundir.STATUS, rundir.SUMS]),
    kind=st.sampled_from(["link-to-file", "link-to-folder", "dangling", "loop"]),
)
def test_a_whole_file_replaces_a_link_at_its_name_and_writes_nothing_through_it(tmp_path, name, kind):
    outside, run = _fresh(tmp_path)
    _plant(run / name, kind, outside)
    (run / "x.log").write_text("x\n")
    before = _outside(outside)
    if name == rundir.SUMS:
        rundir.write_sums(run)
    else:
        rundir.write_json(run / name, {"a": 1})
    assert (run / name).is_file() and not (run / name).is_symlink()
    assert _outside(outside) == before
    assert sorted(os.listdir(run)) == sorted([name, "x.log"])  # no temporary left behind


def test_sha256sums_lists_no_link(tmp_path):
    outside, run = _fresh(tmp_path)
    (run / "mllog.log").write_text("a\n")
    (run / "stolen").symlink_to(outside / "victim.txt")
    rundir.write_sums(run)
    assert [line.split()[1] for line in (run / rundir.SUMS).read_text().splitlines()] == ["mllog.log"]


@pytest.mark.parametrize("kind", ["link-to-file", "dangling", "loop", "fifo"])
def test_the_mllog_file_is_not_opened_through_a_planted_entry(tmp_path, kind):
    outside, run = _fresh(tmp_path)
    _plant(run / rundir.MLLOG, kind, outside)
    before = _outside(outside)
    how, exc = _bounded(lambda: MLLog(run / rundir.MLLOG))
    assert how == "raised" and isinstance(exc, OSError)
    assert _outside(outside) == before
    good = MLLog(tmp_path / "fresh.log")
    good.event("submission_org", "gpulab")
    good.close()
    assert ":::MLLOG" in (tmp_path / "fresh.log").read_text()


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp)),
        timeout=300,
    )


@pytest.mark.parametrize("command", [["run", "ncf", "--scale", "tiny"], ["burnin", "--level", "quick"]])
@pytest.mark.parametrize("kind", ["link-to-folder", "dangling"])
def test_a_link_at_out_is_bad_input_and_nothing_is_written(tmp_path, command, kind):
    outside, _run = _fresh(tmp_path)
    out = tmp_path / "out"
    _plant(out, kind, outside)
    before = _outside(outside)
    p = _cli(tmp_path, *command, "--out", str(out))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert str(out) in lines[0]
    assert _outside(outside) == before and out.is_symlink()
