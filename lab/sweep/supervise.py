"""The controller's own side of a sweep: one controller per sweep folder, and Ctrl-C that stops every running run.

``SweepLock`` is an exclusive ``flock`` on the sweep folder itself (no lock
file, so nothing is left behind; the kernel drops it when the controller
ends, however it ends). A second controller started with the same ``--name``
finds it held and refuses with one line, exit 2, before any host is touched.

``run_workers`` starts one thread per unit and waits for them on Events,
never on ``Thread.join`` with a timeout: on CPython 3.11 and later a
KeyboardInterrupt that lands in such a join releases the running thread's
state lock and marks the thread stopped, so a later join returns at once and
the runs it was watching would never be stopped. On Ctrl-C the stop event is
set (each worker sends SIGTERM, then SIGKILL, to its running run), and the
controller waits for every worker, SIGINT ignored meanwhile.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from lab.core import writes
from lab.core.errors import ConfigError


class SweepLock:
    """Hold ``root`` (made if missing) for this controller; ConfigError if another one holds it."""

    def __init__(self, root: Path, name: str):
        self.root = Path(root)
        self.made = []  # the folders this lock makes, deepest first
        for p in (self.root.absolute(), *self.root.absolute().parents):
            if os.path.lexists(p):
                break
            self.made.append(p)
        writes.folder(self.root, "sweep folder")
        try:
            self.fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise ConfigError(f"sweep {name}: {self.root}: cannot be opened ({exc.strerror or exc})") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ConfigError(
                    f"sweep {name}: another controller is running it ({self.root} is locked); "
                    f"wait for it to end or choose another --name"
                ) from None
            raise ConfigError(f"sweep {name}: {self.root}: cannot be locked ({exc.strerror or exc})") from None

    def release(self, *, drop_if_empty: bool = False) -> None:
        """Let the folder go; ``drop_if_empty``: remove it again if this lock made it and nothing was written."""
        if self.fd is None:
            return
        for p in self.made if drop_if_empty else ():
            try:
                os.rmdir(p)
            except OSError:  # not empty: the sweep wrote there
                break
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "SweepLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def wait_all(done: list[threading.Event], timeout: float | None = None) -> bool:
    """Wait until every event is set (at most ``timeout`` seconds); True if all were."""
    end = None if timeout is None else time.monotonic() + timeout
    for ev in done:
        while not ev.wait(0.2 if end is None else max(0.0, min(0.2, end - time.monotonic()))):
            if end is not None and time.monotonic() >= end:
                return False
    return True


def _marked(work: Callable[[], None], done: threading.Event) -> None:
    try:
        work()
    finally:
        done.set()


def run_workers(
    workers: list,
    stop: threading.Event,
    grace_s: float,
    on_interrupt: Callable[[], None] = lambda: None,
    say: Callable[[str], None] = print,
) -> None:
    """Run each worker (a callable with a ``unit`` name) in its own thread until all end.

    Ctrl-C: ``stop`` is set, every worker is waited for (``grace_s`` plus a
    minute at most, SIGINT ignored), ``on_interrupt`` runs, and the
    KeyboardInterrupt goes on to the caller."""
    done = [threading.Event() for _ in workers]
    threads = [
        threading.Thread(target=_marked, args=(w, d), name=f"sweep-{getattr(w, 'unit', i)}", daemon=True)
        for i, (w, d) in enumerate(zip(workers, done))
    ]
    for t in threads:
        t.start()
    try:
        wait_all(done)
    except KeyboardInterrupt:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the cleanup must not be cut short
        try:
            say("interrupted: stopping the remote runs...")
            stop.set()
            wait_all(done, grace_s + 60)
            on_interrupt()
        finally:
            signal.signal(signal.SIGINT, old)
        raise
