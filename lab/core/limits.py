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


# a number as text: ASCII digits (not '٣', '²' nor '1_000'), a minus at most (no '+1'), not 5,000 digits
INTEGER_TEXT = re.compile(r"-?[0-9]{1,30}")
DECIMAL_TEXT = re.compile(r"-?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,3})?")


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
        if not (INTEGER_TEXT if rng.integer else DECIMAL_TEXT).fullmatch(text):
            raise bad
        value = int(text) if rng.integer else float(text)
    if isinstance(value, float):
        if not math.isfinite(value) or (rng.integer and not value.is_integer()):
            raise bad
        if rng.integer:
            value = int(value)
    if not isinstance(value, (int, float)) or not rng.lo <= value <= rng.hi:
        raise bad
    return value


def _split(value) -> tuple[list, str | None]:
    """A comma list's items, whitespace around each stripped, and what is wrong with them: an empty item
    ('1,,2', '1,', '') or one given twice ('1,1'); None if nothing."""
    raw = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else [value]
    out = [i.strip() if isinstance(i, str) else i for i in raw]
    for n, item in enumerate(out, 1):
        if isinstance(item, str) and not item:
            return out, "no item given" if len(out) == 1 else f"item {n} is empty"
        if not isinstance(item, bool) and item in out[: n - 1]:
            return out, f"{excerpt(repr(item), 30)} is given twice"
    return out, None


def items(value, what: str) -> list:
    """A comma list as given (text '1,2', a YAML list, one YAML number) as its items, whitespace around each
    stripped; ConfigError '<what>: <value>: item 2 is empty' for an empty item ('1,,2', '1,', '') and
    '... 1 is given twice' for a repeated one ('1,1'): a typo is refused, never guessed."""
    out, wrong = _split(value)
    if wrong:
        raise ConfigError(f"{what}: {excerpt(repr(value), 40)}: {wrong}")
    return out


def counts(value, what: str, rng: Range, words: tuple = (), *, many: bool = False):
    """A count as given (``seeds: 3``, ``gpus: 1,2``): a word of its own alone (``auto``), else whole numbers in
    ``rng`` (a comma list where ``many``, each given once); ConfigError '<what>: <value> is not ...' otherwise,
    naming the item at fault."""
    if isinstance(value, str) and value.strip().lower() in words:
        return value
    takes = rng.describe().replace("a whole number", "a comma list of whole numbers" if many else "a whole number")
    refused = f"{what}: {excerpt(repr(value), 40)} is not " + " or ".join(
        [", ".join([takes, *words[:-1]]), *words[-1:]]
    )
    given, wrong = _split(value) if many else ([value], None)
    if wrong:
        raise ConfigError(f"{refused}: {wrong}")
    seen = []
    for n, item in enumerate(given, 1):
        try:
            seen.append(number(item, what, rng))
        except ConfigError:
            raise ConfigError(
                refused + (f": item {n} is {excerpt(repr(item), 30)}" if len(given) > 1 else "")
            ) from None
        if seen[-1] in seen[:-1]:  # '1,01'
            raise ConfigError(f"{refused}: {excerpt(repr(item), 30)} is given twice")
    return value


def names(value, what: str, words: tuple = (), pattern: str | None = None, only: tuple = ()):
    """A comma list of names as given (``workloads: ncf,gnmt``), each matching ``pattern`` (or one of ``only``),
    or a word of its own alone (``all``); ConfigError naming ``what`` otherwise."""
    refused = (
        f"{what}: {excerpt(repr(value), 40)} is not a comma list of "
        + (", ".join(only) if only else "names (letters, digits, _ -)")
        + "".join(f" or {w} alone" for w in words)
    )
    given, wrong = _split(value)
    if wrong:
        raise ConfigError(f"{refused}: {wrong}")
    named = all(
        isinstance(i, str) and i not in words and re.fullmatch(pattern or ".+", i) and (not only or i in only)
        for i in given
    )
    if not (named or (len(given) == 1 and given[0] in words)):
        raise ConfigError(refused)
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
