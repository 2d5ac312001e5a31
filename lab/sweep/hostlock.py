"""A lock on the host itself: one sweep run at a time per host, whichever controller starts it.

The lock is a directory ``<workdir>/sweep.lock`` made with ``mkdir`` (atomic on
the host's file system). It holds ``owner`` (controller host, pid, sweep, time),
``token`` (the run's process tag, see lab.sweep.driver) and ``heartbeat``, touched by
the holder at every poll. Another controller takes the lock over only when it
is stale: its heartbeat is older than ``stale_s`` or its owner is a dead
process of this very controller machine, AND no process on the host still
carries the holder's run token (a run started by a controller that died keeps
the host until it ends).

Every value reaches the host as a positional argument of a fixed ``sh -c``
script: nothing from the inventory or the command line is shell syntax there.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass

from lab.hosts import remote as rmt
from lab.core import fields
from lab.core.errors import RunError, excerpt, printable, shown
from lab.core.settings import default as declared_default

LOCK_NAME = "sweep.lock"

# $1 lock dir, $2 owner line, $3 token
_ACQUIRE = r"""
lock=$1
mkdir -p "$(dirname "$lock")"
if mkdir "$lock" 2>/dev/null; then
  printf '%s\n' "$2" > "$lock/owner"; printf '%s\n' "$3" > "$lock/token"; : > "$lock/heartbeat"
  echo acquired; exit 0
fi
owner=$(head -c 4096 "$lock/owner" 2>/dev/null); tok=$(head -c 4096 "$lock/token" 2>/dev/null)
now=$(date +%s); hb=$(stat -c %Y "$lock/heartbeat" 2>/dev/null || stat -c %Y "$lock" 2>/dev/null || echo "$now")
alive=0
if [ -n "$tok" ] && [ -n "$(grep -lzxF "GPULAB_RUN_TOKEN=$tok" /proc/[0-9]*/environ 2>/dev/null)" ]; then alive=1; fi
printf 'busy\t%s\t%s\t%s\t%s\n' "$((now - hb))" "$alive" "$tok" "$owner"
"""

# $1 lock dir, $2 owner line expected: move the stale lock aside (atomic), then remove it
_BREAK = r"""
lock=$1
[ "$(cat "$lock/owner" 2>/dev/null)" = "$2" ] || { echo changed; exit 0; }
aside="$lock.stale.$$"
mv "$lock" "$aside" 2>/dev/null && rm -rf "$aside" && echo broken || echo changed
"""

# $1 lock dir, $2 owner line: remove only our own lock
_RELEASE = r"""
[ "$(cat "$1/owner" 2>/dev/null)" = "$2" ] && rm -rf "$1"; true
"""


def owner_line(sweep: str) -> str:
    return f"controller={socket.gethostname()} pid={os.getpid()} sweep={sweep} since={int(time.time())}"


def parse_owner(line: str) -> dict:
    out = {}
    for word in line.split():
        k, sep, v = word.partition("=")
        if sep:
            out[k] = v
    return out


def owner_dead_here(line: str) -> bool:
    """The owner is a process of this controller machine that no longer exists."""
    o = parse_owner(line)
    pid = fields.process_id(o.get("pid"))  # the lock file's words: a pid of this machine, or none
    if o.get("controller") != socket.gethostname() or pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass
class Busy:
    age_s: int
    alive: bool
    owner: str
    token: str = ""

    def stale(self, stale_s: float) -> bool:
        return not self.alive and (self.age_s > stale_s or owner_dead_here(self.owner))

    def orphaned(self, token: str, sweep: str, stale_s: float) -> bool:
        """Held for the run ``token`` of ``sweep`` by a controller that is gone (dead here, or silent
        past ``stale_s``): a resumed sweep takes it over even while that run still goes on."""
        return (
            bool(token)
            and self.token == token
            and parse_owner(self.owner).get("sweep") == sweep
            and (self.age_s > stale_s or owner_dead_here(self.owner))
        )

    def describe(self) -> str:
        o = {k: excerpt(printable(v), 64) for k, v in parse_owner(self.owner).items()}  # the lock file's words
        who = f"sweep {o.get('sweep', '?')} of {o.get('controller', '?')} (pid {o.get('pid', '?')})"
        return f"{who}, heartbeat {self.age_s} s ago" + (", its run still going" if self.alive else "")


class HostLock:
    """The lock of one host for one sweep run (or several runs in a row)."""

    def __init__(
        self, remote: rmt.Remote, workdir: str, sweep: str, *, stale_s: float = declared_default("sweep.lock_stale_s")
    ):
        self.remote = remote
        self.path = workdir.rstrip("/") + "/" + LOCK_NAME
        self.owner = owner_line(sweep)
        self.stale_s = stale_s
        self.held = False

    def try_acquire(self, token: str) -> Busy | None:
        """Take the lock (None) or say who holds it (Busy); breaks a stale lock and retries once."""
        for _ in range(2):
            out = self.remote.run(
                ["sh", "-c", _ACQUIRE, "hostlock", self.path, self.owner, token or ""], timeout=60
            ).stdout.strip("\n")
            if out == "acquired":
                self.held = True
                return None
            parts = out.split("\t", 4)
            if len(parts) != 5 or parts[0] != "busy":
                raise RunError(f"{self.remote.name}: cannot read the lock {self.path}: {shown(out)}")
            age = int(parts[1]) if re.fullmatch(r"-?[0-9]{1,12}", parts[1]) else 0  # seconds; else not known
            busy = Busy(age, parts[2] == "1", parts[4], parts[3])
            if not busy.stale(self.stale_s):
                return busy
            self.remote.run(["sh", "-c", _BREAK, "hostlock", self.path, busy.owner], timeout=60)
        return busy

    def take_over(self, busy: Busy, token: str) -> Busy | None:
        """Break a lock ``busy`` left by a controller that is gone and take it for ``token`` (its run)."""
        self.remote.run(["sh", "-c", _BREAK, "hostlock", self.path, busy.owner], timeout=60)
        out = self.remote.run(
            ["sh", "-c", _ACQUIRE, "hostlock", self.path, self.owner, token], timeout=60
        ).stdout.strip("\n")
        if out == "acquired":
            self.held = True
            return None
        return busy

    def release(self) -> None:
        if self.held:
            self.held = False
            self.remote.run(["sh", "-c", _RELEASE, "hostlock", self.path, self.owner], timeout=60, check=False)
