"""What a command prints, read with a cap: a host's command (Fabric over SSH, or a process of this machine) or
one of Slurm's client commands printing more than ``limits.OUTPUT_BYTES`` on one stream (a broken or hostile
dcgmi, an endless loop) is stopped, and is one line of HostError, never the controller's memory.

* ``run(argv, ...)``: ``subprocess.run(argv, capture_output=True, ...)`` for this machine (lab.hosts.remote's local
  host, lab.hosts.slurm, lab.hosts.hostkeys' ssh probe, lab.validate.nodehealth's runner health): the process starts in a session of its own and both streams are read as they come;
  past the cap (``TooMuch``), past its time limit (``subprocess.TimeoutExpired``) or on any other exception
  (Ctrl-C) the whole session is killed first, so nothing it started is left printing or waiting;
* ``runner(base)``: an Invoke ``Runner`` class (``fabric_runner()``: Fabric's, a Connection's ``runners.remote``)
  whose reads count bytes and close the command past the cap (``TooMuch``, raised out of Invoke as a
  ``ThreadException``), decode UTF-8 incrementally (a character split between two reads stays that character)
  and skip Invoke's join of everything read so far on every read of 1000 bytes (quadratic: 24 MB over SSH took
  67 s) where no watcher wants it;
* ``refusal(where, command, exc)``: the one line, naming the host, the command's program and the cap (``refuse``:
  raised where an exception is, or holds, a TooMuch).

Only the standard library is imported here: lab.hosts.slurm runs on Slurm nodes without Invoke or Fabric.
"""

from __future__ import annotations

import codecs
import os
import select
import selectors
import shlex
import signal
import subprocess
import time

from lab.core import limits
from lab.core.errors import HostCommandError, HostError, excerpt, printable

CHUNK = 1 << 16


class TooMuch(Exception):
    """A command printed more than ``limit`` bytes on ``stream`` ("stdout" or "stderr") and was stopped."""

    def __init__(self, stream: str, limit: int):
        super().__init__(f"more than {limit} bytes on {stream}")
        self.stream, self.limit = stream, limit


def size(n: int) -> str:
    """``n`` bytes as a person reads them: 32 MiB, 64 KiB, 1000 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def program(command: str) -> str:
    """The program a shell command runs, as an error names it: its first word past ``env``, ``setsid``, ``nohup``
    and ``NAME=value`` words, without its folder (``env PYTHONPATH=x /usr/bin/python3 -m runner`` -> python3)."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote: the words as they stand
        words = command.split()
    rest = [w for w in words if w not in ("env", "setsid", "nohup") and not _assignment(w)]
    first = (rest or words or ["?"])[0]
    return excerpt(printable(first.rsplit("/", 1)[-1] or first), 40)


def _assignment(word: str) -> bool:
    name, eq, _ = word.partition("=")
    return bool(eq) and name.isidentifier()


def refusal(where: str, command: str, exc: TooMuch) -> HostError:
    """The one line of a command stopped for printing too much: host (or ``slurm``), program, stream and cap (a
    HostCommandError: the host answered, its command misbehaved)."""
    return HostCommandError(
        f"{where}: `{program(command)}` printed more than {size(exc.limit)} on {exc.stream} "
        "(gpulab's limit on what one command prints, lab.core.limits.OUTPUT_BYTES) and was stopped"
    )


# --------------------------------------------------------------------------- a process of this machine


def run(
    argv: list[str], *, timeout: float | None = None, stdin: bytes | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``argv`` run to its end with ``stdin`` (None: /dev/null) written to it; its exit code and both streams as
    bytes. TooMuch past limits.OUTPUT_BYTES on a stream, subprocess.TimeoutExpired past ``timeout`` seconds,
    OSError when it cannot start; whatever ends it early kills its whole session (``start_new_session``) first.
    A program that ends normally keeps what it left running on its own (``setsid nohup ... &``)."""
    limit = limits.OUTPUT_BYTES
    deadline = None if timeout is None else time.monotonic() + timeout
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        with proc.stdout, proc.stderr:
            out, err = _pump(proc, stdin, deadline, limit)
        code = proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise subprocess.TimeoutExpired(argv, timeout) from None
    except BaseException:
        _kill(proc)
        raise
    return subprocess.CompletedProcess(argv, code, out, err)


def _pump(proc: subprocess.Popen, data: bytes | None, deadline: float | None, limit: int) -> tuple[bytes, bytes]:
    """Both streams read until their end (and ``data`` written to stdin as it takes it), each up to ``limit``."""
    got = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    names = {proc.stdout: "stdout", proc.stderr: "stderr"}
    todo = memoryview(data or b"")
    with selectors.DefaultSelector() as sel:
        for f in got:
            sel.register(f, selectors.EVENT_READ)
        if proc.stdin is not None:
            if todo:
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            for key, _ in sel.select(left):
                f = key.fileobj
                if f is proc.stdin:
                    try:  # at most PIPE_BUF bytes: what a writable pipe takes without blocking
                        todo = todo[os.write(f.fileno(), todo[: select.PIPE_BUF]) :]
                    except BrokenPipeError:  # it does not read its stdin: the rest is not wanted
                        todo = todo[:0]
                    if not todo:
                        sel.unregister(f)
                        f.close()
                    continue
                chunk = os.read(f.fileno(), CHUNK)
                if not chunk:
                    sel.unregister(f)
                elif len(got[f]) + len(chunk) > limit:
                    raise TooMuch(names[f], limit)
                else:
                    got[f] += chunk
    return bytes(got[proc.stdout]), bytes(got[proc.stderr])


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL to the process's session (its process group: what it started and did not detach), then reaped."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone already; or a member became another user's (setuid)
        proc.kill()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None and not f.closed:
            f.close()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:  # unkillable for now (uninterruptible I/O): reaped by Popen later
        pass


# --------------------------------------------------------------------------- Invoke's runners (Fabric's SSH)


class Capped:
    """Mixed into an Invoke ``Runner`` before it (``runner(base)``): its reads of the command's streams."""

    read_chunk_size = CHUNK  # Invoke reads 1000 bytes at a time

    def read_proc_output(self, reader):
        stream = "stderr" if reader == self.read_proc_stderr else "stdout"
        limit = limits.OUTPUT_BYTES
        decoder = codecs.getincrementaldecoder(self.encoding)("replace")
        seen = 0
        while data := reader(self.read_chunk_size):
            seen += len(data)
            if seen > limit:
                self.kill()  # Fabric: the channel closed; the host's sshd ends the command
                raise TooMuch(stream, limit)
            if text := decoder.decode(data):
                yield text
        if text := decoder.decode(b"", final=True):
            yield text

    def respond(self, buffer_) -> None:
        if self.watchers:  # Invoke joins the whole buffer for them on every read
            super().respond(buffer_)


_CLASSES: dict[type, type] = {}


def runner(base: type) -> type:
    """``base`` (an Invoke Runner class) with Capped's reads; one class per base."""
    if base not in _CLASSES:
        _CLASSES[base] = type(f"Capped{base.__name__}", (Capped, base), {"__module__": __name__})
    return _CLASSES[base]


def fabric_runner() -> type:
    """Fabric's ``Remote`` runner with Capped's reads, for a Connection's ``runners.remote``."""
    from fabric.runners import Remote

    return runner(Remote)


def refuse(where: str, command: str, exc: BaseException) -> None:
    """HostError (``refusal``) where ``exc`` is a TooMuch or Invoke's ThreadException holding one (the exceptions
    of its I/O threads); nothing otherwise."""
    for found in [exc, *(getattr(w, "value", None) for w in getattr(exc, "exceptions", ()))]:
        if isinstance(found, TooMuch):
            raise refusal(where, command, found) from None
