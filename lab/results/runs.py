"""The report's model of a training run (``Run``) and of what was read (``Collection``).

A run belongs to one system: for a published MLPerf result tree, the results
folder (``system_key`` its path under the input root, ``system_name`` its
name, ``submitter``); for gpulab's own runs and loose logs, the label
``<GPUs>x <device>[ / <stack>]`` built from what the run directory says.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from lab.core.errors import line_of


# The texts that name a run's benchmark, system and setting (groups, table cells, figure labels and legends),
# cut to this many characters: a GPU name of a megabyte in manifest.json took matplotlib minutes to draw.
LABEL_CHARS = 120
LABELS = (
    "benchmark",
    "device",
    "stack",
    "scale",
    "mode",
    "host",
    "submitter",
    "system_name",
    "submission",
    "framework",
    "accelerator",
    "division",
    "sample_unit",
)


@dataclass
class Run:
    """One training run, as read from its log (and run directory)."""

    source: str
    fmt: str  # "rundir", "mllog", "v0.6" or "v0.5"
    benchmark: str  # canonical name (benchmarks.yml) or as logged
    device: str
    gpus: int | None
    stack: str
    scale: str | None = None  # runner scale (full / small / tiny); None for plain logs
    mode: str = "ttt"  # ttt or throughput (runner --mode)
    host: str | None = None
    seed: int | None = None
    start_s: float | None = None  # run_start, unix seconds
    success: bool = False
    outcome: str = "failed"  # success / target_missed / failed / aborted
    reason: str = ""
    ttt_s: float | None = None
    elapsed_s: float | None = None
    epochs: float | None = None
    quality: object = None
    target: object = None
    samples_per_s: float | None = None
    throughput_basis: str | None = None
    sample_unit: str | None = None  # of samples_per_s where the run says (runner throughput mode)
    stack_versions: str | None = None
    energy_j: float | None = None
    avg_power_w: float | None = None
    facts_from: str = ""
    notes: list[str] = field(default_factory=list)
    # The system as a result tree names it (None: gpulab's own run or a loose log).
    submitter: str | None = None
    system_name: str | None = None
    system_key: str | None = None
    submission: str | None = None
    nodes: int | None = None
    framework: str | None = None
    accelerator: str | None = None
    # Scoring and compliance.
    order: tuple = ()  # position among its system's runs (file order, run in file)
    clock: str = ""
    compliance: str | None = None  # "PASS", "FAIL" or None (not checked: see compliance_note)
    compliance_note: str = ""  # FAIL: the failing rules in one short line; else the ruleset or why none
    compliance_ruleset: str | None = None  # mlperf-logging's ruleset that checked it ("4.0.0")
    compliance_failures: list[str] = field(default_factory=list)  # one short line per failing rule
    compliance_waived: list[str] = field(default_factory=list)  # gpulab's exceptions this log used
    # The published round whose rules score it (lab/data/rounds.yml; None: by its log format or gpulab's).
    round: str | None = None
    scaling_factor: float = 1.0  # the benchmark folder's scaling.json (lab.results.roundtree)
    scaling_note: str = ""
    system_notes: list[str] = field(default_factory=list)  # what its system description lacks
    # What result_summarizer reports beside the time (lab.results.roundfacts): its system's division,
    # the file's batch size and point of convergence, the energy rate from its power logs.
    division: str | None = None
    rcp_batch_size: float | None = None
    rcp_point: float | None = None  # None: the file could not be read for it (rcp_error)
    rcp_converged: bool = False
    rcp_error: str = ""
    power_rate: float | None = None  # joules per ms of the run; None: no power logs (power_note)
    power_note: str = ""

    def __post_init__(self):
        for name in LABELS:  # a name read from a run's files labels tables and figures: a line, not a megabyte
            value = getattr(self, name)
            if isinstance(value, str) and (len(value) > LABEL_CHARS or not value.isprintable()):
                # a line break or an escape sequence in it would split a table row or reach a terminal raw
                setattr(self, name, line_of(value, LABEL_CHARS))

    def judged(self, verdict) -> None:
        """Take a compliance verdict (lab.results.compliance.Verdict)."""
        self.compliance, self.compliance_note = verdict.status, verdict.note
        self.compliance_ruleset = verdict.ruleset
        self.compliance_failures, self.compliance_waived = list(verdict.failures), list(verdict.waived)

    @property
    def run_name(self) -> str:
        """The run as a reader finds it: its log file (``#runN`` within a file) or run directory."""
        return self.source.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]

    @property
    def bench_label(self) -> str:
        """Benchmark name as grouped: runs of a reduced scale never mix with full ones."""
        if self.scale and self.scale != "full":
            return f"{self.benchmark} [{self.scale}]"
        return self.benchmark

    @property
    def system(self) -> str:
        return self.system_name or system_label(self.device, self.gpus, self.stack)

    @property
    def group_key(self) -> tuple:
        """Runs with the same key form one benchmark x system record."""
        if self.system_key:
            return (self.bench_label, "tree", self.submitter or "", self.system_key)
        return (self.bench_label, "label", self.device, self.gpus, self.stack)

    @property
    def perf_per_watt(self) -> float | None:
        if self.samples_per_s and self.avg_power_w:
            return self.samples_per_s / self.avg_power_w
        return None

    @property
    def energy_to_train_wh(self) -> float | None:
        if self.ttt_s is not None and self.avg_power_w:
            return self.avg_power_w * self.ttt_s / 3600.0
        return None

    def row(self) -> dict:
        d = asdict(self)
        d["benchmark"] = self.bench_label
        d["system"] = self.system
        d["ttt_minutes"] = None if self.ttt_s is None else self.ttt_s / 60.0
        d["perf_per_watt"] = self.perf_per_watt
        d["energy_to_train_wh"] = self.energy_to_train_wh
        d["quality"] = _jsonable(self.quality)
        d["target"] = _jsonable(self.target)
        d["notes"] = "; ".join(self.notes)
        d["order"] = list(self.order)
        return d


_UNITS = {"GPU": ("GPU", "GPUs"), "TPU": ("TPU chip", "TPU chips"), "TPU core": ("TPU core", "TPU cores")}


def accelerator_kind(device: str | None, count: int | None = None) -> str:
    """What a run's accelerator count counts: "GPU", "TPU" (chips), "TPU core" or "CPU" (none).

    A TPU slice's name counts its TensorCores (``tpuv3-8``: 8 cores on 4 chips); a count equal
    to that number (v0.5 entry.json's num_accelerators) counts cores, any other count chips
    (the systems files of v0.6 on: ``tpu-v3`` x 16)."""
    d = str(device or "").strip().lower()
    if d == "cpu" or count == 0:
        return "CPU"
    if "tpu" not in d:
        return "GPU"
    m = re.search(r"-(\d+)$", d)
    return "TPU core" if m and count is not None and int(m.group(1)) == count else "TPU"


def count_label(kind: str, n: int | None) -> str:
    """``8 GPUs``, ``1 TPU chip``, ``CPU``."""
    if kind == "CPU":
        return "CPU"
    one, many = _UNITS[kind]
    return f"? {many}" if n is None else f"{n:,} {one if n == 1 else many}"


def count_header(kinds) -> str:
    """A column or axis of counts of these kinds: "GPUs", "TPU chips", "TPU cores", else "Accelerators"."""
    kinds = set(kinds)
    if len(kinds) == 1 and kinds <= set(_UNITS):
        return _UNITS[kinds.pop()][1]
    return "Accelerators"


def count_noun(kinds) -> str:
    """The thing counted, in running text: "GPU", "TPU chip", "TPU core", else "accelerator"."""
    kinds = set(kinds)
    return _UNITS[kinds.pop()][0] if len(kinds) == 1 and kinds <= set(_UNITS) else "accelerator"


def system_label(device: str, gpus: int | None, stack: str) -> str:
    """``4x T4 / <stack>``; a CPU run is ``CPU / <stack>``."""
    if accelerator_kind(device, gpus) == "CPU":
        label = "CPU" if str(device or "").lower() in ("cpu", "unknown", "") else f"CPU ({device})"
    else:
        label = f"{'?' if gpus is None else gpus}x {device}"
    if stack and stack != "unknown":
        label += f" / {stack}"
    return label


@dataclass
class Skipped:
    source: str
    reason: str


@dataclass
class Collection:
    runs: list[Run]
    skipped: list[Skipped]
    inputs: list[str]
    notes: list[str] = field(default_factory=list)  # what was found of the inputs (a round detected)


def _jsonable(v):
    if v is None or isinstance(v, (int, float, str, bool)):
        return v
    return json.dumps(v, sort_keys=True)
