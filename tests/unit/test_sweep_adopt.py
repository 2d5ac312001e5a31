"""What a resumed sweep reads from a host about a run it started before: the run's state by its token, and a
host lock left by a controller that died, taken over for that run only. The real shell scripts, on this machine
through lab.hosts.remote.LocalRemote (the same code path as over SSH)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lab.core.errors import RunError
from lab.sweep import hostlock
from lab.hosts import remote
from lab.sweep import hostrun
from tests.unit.localhost import local_host
from tests.testlab.util import exec_done


@pytest.fixture
def local(tmp_path):
    return remote.LocalRemote(local_host(tmp_path))


def test_run_state_by_token(local, tmp_path):
    src = tmp_path / "sweeps" / "S" / "run"
    assert hostrun.run_state(local, str(src), "tok-a") == "none"
    src.mkdir(parents=True)
    assert hostrun.run_state(local, str(src), "tok-a") == "gone"  # a partial folder, nothing running
    p = exec_done(subprocess.Popen(["sleep", "30"], env=dict(os.environ, GPULAB_RUN_TOKEN="tok-a")))
    try:
        assert hostrun.run_state(local, str(src), "tok-a") == "running"
        assert hostrun.run_state(local, str(src), "tok-other") == "gone"  # another run's processes do not count
        (src / "SHA256SUMS").write_text("")
        assert hostrun.run_state(local, str(src), "tok-a") == "done"
    finally:
        p.kill()
        p.wait()


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_lock_left_by_a_dead_controller_is_taken_over_for_its_own_run_only(local, tmp_path):
    workdir = str(tmp_path)
    gone = hostlock.HostLock(local, workdir, "S")
    gone.owner = gone.owner.replace(f"pid={os.getpid()}", f"pid={dead_pid()}")  # the killed controller
    assert gone.try_acquire("tok-run") is None
    p = exec_done(subprocess.Popen(["sleep", "30"], env=dict(os.environ, GPULAB_RUN_TOKEN="tok-run")))  # runs on
    try:
        resumed = hostlock.HostLock(local, workdir, "S")
        busy = resumed.try_acquire("tok-new")
        assert busy is not None and busy.alive and busy.token == "tok-run"  # not stale: its run still goes on
        assert not busy.orphaned("tok-new", "S", 300)  # not for another run
        assert not busy.orphaned("tok-run", "other-sweep", 300)  # nor for another sweep
        assert busy.orphaned("tok-run", "S", 300)
        assert resumed.take_over(busy, "tok-run") is None and resumed.held
        assert (tmp_path / "sweep.lock" / "owner").read_text().strip() == resumed.owner
        # a live controller's lock is not orphaned, even for the same run
        live = hostlock.HostLock(local, workdir, "S")
        live.owner = live.owner.replace(f"pid={os.getpid()}", "pid=1")
        assert not hostlock.Busy(0, True, live.owner, "tok-run").orphaned("tok-run", "S", 300)
    finally:
        p.kill()
        p.wait()


def _listing(src, names):
    src.mkdir(exist_ok=True)
    (src / "SHA256SUMS").write_text("".join(f"{'0' * 64}  {n}\n" for n in names))


@pytest.mark.parametrize(
    "make, names, problem",
    [
        (lambda s: (s / "a").write_text("x"), ["a", "a/b"], "a/b cannot read"),  # a file, then a file in it
        (lambda s: (s / "d").mkdir(), ["d"], "d is listed in SHA256SUMS but missing"),  # a folder listed
        (lambda s: (s / "x").write_text("x"), ["x/"], "x/ is listed in SHA256SUMS but missing"),
    ],
)
def test_a_hosts_listing_that_cannot_be_copied_is_a_problem_of_that_run(local, tmp_path, make, names, problem):
    """The host writes SHA256SUMS: names that cannot all exist here (a file 'a' and 'a/b') or a folder listed
    as a file are problems of the copy, which verification names; the fetch raised FileExistsError."""
    src, dest = tmp_path / "src", tmp_path / "out" / "run"
    src.mkdir()
    make(src)
    _listing(src, names)
    dest.parent.mkdir()
    problems = hostrun.fetch_run(local, str(src), dest)
    assert any(p.startswith(problem) for p in problems), problems
    assert (dest / "SHA256SUMS").is_file() and not (tmp_path / "out" / ".run.partial").exists()


def test_a_fifo_where_a_runs_file_should_be_is_refused_not_waited_on(local, tmp_path):
    """A FIFO in a run directory of the controller's own host (ansible_connection=local) hung the fetch."""
    src = tmp_path / "src"
    src.mkdir()
    os.mkfifo(src / "mllog.log")
    _listing(src, ["mllog.log"])
    (tmp_path / "out").mkdir()
    with pytest.raises(RunError, match="mllog.log is not a regular file"):
        hostrun.fetch_run(local, str(src), tmp_path / "out" / "run")


def test_a_file_past_the_fetch_limit_is_left_out_and_named(local, tmp_path, monkeypatch):
    """A host's file far past any real log (an endless one) is not copied whole: the copy stops at
    limits.FETCH_BYTES, that file is left out and named, the run's other files come."""
    from lab.core import limits

    monkeypatch.setattr(limits, "FETCH_BYTES", 1 << 20)
    src = tmp_path / "src"
    src.mkdir()
    (src / "status.json").write_text("{}")
    with open(src / "stdout.log", "wb") as fh:
        fh.truncate(3 << 20)  # sparse: 3 MB read back, none written
    _listing(src, ["status.json", "stdout.log"])
    (tmp_path / "out").mkdir()
    problems = hostrun.fetch_run(local, str(src), tmp_path / "out" / "run")
    assert problems[0] == "stdout.log: more than 1,048,576 bytes; not copied", problems
    assert sorted(p.name for p in (tmp_path / "out" / "run").iterdir()) == ["SHA256SUMS", "status.json"]
