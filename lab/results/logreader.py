"""Find training runs in any tree of logs and read each into one ``Run`` (lab.results.runs).

What is read
------------
- gpulab run directories (runner/README.md): a folder with ``status.json`` (and
  ``manifest.json``, ``mllog.log``, ``telemetry.csv``, ``SHA256SUMS``). The
  folder is not searched further.
- Plain MLPerf log files anywhere else (lab.results.plainlogs): every ``*.log``,
  ``*.txt``, ``*.out``, ``*.err`` or extension-less file that holds ``:::MLLOG``
  (lab.results.mllog), ``:::MLL`` (v0.6, lab.results.v06log) or ``:::MLPv0.5.0``
  (lab.results.v05log) lines. In a published MLPerf result tree each log's system is
  its results folder (lab.results.resulttree).
- ``sweep.json`` of a sweep directory ``results/<sweep>/``: host facts for its
  run directories ``<host>/<run id>/``, and planned runs that left no run
  directory (listed as skipped).
- A published round's tree (lab.results.roundtree: the round named by ``round`` or by a
  ``training_results_vX.Y`` folder) of v0.7 on: below ``results/`` only the
  ``results/<system>/<benchmark>/result_*.txt`` files are runs; a folder inside a
  benchmark folder is listed as skipped once, unread.

Per run directory
-----------------
time to train, epochs, throughput: from mllog.log (lab.results.mllog), where the
               runner's status.json result gives samples/s and epochs, those.
energy         telemetry.csv: power_w integrated over time_s (trapezoids) per
               GPU of the run, summed; average power = sum of per-GPU means.
compliance     mlperf-logging's checker on mllog.log (lab.results.compliance).
device         the probe's GPU names in manifest.json (of the run's GPU
               indices), else sweep.json's host gpu_model, else folder names;
               GPU count: status.json gpus x nnodes (no GPUs: "CPU", 0); stack:
               a stack profile name in the probe's stack facts, else sweep.json's
               host stack (the inventory's gpulab_stack), else the probe's
               versions ("driver D, cuda C, torch T"). All versions are kept per
               run (stack_versions) and shown by --compare. host: the sweep's
               <host>/ folder, else the probe's hostname. Directories of nodes
               other than 0 of a multi-host run are listed as skipped (node 0's
               directory is the run).
copies         a run directory whose SHA256SUMS (and status.json) are the bytes of one
               already read (the same run copied under another name) is listed as
               skipped: each run counts once, as history.import adds it once.

Bad input never stops a report: a file or folder that cannot be used becomes a
``Skipped`` entry with a one-line reason. A path that does not exist, or holds
no run directory and no log file at all, is a ``ConfigError``. Nothing above
an input path is read.

This module finds the inputs (discovery, sweep.json); a run directory is read
by lab.results.rundirs, telemetry by lab.results.telemetry, plain logs by lab.results.plainlogs.
"""

from __future__ import annotations

import os
from pathlib import Path

from lab.core import bounded, limits, paths, plaindata
from lab.core.paths import existing, utf8
from lab.results import rounddetect, roundtree
from lab.core.errors import ConfigError, printable
from lab.results.logfacts import LogFacts, LogProblem
from lab.core.mlperf import Rules, default_rules
from lab.results.plainlogs import detect_format, named_like_log, parse_log, parse_runs, read_plain
from lab.results.resulttree import TreeReader
from lab.results.runs import Collection, Run, Skipped, system_label
from lab.results.rundirs import read_json, read_rundir, read_text, verify_sums
from lab.results.telemetry import read_telemetry
from runner.rundir import MANIFEST, MLLOG, STATUS

__all__ = [
    "Collection",
    "LogFacts",
    "LogProblem",
    "Run",
    "Skipped",
    "read_runs",
    "detect_format",
    "parse_log",
    "parse_runs",
    "read_telemetry",
    "system_label",
    "verify_sums",
]

LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ""}
# Program sources that a result tree ships beside its logs (the loggers mlperf_log.py, NcfLogger.scala):
# named like logs and holding the markers in their strings, they are never logs themselves.
SOURCE_SUFFIXES = {
    ".py",
    ".pyc",
    ".scala",
    ".java",
    ".c",
    ".cc",
    ".cpp",
    ".cu",
    ".h",
    ".hpp",
    ".sh",
    ".go",
    ".rs",
    ".js",
    ".ts",
    ".ipynb",
    ".proto",
    ".md",
    ".html",
}

# --------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------


class _Context:
    def __init__(self, rules: Rules, round_name: str | None = None):
        self.rules = rules
        self.round_name = round_name
        self._rounds: dict[Path, str | None] = {}
        self._scaling: dict[Path, tuple[float, str]] = {}
        self.runs: list[Run] = []
        self.skipped: list[Skipped] = []
        self.notes: list[str] = []
        self._sweeps: dict[Path, dict | str] = {}
        self._systems_dirs: dict[Path, bool] = {}
        self._json_cache: dict[Path, dict | None] = {}
        self._seen: set[Path] = set()
        self._run_keys: dict[str, Path] = {}
        self.repeats = 0
        self.planned: dict[Path, dict] = {}
        self._trees: dict[Path, TreeReader] = {}

    def tree(self, root: Path) -> TreeReader:
        """The published-result-tree reader of one input path."""
        if root not in self._trees:
            self._trees[root] = TreeReader(root, self.rules)
        return self._trees[root]

    def round_of(self, root: Path) -> str | None:
        """The round of an input path: the one named, else its folder names' (lab.results.roundtree),
        else its logs' (lab.results.rounddetect, which says what it found in ``notes``)."""
        if root not in self._rounds:
            rnd = self.round_name or roundtree.round_of_path(root, self.rules)
            if rnd is None:
                found = rounddetect.detect(root, self.rules)
                rnd = found.round
                if found.line:
                    self.notes.append(found.line)
            self._rounds[root] = rnd
        return self._rounds[root]

    def scaling(self, bench_dir: Path, root: Path) -> tuple[float, str]:
        """A benchmark folder's scaling.json factor and note, read once."""
        if bench_dir not in self._scaling:
            self._scaling[bench_dir] = roundtree.scaling_factor(bench_dir, root)
        return self._scaling[bench_dir]

    def planned_dir(self, path: Path) -> dict | None:
        """The sweep.json entry whose run directory ``path`` is, if any."""
        return self.planned.get(paths.real(path)) if self.planned else None

    def first_visit(self, path: Path) -> bool:
        """False for a file or folder already read (overlapping input paths)."""
        key = paths.real(path)
        if key in self._seen:
            self.repeats += 1
            return False
        self._seen.add(key)
        return True

    def first_of_run(self, key: str, rundir: Path) -> Path | None:
        """The run directory already read whose run is ``key`` (lab.results.checksums.run_key): ``rundir`` is a
        copy of it; None for the first."""
        first = self._run_keys.setdefault(key, rundir)
        return None if first == rundir else first

    def skip(self, source, reason):
        self.skipped.append(Skipped(str(source), reason))

    # sweep.json ----------------------------------------------------------
    def sweep(self, sweep_dir: Path) -> dict | None:
        """sweep.json of ``sweep_dir`` read once; None where it cannot be used (``sweep_unused`` says why)."""
        if sweep_dir not in self._sweeps:
            self._sweeps[sweep_dir] = _load_sweep(sweep_dir / "sweep.json")
        found = self._sweeps[sweep_dir]
        return found if isinstance(found, dict) else None

    def sweep_unused(self, sweep_dir: Path) -> str:
        """Why sweep.json of ``sweep_dir`` is not used (after ``sweep`` gave None)."""
        return str(self._sweeps.get(sweep_dir) or "")

    # MLPerf systems/<name>.json --------------------------------------------
    def systems_file(self, log: Path, root: Path) -> tuple[dict, str] | None:
        anchors = [p for p in log.parents if _is_within(p, root)]  # never above the input
        for anchor in anchors:
            sysdir = anchor / "systems"
            if sysdir not in self._systems_dirs:
                self._systems_dirs[sysdir] = os.path.isdir(sysdir)
            if not self._systems_dirs[sysdir]:
                continue
            try:
                parts = log.relative_to(anchor).parts[:-1]
            except ValueError:
                continue
            for part in parts:
                f = sysdir / f"{part}.json"
                if f not in self._json_cache:
                    self._json_cache[f] = read_json(f) if os.path.isfile(f) else None
                if isinstance(self._json_cache[f], dict):
                    return self._json_cache[f], f"{f.name}"
        return None


def _is_within(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def _load_sweep(path: Path) -> dict | str:
    """The hosts and planned runs of a sweep.json; why not, where it cannot be used."""
    try:
        text = bounded.read_text(path, root=path.parent, limit=limits.JSON_BYTES)
    except bounded.Unreadable as exc:  # not there, a FIFO, too big, not to be read by this user: said as such
        return exc.reason
    try:
        doc = plaindata.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        return "is not a readable JSON object"
    hosts = {}
    raw_hosts = doc.get("hosts") or {}
    if isinstance(raw_hosts, list):
        raw_hosts = {str(h.get("name") or h.get("host")): h for h in raw_hosts if isinstance(h, dict)}
    if isinstance(raw_hosts, dict):
        for name, facts in raw_hosts.items():
            if isinstance(facts, dict):
                hosts[str(name)] = facts
    runs = []
    raw_runs = doc.get("runs", doc.get("plan")) or []
    most = limits.PLANNED_RUNS.hi  # each run's folder is looked up, and a missing one is a line of the report
    if isinstance(raw_runs, (list, dict)) and len(raw_runs) > most:
        return f"lists {len(raw_runs)} runs, more than the {limits.PLANNED_RUNS.shown(most)} of one sweep"
    if isinstance(raw_runs, dict):
        raw_runs = [dict(v, id=v.get("id", k)) for k, v in raw_runs.items() if isinstance(v, dict)]
    for entry in raw_runs if isinstance(raw_runs, list) else []:
        if isinstance(entry, dict) and (entry.get("id") or entry.get("run_id")) and entry.get("host"):
            runs.append(entry)
    return {"hosts": hosts, "runs": runs, "name": doc.get("name") or path.parent.name}


def read_runs(paths, rules: Rules | None = None, round: str | None = None) -> Collection:
    """Every run under ``paths`` (folders or files), and everything skipped, with reasons.
    ``round``: the published round (lab/data/rounds.yml) whose rules score MLLOG logs."""
    rules = rules or default_rules()
    ctx = _Context(rules, roundtree.known_round(rules, round))
    inputs = []
    for p in paths:
        p = Path(p)
        inputs.append(str(p))
        if not utf8(p):
            raise ConfigError(f"{printable(p)}: its name is not UTF-8 text (bytes of another encoding): rename it")
        if not existing(p):
            raise ConfigError(f"{p}: no such file or directory")
        before = len(ctx.runs) + len(ctx.skipped) + ctx.repeats
        if p.is_file():
            _read_plain(ctx, p, p.parent, explicit=True)
        elif p.is_dir():
            _walk(ctx, p)
        else:  # a FIFO, a socket, a device (or a link to one): neither read nor listed
            raise ConfigError(f"{p}: is {bounded.kind(p)}, not a file or a folder; not read")
        if len(ctx.runs) + len(ctx.skipped) + ctx.repeats == before:
            raise ConfigError(f"{p}: no run directories or MLPerf log files found")
    ctx.runs.sort(
        key=lambda r: (
            r.bench_label,
            r.submitter or "",
            r.system_key or "",
            r.device,
            r.gpus or 0,
            r.stack,
            r.order,
            r.start_s if r.start_s is not None else 0.0,
            r.source,
        )
    )
    return Collection(runs=ctx.runs, skipped=ctx.skipped, inputs=inputs, notes=ctx.notes)


def _is_rundir(names: set[str]) -> bool:
    return STATUS in names or (MANIFEST in names and MLLOG in names)


def _walk(ctx: _Context, root: Path):
    try:
        names = set(os.listdir(root))
    except OSError as exc:
        raise ConfigError(f"{root}: cannot read ({exc.strerror or exc})") from None
    if _is_rundir(names):
        read_rundir(ctx, root)
        return
    rnd = ctx.round_of(root)
    round_tree = roundtree.summarizer_scored(ctx.rules, rnd)
    for dirpath, dirnames, filenames in bounded.walk(root, skip=ctx.skip):
        here = Path(dirpath)
        filenames = _utf8_names(ctx, here, dirnames, filenames)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        names = set(filenames)
        if round_tree and roundtree.below_benchmark(here):
            ctx.skip(
                here,
                f"not read: the runs of a {rnd} result tree are the {roundtree.RESULT_FILE} "
                "files of a benchmark folder (results/<system>/<benchmark>/)",
            )
            dirnames[:] = []
            continue
        if here != root and (_is_rundir(names) or ctx.planned_dir(here)):
            read_rundir(ctx, here)
            dirnames[:] = []
            continue
        if "sweep.json" in names:
            _missing_planned_runs(ctx, here)
        for name in sorted(filenames):
            path = here / name
            if name.endswith(".launch.log") and os.path.isdir(here / name[: -len(".launch.log")]):
                continue  # a sweep's launch log beside its run directory: not a training log
            suffix = path.suffix.lower()
            if suffix in LOG_SUFFIXES or ("log" in name.lower() and suffix not in SOURCE_SUFFIXES):
                if round_tree and roundtree.in_benchmark_folder(path) and not roundtree.is_run_file(path):
                    ctx.skip(path, f"not a run: a {rnd} result tree's runs are its {roundtree.RESULT_FILE} files")
                    continue
                _read_plain(ctx, path, root, explicit=False)


def _utf8_names(ctx: _Context, here: Path, dirnames: list[str], filenames: list[str]) -> list[str]:
    """The file names of ``here`` that are UTF-8 text (``dirnames`` pruned to those in place); each other name is
    skipped, shown escaped: nothing a report writes could hold it."""
    for name in dirnames + filenames:
        if not utf8(name):
            ctx.skip(printable(here / name), "its name is not UTF-8 text (bytes of another encoding): not read")
    dirnames[:] = [d for d in dirnames if utf8(d)]
    return [f for f in filenames if utf8(f)]


def _missing_planned_runs(ctx: _Context, sweep_dir: Path):
    sweep = ctx.sweep(sweep_dir)
    if sweep is None:
        why = ctx.sweep_unused(sweep_dir)
        ctx.skip(sweep_dir / "sweep.json", f"sweep.json {why}; its run directories are read without host facts")
        return
    for i, entry in enumerate(sweep["runs"]):
        run_id = entry.get("id") or entry.get("run_id")
        rundir = paths.child(
            sweep_dir,
            entry["host"],
            run_id,
            what=f"{sweep_dir / 'sweep.json'}: runs[{i}] (host {entry['host']!r}, run {run_id!r})",
        )
        ctx.planned[paths.real(rundir)] = entry
        try:
            os.lstat(rundir)
        except (FileNotFoundError, NotADirectoryError):
            what = "has no run directory"
        except OSError:  # a folder on its way that may not be searched: the search lists that folder
            continue
        else:
            if os.path.isdir(rundir):
                continue
            what = f"is {bounded.kind(rundir)}, not a run directory"
        state = entry.get("state") or "unknown"
        why = entry.get("reason")
        ctx.skip(rundir, f"planned run {what} (sweep state: {state}" + (f"; {why}" if why else "") + ")")


def _read_plain(ctx: _Context, path: Path, root: Path, explicit: bool):
    """The runs of one log file; a FIFO, socket or device is passed over, or listed as skipped (lab.core.bounded
    says what it is) where it is named like a log."""
    # os.path's tests, not pathlib's: a file in a folder that may be listed but not searched is a skip, not a
    # PermissionError (Python 3.11's Path.is_file raises it)
    if not (os.path.isfile(path) or os.path.islink(path) or explicit or named_like_log(path)):
        return
    if not ctx.first_visit(path):
        return
    text = read_text(ctx, path, root)
    if text is not None:
        read_plain(ctx, path, root, text, explicit)
