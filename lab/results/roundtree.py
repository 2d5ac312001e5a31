"""Published MLPerf Training round trees: which round, which files are its runs, score scaling.

The round of a tree
-------------------
Named by the caller (``invoke report --round v4.0``), else by a folder of the input
path named as the round's results repository (``training_results_v4.0``, nearest
first), else read from the tree's logs (lab.results.rounddetect). Only rounds of
lab/data/rounds.yml are known; an MLLOG log of no known round is scored by gpulab's own rules and checked with the oldest MLLOG ruleset
(lab.results.compliance), and its record says that the round is unknown.

The runs of a round tree
------------------------
In a round whose ``failed_runs`` is ``slowest`` (v0.7 on: the rounds that
mlperf-logging's result_summarizer scores) the runs are exactly the files
``results/<system>/<benchmark>/result_*.txt``, as the summarizer finds them. Folders
below a benchmark folder (``raw_logs/``, ``processed_logs/``, ``power/``, a nested
copy of another benchmark's folder) and other files beside the result files are not
runs. The benchmark is the folder's (``mask`` is Mask R-CNN), as the summarizer names
its column.

Score scaling
-------------
A benchmark folder's ``scaling.json`` (``{"scaling_factor": F}``, the rules' "Score
scaling": the review committee's factor, e.g. from the Reference Convergence Points)
multiplies that folder's score. It is read through lab.bounded (a regular file inside
the input root, at most SCALING_BYTES); a file that cannot be used is not applied, and
the record says why.
"""

from __future__ import annotations

import math
import re
from fnmatch import fnmatchcase
from pathlib import Path

from lab.core import bounded
from lab.core import paths
from lab.core.errors import ConfigError, excerpt

ROUND_FOLDER = re.compile(r"^training_results_(v\d+\.\d+)$")
RESULT_FILE = "result_*.txt"
SCALING_FILE = "scaling.json"
SCALING_RANGE = (0.01, 100.0)  # the rules' factors are near 1; one beyond these makes no score
SCALING_BYTES = 64 << 10
# What mlperf-logging's result_summarizer (4.1.68) reads of systems/<system>.json; one missing
# field stops it for the whole submitter.
SUMMARIZER_FIELDS = (
    "division",
    "status",
    "submitter",
    "system_name",
    "host_processor_model_name",
    "number_of_nodes",
    "host_processor_core_count",
    "host_processors_per_node",
    "accelerator_model_name",
    "accelerators_per_node",
    "framework",
    "hw_notes",
    "sw_notes",
)


def known_round(rules, name: str | None, what: str = "--round") -> str | None:
    """``name`` when lab/data/rounds.yml has it (None stays None); ConfigError otherwise."""
    if name is None:
        return None
    name = str(name).strip()
    if not name.startswith("v"):
        name = "v" + name
    if name not in rules.rounds:
        raise ConfigError(
            f"{what} {excerpt(name, 40)}: not a round of lab/data/rounds.yml (known: {', '.join(rules.rounds)})"
        )
    return name


def round_of_path(path: Path, rules) -> str | None:
    """The round named by a folder of ``path`` (``training_results_v4.0``), nearest first."""
    for part in reversed(paths.real(path).parts):
        m = ROUND_FOLDER.match(part)
        if m and m.group(1) in rules.rounds:
            return m.group(1)
    return None


def summarizer_scored(rules, rnd: str | None) -> bool:
    """Whether round ``rnd`` scores a result tree as result_summarizer does (v0.7 on)."""
    return bool(rnd) and rules.rounds.get(rnd, {}).get("failed_runs") == "slowest"


def _results_depth(folder: Path) -> int | None:
    """How many folders ``folder`` lies below its nearest ``results`` folder (0: results
    itself); None when it is below none. Only the path's names are looked at."""
    for depth, name in enumerate(reversed(Path(folder).parts)):
        if name == "results":
            return depth
    return None


def below_benchmark(folder: Path) -> bool:
    """A folder inside a benchmark folder (results/<system>/<benchmark>/<here>): no runs in it."""
    depth = _results_depth(folder)
    return depth is not None and depth >= 3


def in_benchmark_folder(path: Path) -> bool:
    """A file directly in results/<system>/<benchmark>/."""
    return _results_depth(Path(path).parent) == 2


def is_run_file(path: Path) -> bool:
    """``results/<system>/<benchmark>/result_*.txt``."""
    return fnmatchcase(Path(path).name, RESULT_FILE) and in_benchmark_folder(path)


def benchmark_folder_name(path: Path, rules) -> str:
    """The benchmark a run file's folder names (``mask`` -> maskrcnn; otherwise as written)."""
    folder = path.parent.name
    canon = rules.benchmark(folder)
    return canon if canon in rules.benchmarks else folder


def summarizer_gaps(facts) -> list[str]:
    """What the system description of ``facts`` (lab.results.resulttree) lacks for result_summarizer."""
    if facts is None or facts.described_by is None:
        return ["no systems/<system>.json: result_summarizer skips the system"]
    missing = [f for f in SUMMARIZER_FIELDS if f not in facts.fields]
    if not missing:
        return []
    return [
        f"{facts.described_by} has no {', '.join(missing)}: result_summarizer stops at it (for the whole submitter)"
    ]


def scaling_factor(bench_dir: Path, root: Path) -> tuple[float, str]:
    """(factor, note): ``scaling.json``'s scaling_factor, 1.0 where there is none or it cannot be used."""
    path = bench_dir / SCALING_FILE
    try:
        doc = bounded.read_json(path, root=root, limit=SCALING_BYTES)
    except bounded.Missing:
        return 1.0, ""
    except bounded.Unreadable as exc:
        return 1.0, f"{SCALING_FILE} {exc.reason}: not applied"
    f = doc.get("scaling_factor") if isinstance(doc, dict) else None
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f <= 0:
        return 1.0, f"{SCALING_FILE} has no positive number scaling_factor: not applied"
    if not SCALING_RANGE[0] <= f <= SCALING_RANGE[1]:  # 5e-324 or 1e300: a score made zero or infinite
        return 1.0, (
            f"{SCALING_FILE} scaling_factor {f:.3g} is outside {SCALING_RANGE[0]:g}..{SCALING_RANGE[1]:g}: not applied"
        )
    return float(f), f"score x {f:.6g} ({SCALING_FILE})"
