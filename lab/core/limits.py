"""Every count, duration and size the controller accepts, with its range: one table, one checker.

A value from the command line, a config file, an environment variable or a
file read back (sweep.json) goes through ``check`` before anything starts, so
that ``--seeds 100000000`` or ``--timeout 0`` is one ConfigError line (exit 2)
and never a plan built in memory or a run that fails on the host. The runner
keeps its own ranges for its own options (runner/supervisor.py): it never
imports ``lab``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from lab.core.errors import ConfigError, excerpt


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    unit: str = ""
    integer: bool = True

    def shown(self, v: float) -> str:
        """A bound as a user types it: a whole range's bound in digits (100000000, which its parser takes, not
        1e+08, which it refuses), else the shortest form."""
        return str(int(v)) if self.integer and float(v).is_integer() else f"{v:g}"

    def describe(self) -> str:
        what = "a whole number" if self.integer else "a number"
        return f"{what} from {self.shown(self.lo)} to {self.shown(self.hi)}" + (f" {self.unit}" if self.unit else "")


# --- a sweep's plan (command line, settings, sweep.json) --------------------------------------
MAX_EPOCHS = Range(1, 10000, "epochs")  # runner run --max-epochs
SEEDS = Range(1, 1000, "seeds")  # per configuration; MLPerf asks at most 100 (NCF)
SEED = Range(0, 2**31 - 1)  # one seed value, as the runner accepts it
GPUS = Range(1, 64, "GPUs")  # GPUs of one run on one host
GPU_INDEX = Range(0, 63)
NODES = Range(1, 64, "hosts")  # hosts of one multi-node run
PLANNED_RUNS = Range(1, 10_000, "runs")  # runs in one sweep, counted before the plan is built
ATTEMPTS = Range(0, 10_000)
RUN_TIMEOUT_MINUTES = Range(0.05, 7 * 24 * 60, "minutes", integer=False)  # 3 s .. one week
RUN_LIMIT_S = Range(RUN_TIMEOUT_MINUTES.lo * 60, RUN_TIMEOUT_MINUTES.hi * 60, "s", integer=False)

# the gpulab: settings' ranges are declared with the settings themselves (lab.core.settings.DECLARED)
BACKENDS = ("ssh", "slurm", "auto")  # gpulab.sweep.backend, --backend

# --- bytes read back from files (lab.core.bounded) -----------------------------------------------------
JSON_BYTES = 16 << 20  # status.json, manifest.json, sweep.json, systems/*.json
SUMS_BYTES = 1 << 20  # SHA256SUMS
DATA_BYTES = 16 << 20  # YAML data files: stacks, references, catalogues
LOG_BYTES = 512 << 20  # mllog.log and plain MLPerf logs
TELEMETRY_BYTES = 1 << 30  # telemetry.csv: one row per GPU per second of a long run
HASH_BYTES = 64 << 30  # the files of one run directory hashed (streamed, never held) for SHA256SUMS
FETCH_BYTES = 4 << 30  # one file of a run directory or one compiled artifact copied from a host
WALK_DEPTH = 64  # folders below an input path searched for runs, result files and validate.json

# --- bytes a command prints, held in memory (lab.hosts.capped) -------------------------------------------------
# One stream of one command of a host's (over SSH or on this machine) or of Slurm's client; past it the command is
# stopped: one line of HostError. The largest output gpulab reads is a document its reader takes up to JSON_BYTES
# (the burn-in's last line, `dcgmi diag -r N -j`) after whatever the program printed first: twice that fits it. In
# practice outputs are far smaller: `dcgmi diag -j` prints ~3 kB for 2 GPUs at -r 2 (tests/samples/dcgm), tens
# of kB for 8 GPUs at -r 3; nvidia-smi -q ~10 kB a GPU; `runner health` and `probe --json` a few kB; the largest,
# `scontrol show job -o` of an array of PLANNED_RUNS.hi tasks at ~2 kB a record, ~20 MB.
OUTPUT_BYTES = 2 * JSON_BYTES


def number(value, what: str, rng: Range) -> int | float:
    """``value`` (int, float or text) inside ``rng``; ConfigError '<what>: <value> is not ...' otherwise."""
    bad = ConfigError(f"{what}: {excerpt(repr(value), 40)} is not {rng.describe()}")
    if isinstance(value, bool) or value is None:
        raise bad
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if rng.integer else float(text)
        except ValueError:
            raise bad from None
    if isinstance(value, float):
        if not math.isfinite(value) or (rng.integer and not value.is_integer()):
            raise bad
        if rng.integer:
            value = int(value)
    if not isinstance(value, (int, float)) or not rng.lo <= value <= rng.hi:
        raise bad
    return value


def _items(value) -> list:
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
    return [i.strip() if isinstance(i, str) else i for i in items if not (isinstance(i, str) and not i.strip())]


def counts(value, what: str, rng: Range, words: tuple = (), *, many: bool = False):
    """A count as given (``seeds: 3``, ``gpus: 1,2``): a word of its own alone (``auto``), else whole numbers in
    ``rng`` (a comma list where ``many``); ConfigError '<what>: <value> is not ...' otherwise."""
    if isinstance(value, str) and value.strip().lower() in words:
        return value
    items = _items(value) if many else [value]
    try:
        if not items:
            raise ConfigError("")
        for item in items:
            number(item, what, rng)
    except ConfigError:
        takes = rng.describe().replace("a whole number", "a comma list of whole numbers" if many else "a whole number")
        raise ConfigError(
            f"{what}: {excerpt(repr(value), 40)} is not " + " or ".join([", ".join([takes, *words[:-1]]), *words[-1:]])
        ) from None
    return value


def names(value, what: str, words: tuple = (), pattern: str | None = None, only: tuple = ()):
    """A comma list of names as given (``workloads: ncf,gnmt``), each matching ``pattern`` (or one of ``only``),
    or a word of its own alone (``all``); ConfigError naming ``what`` otherwise."""
    items = _items(value)
    named = all(
        isinstance(i, str) and i not in words and re.fullmatch(pattern or ".+", i) and (not only or i in only)
        for i in items
    )
    if not items or not (named or (len(items) == 1 and items[0] in words)):
        raise ConfigError(
            f"{what}: {excerpt(repr(value), 40)} is not a comma list of "
            + (", ".join(only) if only else "names (letters, digits, _ -)")
            + "".join(f" or {w} alone" for w in words)
        )
    return value


MEASUREMENT_ABS = 1e12  # no figure of a GPU check is this large: a value beyond it is not a measurement


def measurement(v) -> float | None:
    """A finite float of a stored figure (a database cell, a past record), else None: a text, a bool, a
    NaN, an infinity or an absurd size is no measurement and is left out, never an error."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except (OverflowError, ValueError):
        return None
    return f if math.isfinite(f) and abs(f) <= MEASUREMENT_ABS else None


def plan_size(total: int) -> int:
    """Runs a plan would hold (hosts x workloads x GPU counts x seeds), checked before it is built."""
    if total > PLANNED_RUNS.hi:
        raise ConfigError(
            f"plan: {total} runs (hosts x workloads x GPU counts x seeds), more than {PLANNED_RUNS.hi:g} in one sweep"
        )
    return total
