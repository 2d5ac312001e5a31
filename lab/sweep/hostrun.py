"""One run's processes on a host: the host's sweep folders, the detached runner
tagged with a token, its state as the host sees it, stopping every tagged
process, and fetching its run directory back verified (lab.results.checksums).
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from lab.results import checksums
from lab.core import fields, limits, paths
from lab.core import settings
from lab.core import writes
from lab.hosts import remote as rmt
from lab.core.errors import ConfigError
from lab.sweep.plan import TOKEN_VAR, PlannedRun


# --------------------------------------------------------------------------- on a host


def _default(name: str):
    return settings.default(f"sweep.{name}")


@dataclass
class Settings:
    """How a sweep treats its hosts: gpulab.sweep.*, each field's meaning, default and range declared in
    lab.core.settings (the README's settings table)."""

    timeout_s: float | None = 3600.0  # a run's time limit (--max-minutes for the runner); None: per run
    # from its estimate (lab.sweep.study.time_limit_minutes)
    kill_margin_s: float = _default("kill_margin_s")
    stop_grace_s: float = _default("stop_grace_s")
    poll_s: float = _default("poll_s")
    reconnect_s: float = _default("reconnect_s")
    min_free_mb: int = _default("min_free_mb")
    lock_stale_s: float = _default("lock_stale_s")
    lock_wait_s: float = _default("lock_wait_s")
    rdzv_port: int = _default("rdzv_port")
    fetch_retries: int = _default("fetch_retries")
    pilot_wait_s: float = _default("pilot_wait_s")
    compile_cpu: int = _default("compile_cpu")
    cpu_without_gpus: int = _default("cpu_without_gpus")
    health_valid_hours: float = _default("health_valid_hours")


@dataclass
class HostLayout:
    """Where a sweep's files live on one host."""

    workdir: str
    sweep: str

    @property
    def base(self) -> str:
        return f"{self.workdir}/sweeps/{self.sweep}"

    def run_dir(self, run: PlannedRun) -> str:
        return f"{self.base}/{run.run_id}"

    def launch_log(self, run: PlannedRun) -> str:
        return f"{self.base}/{run.run_id}.launch.log"


# $1 signal, $2 token: signal every process that carries the token; print their pids
_SIGNAL_TAGGED = r"""
pids=$(grep -lzxF "GPULAB_RUN_TOKEN=$2" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3)
[ -n "$pids" ] && kill -s "$1" $pids 2>/dev/null
echo $pids
"""


# $1 run directory, $2 token, $3 lock dir, $4 runner pid ('' when not known: a run adopted on resume)
_PROBE = r"""
[ -n "$3" ] && touch "$3/heartbeat" 2>/dev/null
if [ -f "$1/SHA256SUMS" ]; then echo done
elif [ -n "$4" ] && kill -0 "$4" 2>/dev/null; then echo running
elif [ -z "$4" ] && [ -n "$2" ] && grep -qzxF "GPULAB_RUN_TOKEN=$2" /proc/[0-9]*/environ 2>/dev/null; then echo running
elif [ -d "$1" ]; then echo gone
else echo none; fi
"""


def tagged_running(token: str) -> str:
    """A shell test, true while a process of the host carries the run's token in its environment (the scan of
    _PROBE and _SIGNAL_TAGGED, for a command of its own)."""
    return f"grep -qzxF {shlex.quote(f'{TOKEN_VAR}={token}')} /proc/[0-9]*/environ 2>/dev/null"


def run_state(remote: rmt.Remote, src: str, token: str | None, lock_dir: str = "", pid: str | None = None) -> str:
    """What a host says of a run: done (SHA256SUMS written), running, gone (left a partial folder) or none."""
    out = remote.run(
        ["sh", "-c", _PROBE, "gpulab-probe", src, token or "", lock_dir, pid or ""], timeout=60, check=False
    ).stdout.strip()
    return out if out in ("done", "running", "gone", "none") else "gone"


# the number of the last epoch the run's MLLOG started (runner: epoch_start with metadata epoch_num), from the
# log's last 256 kB: read only, for the live table
_EPOCH = (
    'f="$1/$2"; [ -f "$f" ] || exit 0; '
    "tail -c 262144 \"$f\" | grep -o '\"epoch_num\": *[0-9]*' | tail -n 1 | grep -o '[0-9]*$'"
)


def last_epoch(remote: rmt.Remote, src: str) -> int | None:
    """The run's current epoch as its MLLOG says (None: none started yet, or no log)."""
    from runner.rundir import MLLOG

    out = remote.run(["sh", "-c", _EPOCH, "gpulab-epoch", src, MLLOG], timeout=30, check=False).stdout.strip()
    return fields.whole(out, 6)


def signal_tagged(remote: rmt.Remote, token: str, sig: str) -> list[int]:
    out = remote.run(["sh", "-c", _SIGNAL_TAGGED, "gpulab-stop", sig, token], timeout=60, check=False).stdout
    return [pid for pid in map(fields.process_id, out.split()) if pid is not None]


def tagged_alive(remote: rmt.Remote, token: str) -> list[int]:
    return signal_tagged(remote, token, "0")


def stop_run(remote: rmt.Remote, token: str, pid: str | None, grace_s: float, poll_s: float = 0.5) -> bool:
    """SIGTERM to the runner (it stops its workload and finishes the run directory), then SIGKILL
    to every process of the run after ``grace_s``. True when something had to be killed."""
    if pid:
        remote.run(["kill", "-TERM", pid], check=False, timeout=30)
    else:
        signal_tagged(remote, token, "TERM")
    return wait_gone(remote, token, grace_s, poll_s)


def wait_gone(remote: rmt.Remote, token: str, grace_s: float, poll_s: float = 0.5) -> bool:
    """Wait until no process of the run is left, SIGKILL the rest after ``grace_s``; True when it had to.

    A runner writes SHA256SUMS last, but its interpreter still has to exit after
    that: a run counts as over only once its processes are gone.
    """
    end = time.monotonic() + grace_s
    while True:
        if not tagged_alive(remote, token):
            return False
        if time.monotonic() >= end:
            break
        time.sleep(poll_s)
    signal_tagged(remote, token, "KILL")
    return True


def _fetch_one(remote: rmt.Remote, src: str, tmp: Path, name: str) -> str | None:
    """Copy one file the host lists into ``tmp``. A name the host's own SHA256SUMS makes impossible here (a
    file ``a`` and a file ``a/b``, a folder listed as a file, ``x/``) is left out: the verification names it.
    A file past limits.FETCH_BYTES (an endless one) is left out too; the problem saying so is returned."""
    try:
        if "/" in name:
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        remote.get(f"{src}/{name}", tmp / name, limits.FETCH_BYTES)
    except writes.TooBig as exc:
        return f"{name}: {exc.message.rpartition(': ')[2]}"
    except OSError:
        pass
    return None


def fetch_run(remote: rmt.Remote, src: str, dest: Path) -> list[str]:
    """Copy a remote run directory to ``dest`` (replacing it) and verify it; the problems found.

    Files listed in SHA256SUMS are fetched; for an incomplete run (no sums),
    every file there is, so that nothing written is lost.
    """
    tmp = dest.with_name(f".{dest.name}.partial")
    if tmp.is_symlink() or not paths.inside(tmp.parent, dest.parent):
        raise ConfigError(f"{tmp}: a symbolic link where the fetch puts its copy; not followed")
    writes.remove(tmp)
    writes.folder(tmp, "fetched run")  # made component by component, never through a link
    names = [n for n in remote.listdir(src) if paths.is_component(n)]  # the host's listing is input too
    listed = names
    if checksums.SUMS in names:
        remote.get(f"{src}/{checksums.SUMS}", tmp / checksums.SUMS, limits.SUMS_BYTES)
        try:
            listed = list(checksums.read(tmp))
        except ValueError:
            listed = [n for n in names if n != checksums.SUMS]
    left_out = [p for p in (_fetch_one(remote, src, tmp, name) for name in listed) if p]
    problems = left_out + checksums.verify(tmp)
    writes.remove(dest)  # whatever a copy left there: a folder, a file, a link, a FIFO (never opened)
    os.replace(tmp, dest)
    return problems


def fetch_verified(remote: rmt.Remote, src: str, dest: Path, retries: int) -> list[str]:
    """fetch_run, again while the copy does not verify (a corrupt transfer), at most ``retries`` more
    (gpulab.sweep.fetch_retries); a copy that never verified ends its problems with how often it was fetched."""
    problems, fetches = fetch_run(remote, src, dest), 1
    while problems and fetches <= retries:
        if checksums.SUMS not in remote.listdir(src):
            return problems
        problems, fetches = fetch_run(remote, src, dest), fetches + 1
    if problems:
        problems.append(f"fetched {fetches} time(s), gpulab.sweep.fetch_retries {retries}")
    return problems
