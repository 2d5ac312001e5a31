"""The values that name things: one check each, for the command line and for state read back from files.

A sweep name, a host name or a run's workload, mode, scale, GPU count and
seed becomes a folder under results/, a path on a host or an argument of the
runner. The same function checks it whether it comes from ``--name`` or from
``sweep.json`` (lab.sweep.statefile), so a value refused on the command line is
refused in a file too. Each check returns the value or raises ConfigError
'<what>: <value> is not ...', ``what`` naming the option or the file and field.
"""

from __future__ import annotations

import enum
import re

from lab.core import limits
from lab.core import paths
from lab.core.errors import ConfigError, excerpt
from runner import rundir

MODES = ("ttt", "throughput")
SCALES = ("tiny", "small", "full")


class RunState(str, enum.Enum):
    """A planned run's state in a sweep (sweep.json's ``state``, written as its value: "complete")."""

    PLANNED = "planned"
    RUNNING = "running"
    COMPLETE = "complete"  # fetched and verified, outcome success or target_missed
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # stopped by Ctrl-C

    def __str__(self) -> str:  # the value, in f-strings and tables as in sweep.json (Python 3.10's Enum gives the name)
        return self.value

    __format__ = str.__format__


STATES = tuple(s.value for s in RunState)
OUTCOMES = rundir.OUTCOMES  # the runner's status.json outcomes (the run-directory contract)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
WORKLOAD_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,252}$")
TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _shown(value) -> str:
    """A refused value in an error line: at most 60 characters of its repr (a 5,000-character option is not
    quoted whole)."""
    return excerpt(repr(value), 60)


# What gpulab itself keeps under the results folder beside the sweeps (results/<sweep>/): validate's output
# folder (tasks.py), the history database and its SQLite journals (lab.history.db DEFAULT_FILE, SQLITE_FILES), tune's
# study database beside it (lab.tune.storage SQLITE_SUFFIX) and the report of the results folder itself
# (`invoke report results`: PATH/report). A sweep by one of these names would mix its files into another tool's;
# tests/unit/test_reserved_names.py keeps this list equal to those modules'.
_SQLITE = ("", "-journal", "-wal", "-shm")
RESERVED_NAMES = {
    "validate": "validate's output folder",
    "report": "the report folder of a report on the whole results folder",
    **{f"history.sqlite{suffix}": "the history database" for suffix in _SQLITE},
    **{f"history-tune.sqlite{suffix}": "the tune studies' database" for suffix in _SQLITE},
}


def sweep_name(value, what: str = "--name") -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ConfigError(f"{what}: {_shown(value)} is not a sweep name (letters, digits, . _ -)")
    if value.lower() in RESERVED_NAMES:  # any case: a case-insensitive results folder (a Mac's) has one of each
        raise ConfigError(
            f"{what}: {_shown(value)} is the name of {RESERVED_NAMES[value.lower()]} under the results folder, "
            "kept for it; give another name"
        )
    return value


def workload(value, what: str = "--workloads") -> str:
    if not isinstance(value, str) or not WORKLOAD_RE.fullmatch(value):
        raise ConfigError(f"{what}: {_shown(value)} is not a workload name")
    return value


def host_name(value, what: str = "host") -> str:
    """An inventory host name that can name a folder: results/<sweep>/<host>/."""
    if not isinstance(value, str) or not HOST_RE.fullmatch(value) or not paths.is_component(value):
        raise ConfigError(
            f"{what}: {_shown(value)} is not a host name gpulab can use as a folder name (letters, digits, . _ - : @ +)"
        )
    return value


def choice(value, options: tuple[str, ...], what: str) -> str:
    """One of ``options`` (lowercase words), given in any case and read as the lowercase word: ``--scale TINY`` is
    the run ``--scale tiny`` is (its run ids, folder names, runner arguments and sweep.json)."""
    word = value.strip().lower() if isinstance(value, str) else None
    if word not in options:
        raise ConfigError(f"{what}: {_shown(value)} is not one of {', '.join(options)}")
    return word


def word(value, words: tuple[str, ...]):
    """``value`` as its lowercase word where it is one of ``words`` in any case (``ALL``, ``AUTO``), else as given
    (a number, a list: its own check reads it)."""
    if isinstance(value, str) and value.strip().lower() in words:
        return value.strip().lower()
    return value


def seed(value, what: str = "seed") -> int:
    if not isinstance(value, int):
        raise ConfigError(f"{what}: {_shown(value)} is not {limits.SEED.describe()}")
    return limits.number(value, what, limits.SEED)


def gpu_count(value, what: str = "gpus") -> int:
    """GPUs of a planned run: 0 (CPU), -1 (all of a host not probed yet) or 1..limits.GPUS."""
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, -1):
        return value
    if not isinstance(value, int):
        raise ConfigError(f"{what}: {_shown(value)} is not a GPU count (0, -1 or {limits.GPUS.describe()})")
    return limits.number(value, what, limits.GPUS)


def run_gpus(gpus, nnodes, world_size, what: str = "status.json") -> None:
    """A finished run's GPUs as status.json gives them, as the runner writes them: ``gpus`` distinct GPU indices
    (none: a CPU run; not a list: not given, ``world_size`` counts them), ``nnodes`` limits.NODES hosts (None:
    one). ConfigError '<what>: <field> <value> is not ...' otherwise ([0, 0, ...] is no million GPUs)."""
    if isinstance(gpus, list):
        lo, hi = limits.GPU_INDEX.lo, limits.GPU_INDEX.hi
        found = {i for i in gpus if isinstance(i, int) and not isinstance(i, bool) and lo <= i <= hi}
        if len(found) != len(gpus):
            raise ConfigError(f"{what}: gpus {_shown(gpus)} is not a list of distinct GPU indices from {lo} to {hi}")
    elif world_size is not None:
        limits.number(world_size, f"{what}: world_size", limits.Range(0, limits.GPUS.hi * limits.NODES.hi))
    if nnodes is not None:
        limits.number(nnodes, f"{what}: nnodes", limits.NODES)


def whole(text, digits: int = 9) -> int | None:
    """The number a host, a tool or a user wrote as ASCII digits (at most ``digits`` of them); None for anything
    else: ``str.isdigit`` also takes "²" (which ``int`` refuses) and "٣" (which ``int`` reads as 3)."""
    if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= digits:
        return int(text)
    return None


def process_id(text) -> int | None:
    """A process id as a host's shell or a lock file wrote it: ASCII digits (not another script's, not 5,000 of
    them) naming a process 2..2**31-1; None for anything else (0 would make ``kill -0`` ask about the caller's
    own process group, 1 is init)."""
    pid = whole(text, 10)
    return pid if pid is not None and 1 < pid < 2**31 else None


def token(value, what: str = "token") -> str | None:
    if value is not None and (not isinstance(value, str) or not TOKEN_RE.fullmatch(value)):
        raise ConfigError(f"{what}: {_shown(value)} is not a run token")
    return value
