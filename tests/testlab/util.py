"""Small helpers shared by the test lab: commands, locks, cache paths, hashes."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

DEFAULT_CACHE = "/var/cache/gpulab-testlab"
DEFAULT_RUN = "/run/gpulab-testlab"


class LabError(RuntimeError):
    """Something in the test lab itself failed (not the product under test)."""


def cache_dir() -> Path:
    path = Path(os.environ.get("GPULAB_TESTLAB_CACHE") or DEFAULT_CACHE)
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_dir() -> Path:
    """Registry of live labs (lock file, one JSON file per lab)."""
    path = Path(os.environ.get("GPULAB_TESTLAB_RUN") or DEFAULT_RUN)
    (path / "labs").mkdir(parents=True, exist_ok=True)
    return path


def run(cmd, *, check=True, input=None, capture=True, timeout=None, env=None, cwd=None):
    """Run a command (list or shell string); raise LabError with its stderr on failure."""
    shell = isinstance(cmd, str)
    res = subprocess.run(
        cmd,
        shell=shell,
        input=input,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
    )
    if check and res.returncode != 0:
        shown = cmd if shell else shlex.join(str(c) for c in cmd)
        err = (res.stderr or "").strip().splitlines()[-5:] if capture else []
        raise LabError(f"{shown!r} exited {res.returncode}: {' / '.join(err)}")
    return res


@contextlib.contextmanager
def flock(path: Path, what: str = "", timeout: float = 1800):
    """Exclusive lock on a file; other sessions wait (building a cache entry, allocating a subnet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(f"timed out waiting for lock {path} ({what})") from None
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)


def digest(*parts) -> str:
    """16 hex digits over strings, bytes and files (by content)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            h.update(part.name.encode() + b"\0" + part.read_bytes())
        elif isinstance(part, bytes):
            h.update(part)
        else:
            h.update(str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def proc_start_time(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (guards against pid reuse); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def alive(pid: int, start: int | None) -> bool:
    now = proc_start_time(pid)
    return now is not None and (start is None or now == start)


def exec_done(proc: subprocess.Popen, timeout: float = 30) -> subprocess.Popen:
    """Wait until a child that Popen just started shows its command line and environment in /proc.

    Popen returns once the child's exec has begun (its close-on-exec pipe closed), but the kernel sets up
    the new image's arguments and environment a moment later: until then /proc/PID/cmdline and
    /proc/PID/environ read empty, and a scan of /proc misses the child. Tests that start a process and
    then look for it call this first."""

    def shown():
        if proc.poll() is not None:
            raise AssertionError(f"process {proc.pid} ({proc.args!r}) exited early with {proc.returncode}")
        try:
            return Path(f"/proc/{proc.pid}/cmdline").read_bytes() != b""
        except OSError:
            return False

    try:
        wait_for(shown, timeout, f"process {proc.pid} to show its command line in /proc")
    except BaseException:
        proc.kill()  # the caller's cleanup never runs: leave nothing behind
        proc.wait()
        raise
    return proc


@contextlib.contextmanager
def reaped(proc: subprocess.Popen):
    """The block runs with ``proc``; whatever happens in it, ``proc`` is killed and waited for if still alive."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_until(cond, what: str, limit: float = 600, step: float = 0.25):
    """``cond()``'s first true value, asked every ``step`` s; a test failure after ``limit`` s."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"gave up waiting for {what}")


def wait_for(pred, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
