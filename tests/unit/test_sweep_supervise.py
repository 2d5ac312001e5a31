"""One controller per sweep folder (lab.sweep.supervise.SweepLock) and Ctrl-C that waits for every worker to stop
its run, whichever Python runs the controller (a KeyboardInterrupt in Thread.join marks a running thread stopped
on CPython 3.11+: the workers are waited for on Events instead)."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.hosts import inventory
from lab.sweep import driver, supervise
from tests.testlab import controllers

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_lock_on_the_same_sweep_is_refused_in_one_line(tmp_path):
    root = tmp_path / "results" / "s1"
    first = supervise.SweepLock(root, "s1")
    with pytest.raises(ConfigError) as exc:
        supervise.SweepLock(root, "s1")
    assert exc.value.exit_code == 2
    assert exc.value.message == (
        f"sweep s1: another controller is running it ({root} is locked); wait for it to end or choose another --name"
    )
    first.release()
    with supervise.SweepLock(root, "s1"):
        pass
    supervise.SweepLock(tmp_path / "results" / "s2", "s2").release(drop_if_empty=True)
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["s1"]  # a lock leaves nothing behind


def test_the_lock_is_held_by_another_process_until_it_ends(tmp_path):
    root = tmp_path / "s1"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        from lab.sweep import supervise
        supervise.SweepLock({str(root)!r}, "s1")
        print("held", flush=True)
        time.sleep(60)
    """),
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="another controller is running it"):
            supervise.SweepLock(root, "s1")
    finally:
        holder.kill()
        holder.wait()
    supervise.SweepLock(root, "s1").release()  # the kernel dropped it with the process: nothing stale


def test_a_locked_sweep_is_refused_before_any_host_is_touched(tmp_path):
    hosts = inventory.load(ROOT / "inventory" / "local.yml").select()
    results = tmp_path / "results"
    with supervise.SweepLock(results / "s1", "s1"):
        with pytest.raises(ConfigError, match="another controller is running it"):
            driver.run_sweep(
                hosts, ["ncf"], results, "s1", seeds=1, scale="tiny", echo=lambda line: pytest.fail(f"went on: {line}")
            )
    assert os.listdir(results / "s1") == []


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt as at a terminal, even where the tests were started with it ignored."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


class SlowToStop:
    """A worker whose run takes ``stop_s`` to stop once asked (SIGTERM, then SIGKILL after a grace)."""

    def __init__(self, unit: str, stop: threading.Event, stop_s: float, log: list):
        self.unit, self.stop, self.stop_s, self.log = unit, stop, stop_s, log

    def __call__(self):
        self.stop.wait(30)
        time.sleep(self.stop_s)
        self.log.append(("stopped", self.unit))


@pytest.mark.parametrize("when", [0.05, 0.3, 0.7])
def test_ctrl_c_waits_for_every_worker_to_stop_its_run(sigint_raises, when):
    stop, log = threading.Event(), []
    workers = [SlowToStop(f"u{i}", stop, 0.4 + 0.2 * i, log) for i in range(3)]
    threading.Timer(when, _thread.interrupt_main).start()  # what Ctrl-C does to the main thread
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        supervise.run_workers(
            workers,
            stop,
            grace_s=5,
            on_interrupt=lambda: log.append(("saved", None)),
            say=lambda line: log.append((line, None)),
        )
    assert time.monotonic() - t0 >= when + 0.8
    assert log[0] == ("interrupted: stopping the remote runs...", None)
    assert sorted(log[1:4]) == [("stopped", "u0"), ("stopped", "u1"), ("stopped", "u2")]
    assert log[4] == ("saved", None)


def interpreter(version: str) -> str:
    """This Python, or another supported one found here (tests/testlab/controllers.find: pyenv's, PATH,
    /usr/bin): the Thread.join behaviour that broke Ctrl-C differs between them. A version this machine has
    no interpreter for is a visible skip."""
    if "%d.%d" % sys.version_info[:2] == version:
        return sys.executable
    found = controllers.find(version)
    if found is None:
        pytest.skip(
            f"no Python {version} on this machine (looked in ~/.pyenv/versions, PATH, /usr/bin, /usr/local/bin)"
        )
    return found


@pytest.mark.parametrize("version", controllers.VERSIONS)
def test_ctrl_c_from_a_real_signal_stops_the_running_process(tmp_path, version):
    """A controller process on each Python found here, a worker watching a child process: SIGINT to the
    controller, and the child is stopped (SIGTERM) before the controller exits."""
    python = interpreter(version)
    pidfile = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import signal, subprocess, sys, threading
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from lab.sweep import supervise
        stop = threading.Event()
        class W:
            unit = "u0"
            def __call__(self):
                child = subprocess.Popen(["sleep", "60"])
                open({str(pidfile)!r}, "w").write(str(child.pid))
                stop.wait(120)
                child.terminate(); child.wait()
                print("child stopped", flush=True)
        try:
            supervise.run_workers([W()], stop, grace_s=5)
        except KeyboardInterrupt:
            sys.exit(130)
    """)
    proc = subprocess.Popen(
        [python, "-c", script],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    time.sleep(0.3)  # the controller is in its wait
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "child stopped" in out and "Traceback" not in out, out
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
