"""Find training runs in any tree of logs and read each into one ``Run`` (lab.runs).

What is read
------------
- gpulab run directories (runner/README.md): a folder with ``status.json`` (and
  ``manifest.json``, ``mllog.log``, ``telemetry.csv``, ``SHA256SUMS``). The
  folder is not searched further.
- Plain MLPerf log files anywhere else (lab.plainlogs): every ``*.log``,
  ``*.txt``, ``*.out``, ``*.err`` or extension-less file that holds ``:::MLLOG``
  (lab.mllogparse), ``:::MLL`` (v0.6, lab.v06log) or ``:::MLPv0.5.0``
  (lab.v05log) lines. In a published MLPerf result tree each log's system is
  its results folder (lab.resulttree).
- ``sweep.json`` of a sweep directory ``results/<sweep>/``: host facts for its
  run directories ``<host>/<run id>/``, and planned runs that left no run
  directory (listed as skipped).

Per run directory
-----------------
time to train, epochs, throughput: from mllog.log (lab.mllogparse), where the
               runner's status.json result gives samples/s and epochs, those.
energy         telemetry.csv: power_w integrated over time_s (trapezoids) per
               GPU of the run, summed; average power = sum of per-GPU means.
compliance     mlperf-logging's checker on mllog.log (lab.compliance).
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

Bad input never stops a report: a file or folder that cannot be used becomes a
``Skipped`` entry with a one-line reason. A path that does not exist, or holds
no run directory and no log file at all, is a ``ConfigError``. Nothing above
an input path is read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from datetime import datetime
from pathlib import Path

import numpy as np

from lab import bounded, checksums, compliance, limits, paths
from lab.errors import ConfigError
from lab.logfacts import LogFacts, LogProblem, integer as _int, num as _num
from lab.mlperf import Rules, default_rules
from lab.plainlogs import detect_format, parse_log, parse_runs, read_plain
from lab.resulttree import TreeReader
from lab.runs import Collection, Run, Skipped, system_label

__all__ = ["Collection", "LogFacts", "LogProblem", "Run", "Skipped", "collect", "detect_format",
           "parse_log", "parse_runs", "read_telemetry", "system_label", "verify_sums"]

LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ""}
# Program sources that a result tree ships beside its logs (the loggers mlperf_log.py, NcfLogger.scala):
# named like logs and holding the markers in their strings, they are never logs themselves.
SOURCE_SUFFIXES = {".py", ".pyc", ".scala", ".java", ".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".sh", ".go",
                   ".rs", ".js", ".ts", ".ipynb", ".proto", ".md", ".html"}
MAX_LOG_BYTES = limits.LOG_BYTES
KEEP_BYTES = {"mllog.log": limits.LOG_BYTES, "telemetry.csv": limits.TELEMETRY_BYTES}

# --------------------------------------------------------------------------
# Telemetry
# --------------------------------------------------------------------------

def read_telemetry(path: Path, gpus: list[int] | None = None, data: bytes | None = None
                   ) -> tuple[float | None, float | None, str | None]:
    """(energy J, average power W, note) from a telemetry.csv.

    Energy is the trapezoid integral of power_w over time_s for each GPU, summed
    over the GPUs of the run (all GPUs in the file when none of the run's
    indices appear there). Average power is the sum of each GPU's energy over
    its sampled span. A GPU with fewer than two samples contributes nothing;
    rows with a missing or non-numeric time or power are left out.
    """
    if data is None:
        try:
            data = bounded.read_bytes(path, root=Path(path).parent, limit=limits.TELEMETRY_BYTES)
        except bounded.Unreadable as exc:
            return None, None, f"telemetry.csv {exc.reason}"
    first, _, _ = data.partition(b"\n")
    header = [h.strip() for h in first.decode("utf-8", errors="replace").strip().split(",")]
    if header == [""]:
        return None, None, None
    if not {"time_s", "gpu", "power_w"} <= set(header):
        return None, None, "telemetry.csv lacks time_s, gpu or power_w"
    cols = (header.index("time_s"), header.index("gpu"), header.index("power_w"))
    series = _telemetry_numpy(data, cols)
    if series is None:
        series = _telemetry_python(data, cols)
    if gpus:
        wanted = {str(g) for g in gpus}
        if wanted & series.keys():
            series = {g: s for g, s in series.items() if g in wanted}
    energy = power = 0.0
    used = 0
    for t, p in series.values():
        if len(t) < 2:
            continue
        order = np.argsort(t, kind="stable")
        t, p = t[order], p[order]
        span = float(t[-1] - t[0])
        if span <= 0:
            continue
        e = float(np.sum(np.diff(t) * (p[1:] + p[:-1]) / 2.0))
        energy += e
        power += e / span
        used += 1
    if not used:
        return None, None, None
    return energy, power, None


def _gpu_key(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _telemetry_numpy(data: bytes, cols) -> dict | None:
    """Fast path: every row numeric in the three columns. None when not so."""
    it, ig, ip = cols
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.loadtxt(io.BytesIO(data), delimiter=",", skiprows=1, usecols=(it, ig, ip),
                           ndmin=2, quotechar='"', dtype=float)
    except (ValueError, IndexError):
        return None
    a = a[np.isfinite(a).all(axis=1)]
    out = {}
    for g in np.unique(a[:, 1]):
        rows = a[a[:, 1] == g]
        out[_gpu_key(g)] = (rows[:, 0], rows[:, 2])
    return out


def _telemetry_python(data: bytes, cols) -> dict:
    it, ig, ip = cols
    need = max(cols)
    series: dict[str, tuple[list, list]] = {}
    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace"), newline=""))
    next(reader, None)
    for row in reader:
        if len(row) <= need:
            continue
        try:
            t, p = float(row[it]), float(row[ip])
        except ValueError:
            continue
        if not (math.isfinite(t) and math.isfinite(p)):
            continue
        g = row[ig].strip()
        try:
            g = _gpu_key(float(g))
        except ValueError:
            pass
        ts, ps = series.setdefault(g, ([], []))
        ts.append(t)
        ps.append(p)
    return {g: (np.array(ts), np.array(ps)) for g, (ts, ps) in series.items()}


# --------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------

class _Context:
    def __init__(self, rules: Rules):
        self.rules = rules
        self.runs: list[Run] = []
        self.skipped: list[Skipped] = []
        self._sweeps: dict[Path, dict | None] = {}
        self._systems_dirs: dict[Path, bool] = {}
        self._json_cache: dict[Path, dict | None] = {}
        self._seen: set[Path] = set()
        self.repeats = 0
        self.planned: dict[Path, dict] = {}
        self._trees: dict[Path, TreeReader] = {}

    def tree(self, root: Path) -> TreeReader:
        """The published-result-tree reader of one input path."""
        if root not in self._trees:
            self._trees[root] = TreeReader(root, self.rules)
        return self._trees[root]

    def planned_dir(self, path: Path) -> dict | None:
        """The sweep.json entry whose run directory ``path`` is, if any."""
        return self.planned.get(path.resolve()) if self.planned else None

    def first_visit(self, path: Path) -> bool:
        """False for a file or folder already read (overlapping input paths)."""
        key = path.resolve()
        if key in self._seen:
            self.repeats += 1
            return False
        self._seen.add(key)
        return True

    def skip(self, source, reason):
        self.skipped.append(Skipped(str(source), reason))

    # sweep.json ----------------------------------------------------------
    def sweep(self, sweep_dir: Path) -> dict | None:
        if sweep_dir not in self._sweeps:
            self._sweeps[sweep_dir] = _load_sweep(sweep_dir / "sweep.json")
        return self._sweeps[sweep_dir]

    # MLPerf systems/<name>.json --------------------------------------------
    def systems_file(self, log: Path, root: Path) -> tuple[dict, str] | None:
        anchors = [p for p in log.parents if _is_within(p, root)]   # never above the input
        for anchor in anchors:
            sysdir = anchor / "systems"
            if sysdir not in self._systems_dirs:
                self._systems_dirs[sysdir] = sysdir.is_dir()
            if not self._systems_dirs[sysdir]:
                continue
            try:
                parts = log.relative_to(anchor).parts[:-1]
            except ValueError:
                continue
            for part in parts:
                f = sysdir / f"{part}.json"
                if f not in self._json_cache:
                    self._json_cache[f] = _read_json(f) if f.is_file() else None
                if isinstance(self._json_cache[f], dict):
                    return self._json_cache[f], f"{f.name}"
        return None


def _is_within(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def _read_json(path: Path, root: Path | None = None):
    """A JSON file read with bounds (a regular file inside ``root``, default its folder); None if not."""
    try:
        return bounded.read_json(path, root=root or Path(path).parent, limit=limits.JSON_BYTES)
    except bounded.Unreadable:
        return None


def _load_sweep(path: Path) -> dict | None:
    doc = _read_json(path)
    if not isinstance(doc, dict):
        return None
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
    if isinstance(raw_runs, dict):
        raw_runs = [dict(v, id=v.get("id", k)) for k, v in raw_runs.items() if isinstance(v, dict)]
    for entry in raw_runs if isinstance(raw_runs, list) else []:
        if isinstance(entry, dict) and (entry.get("id") or entry.get("run_id")) and entry.get("host"):
            runs.append(entry)
    return {"hosts": hosts, "runs": runs, "name": doc.get("name") or path.parent.name}


def _first(d: dict, *keys):
    for k in keys:
        v = d.get(k)
        if v not in (None, "", "auto"):
            return v
    return None


def collect(paths, rules: Rules | None = None) -> Collection:
    """Every run under ``paths`` (folders or files), and everything skipped, with reasons."""
    rules = rules or default_rules()
    ctx = _Context(rules)
    inputs = []
    for p in paths:
        p = Path(p)
        inputs.append(str(p))
        if not p.exists():
            raise ConfigError(f"{p}: no such file or directory")
        before = len(ctx.runs) + len(ctx.skipped) + ctx.repeats
        if p.is_file():
            _read_plain(ctx, p, p.parent, explicit=True)
        else:
            _walk(ctx, p)
        if len(ctx.runs) + len(ctx.skipped) + ctx.repeats == before:
            raise ConfigError(f"{p}: no run directories or MLPerf log files found")
    ctx.runs.sort(key=lambda r: (r.bench_label, r.submitter or "", r.system_key or "", r.device,
                                 r.gpus or 0, r.stack, r.order,
                                 r.start_s if r.start_s is not None else 0.0, r.source))
    return Collection(runs=ctx.runs, skipped=ctx.skipped, inputs=inputs)


def _is_rundir(names: set[str]) -> bool:
    return "status.json" in names or ("manifest.json" in names and "mllog.log" in names)


def _walk(ctx: _Context, root: Path):
    try:
        names = set(os.listdir(root))
    except OSError as exc:
        raise ConfigError(f"{root}: cannot read ({exc.strerror or exc})") from None
    if _is_rundir(names):
        _read_rundir(ctx, root)
        return
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: ctx.skip(
            e.filename, f"cannot list folder ({e.strerror})")):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        here = Path(dirpath)
        names = set(filenames)
        if here != root and (_is_rundir(names) or ctx.planned_dir(here)):
            _read_rundir(ctx, here)
            dirnames[:] = []
            continue
        if "sweep.json" in names:
            _missing_planned_runs(ctx, here)
        for name in sorted(filenames):
            path = here / name
            if name.endswith(".launch.log") and (here / name[: -len(".launch.log")]).is_dir():
                continue   # a sweep's launch log beside its run directory: not a training log
            suffix = path.suffix.lower()
            if suffix in LOG_SUFFIXES or ("log" in name.lower() and suffix not in SOURCE_SUFFIXES):
                _read_plain(ctx, path, root, explicit=False)


def _missing_planned_runs(ctx: _Context, sweep_dir: Path):
    sweep = ctx.sweep(sweep_dir)
    if sweep is None:
        ctx.skip(sweep_dir / "sweep.json", "sweep.json is not a readable JSON object; "
                 "its run directories are read without host facts")
        return
    for i, entry in enumerate(sweep["runs"]):
        run_id = entry.get("id") or entry.get("run_id")
        rundir = paths.child(sweep_dir, entry["host"], run_id,
                             what=f"{sweep_dir / 'sweep.json'}: runs[{i}] (host {entry['host']!r}, run {run_id!r})")
        ctx.planned[rundir.resolve()] = entry
        if rundir.exists():
            continue
        state = entry.get("state") or "unknown"
        why = entry.get("reason")
        ctx.skip(rundir, f"planned run has no run directory (sweep state: {state}"
                 + (f"; {why}" if why else "") + ")")


def _read_text(ctx: _Context, path: Path, root: Path | None = None) -> str | None:
    """A log read with bounds (lab.bounded: a regular file inside ``root``, capped); skipped if not."""
    try:
        return bounded.read_text(path, root=root or path.parent, limit=MAX_LOG_BYTES, errors="replace")
    except bounded.Unreadable as exc:
        ctx.skip(path, exc.reason)
        return None


def _read_plain(ctx: _Context, path: Path, root: Path, explicit: bool):
    if not (path.is_file() or path.is_symlink() or explicit) or not ctx.first_visit(path):
        return
    text = _read_text(ctx, path, root)
    if text is not None:
        read_plain(ctx, path, root, text, explicit)


def verify_sums(rundir: Path, keep: tuple[str, ...] = ()) -> tuple[str | None, dict[str, bytes]]:
    """(None, kept) when SHA256SUMS verifies (lab.checksums), else (why not, {}).

    ``kept`` holds the bytes of the files named in ``keep`` that were verified,
    so that they are read once.
    """
    checked = checksums.check(rundir, keep={k: KEEP_BYTES.get(k, MAX_LOG_BYTES) for k in keep})
    if checked.missing:
        return "no SHA256SUMS: incomplete run directory", {}
    if checked.problems:
        return checked.problems[0], {}
    return None, checked.kept


def _iso_to_unix(s) -> float | None:
    if not isinstance(s, str):
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _manifest_gpus(manifest: dict) -> list[dict]:
    """The per-GPU records of the probe (manifest.json's own ``gpus`` are indices)."""
    for holder in (manifest.get("probe"), manifest, manifest.get("host")):
        if isinstance(holder, dict) and isinstance(holder.get("gpus"), list):
            gpus = [g for g in holder["gpus"] if isinstance(g, dict)]
            if gpus:
                return gpus
    return []


def _manifest_stack(manifest: dict) -> tuple[str | None, str | None, str | None]:
    """(profile name, short version label, all versions) of the manifest's stack facts.

    The runner's manifest holds the probe document: ``probe.stack`` (driver,
    cuda_toolkit, cudnn, nccl) and ``probe.frameworks`` (torch, tensorflow).
    A stack with a ``profile`` or ``name`` (a provisioned stack profile) is
    named by it.
    """
    probe = manifest.get("probe") if isinstance(manifest.get("probe"), dict) else {}
    stack = manifest.get("stack", probe.get("stack"))
    if isinstance(stack, str):
        return stack, None, None
    stack = stack if isinstance(stack, dict) else {}
    name = _first(stack, "profile", "name", "id")
    parts = []   # every version; the label keeps driver, CUDA and framework
    for key, label in (("driver", "driver"), ("cuda_toolkit", "cuda"), ("cuda", "cuda"),
                       ("cudnn", "cudnn"), ("nccl", "nccl")):
        v = stack.get(key)
        if isinstance(v, dict):
            v = v.get("version")
        if v and not any(p.startswith(label + " ") for p in parts):
            parts.append(f"{label} {v}")
    frameworks = manifest.get("frameworks", probe.get("frameworks"))
    for fw in ("torch", "tensorflow"):
        v = (frameworks or {}).get(fw) if isinstance(frameworks, dict) else None
        v = v or stack.get(fw)
        if v:
            parts.append(f"{fw} {v}")
    short = [p for p in parts if p.split(" ")[0] in ("driver", "cuda", "torch", "tensorflow")]
    return (str(name) if name else None), (", ".join(short) or None), (", ".join(parts) or None)


def _manifest_host(manifest: dict) -> str | None:
    for holder in (manifest, manifest.get("probe") if isinstance(manifest.get("probe"), dict) else {}):
        h = holder.get("host")
        if isinstance(h, dict):
            h = _first(h, "hostname", "name", "fqdn")
        elif h is None:
            h = holder.get("hostname")
        if h:
            return str(h)
    return None


def _read_rundir(ctx: _Context, rundir: Path):
    if not ctx.first_visit(rundir):
        return
    rules = ctx.rules
    if not os.path.lexists(rundir / "status.json"):
        entry = ctx.planned_dir(rundir)
        why = "incomplete run directory: no status.json (still running or interrupted)"
        if entry:
            why += f"; sweep state: {entry.get('state') or 'unknown'}"
            if entry.get("reason"):
                why += f": {entry['reason']}"
        ctx.skip(rundir, why)
        return
    try:
        status = json.loads(bounded.read_text(rundir / "status.json", root=rundir, limit=limits.JSON_BYTES))
    except bounded.Unreadable as exc:
        ctx.skip(rundir, f"status.json {exc.reason}")
        return
    except (ValueError, RecursionError):
        status = None
    if not isinstance(status, dict):
        ctx.skip(rundir, "status.json is not a readable JSON object")
        return
    if status.get("outcome") not in ("success", "target_missed", "failed", "aborted"):
        ctx.skip(rundir, f"status.json: outcome {status.get('outcome')!r} is not one of "
                 "success, target_missed, failed, aborted")
        return
    problem, kept = verify_sums(rundir, keep=("mllog.log", "telemetry.csv"))
    if problem:
        ctx.skip(rundir, problem)
        return
    node_rank = _int(status.get("node_rank")) or 0
    if node_rank > 0:
        ctx.skip(rundir, f"node {node_rank} of a {_int(status.get('nnodes')) or '?'}-node run: "
                 "the run is reported from node 0's run directory")
        return
    manifest = _read_json(rundir / "manifest.json")
    notes = []
    if not isinstance(manifest, dict):
        if (rundir / "manifest.json").exists():
            notes.append("manifest.json unreadable")
        manifest = {}
    sweep = ctx.sweep(rundir.parent.parent) if (rundir.parent.parent / "sweep.json").is_file() else None
    host = _manifest_host(manifest)
    host_facts = {}
    if sweep:
        # In a sweep, <host>/ is the inventory name: the name the lab uses.
        host_facts = sweep["hosts"].get(rundir.parent.name) or (sweep["hosts"].get(host) if host else None) or {}
        if rundir.parent.name in sweep["hosts"] or not host:
            host = rundir.parent.name

    result = status.get("result") if isinstance(status.get("result"), dict) else {}
    log_facts, log_problem = None, None
    if "mllog.log" in kept:
        text = kept["mllog.log"].decode("utf-8", errors="replace")
    else:
        text = _read_text(ctx, rundir / "mllog.log") if os.path.lexists(rundir / "mllog.log") else None
    if text is None:
        log_problem = "no mllog.log"
    else:
        try:
            log_facts = parse_log(text, rules)
        except LogProblem as exc:
            log_problem = f"mllog.log: {exc}"
    if log_problem and status["outcome"] == "success" and status.get("mode", "ttt") == "ttt":
        ctx.skip(rundir, f"status.json says success but {log_problem}")
        return

    bench = rules.benchmark(status.get("benchmark")) or rules.benchmark(status.get("workload"))
    if bench is None and log_facts and log_facts.benchmark:
        bench = log_facts.benchmark
    bench = bench or str(status.get("benchmark") or status.get("workload") or "unknown")

    # GPU count and device.
    idx = status.get("gpus") if isinstance(status.get("gpus"), list) else None
    nnodes = _int(status.get("nnodes")) or 1
    sources = {}
    count = len(idx) * nnodes if idx is not None else _int(status.get("world_size"))
    if count is not None:
        sources["GPUs"] = "status.json"
    device = None
    if idx == []:
        device, sources["device"] = "CPU", "status.json (no GPUs)"
    else:
        names = []
        for g in _manifest_gpus(manifest):
            gi = _int(g.get("index"))
            if idx is None or gi is None or gi in idx:
                n = _first(g, "name", "model", "product_name")
                if n:
                    names.append(rules.device(n))
        names = sorted(set(names))
        if names:
            device = names[0] if len(names) == 1 else "mixed(" + "+".join(names) + ")"
            sources["device"] = "manifest.json"
        elif host_facts and _first(host_facts, "gpu_model", "gpulab_gpu_model", "device", "model"):
            device = rules.device(_first(host_facts, "gpu_model", "gpulab_gpu_model", "device", "model"))
            sources["device"] = "sweep.json"
        else:
            for name in [rundir.name, rundir.parent.name, rundir.parent.parent.name]:
                d, c = rules.find_system(name)
                if d:
                    device, sources["device"] = d, f"folder name {name!r}"
                    break
    if device is None:
        device = "unknown"
        notes.append("device not in manifest.json, sweep.json or folder names")

    profile, versions, all_versions = _manifest_stack(manifest)
    sweep_stack = _first(host_facts, "stack", "gpulab_stack", "stack_profile") if host_facts else None
    if profile:
        stack, sources["stack"] = profile, "manifest.json"
    elif sweep_stack:
        stack, sources["stack"] = str(sweep_stack), "sweep.json"
    elif versions:
        stack, sources["stack"] = versions, "manifest.json"
    else:
        stack = "unknown"
    stack_versions = all_versions

    tele = rundir / "telemetry.csv"
    energy = power = None
    if "telemetry.csv" in kept or os.path.lexists(tele):
        energy, power, tnote = read_telemetry(tele, idx, kept.get("telemetry.csv"))
        if tnote:
            notes.append(tnote)

    run = Run(source=str(rundir), fmt="rundir", benchmark=bench, device=device, gpus=count,
              stack=stack, scale=status.get("scale"), mode=status.get("mode") or "ttt",
              host=host, seed=_int(status.get("seed")), outcome=status["outcome"],
              stack_versions=stack_versions,
              reason=str(status.get("reason") or ""), energy_j=energy, avg_power_w=power,
              facts_from=", ".join(f"{k}: {v}" for k, v in sources.items()), notes=notes)
    if text is not None and log_facts:
        verdict = compliance.check(text, "rundir", bench)
        run.compliance, run.compliance_note = verdict.status, verdict.note
    else:
        run.compliance_note = "not checked: no readable mllog.log"
    if log_facts:
        run.order = ((0, log_facts.start_s),)
        run.start_s = log_facts.start_s
        run.elapsed_s = log_facts.stop_s - log_facts.start_s
        run.success = log_facts.success
        run.ttt_s = log_facts.ttt_s
        run.epochs = log_facts.epochs
        run.quality = log_facts.quality
        run.samples_per_s = log_facts.samples_per_s
        run.throughput_basis = log_facts.throughput_basis
        run.sample_unit = log_facts.sample_unit
        run.notes.extend(log_facts.warnings)
        if log_facts.seed is not None and run.seed is None:
            run.seed = log_facts.seed
        if log_facts.success != (status["outcome"] == "success") and run.mode == "ttt":
            run.notes.append(f"mllog.log says {log_facts.outcome}, status.json says {status['outcome']}: "
                             "the log's clock is used")
            run.outcome = log_facts.outcome
            run.reason = log_facts.reason
    else:
        run.notes.append(log_problem)
        run.start_s = _iso_to_unix(status.get("start"))
        end = _iso_to_unix(status.get("end"))
        if run.start_s is not None and end is not None:
            run.elapsed_s = end - run.start_s
        run.success = status["outcome"] == "success"
    if run.mode != "ttt":
        run.ttt_s = None
        run.success = status["outcome"] == "success"
        run.outcome = status["outcome"]
        run.reason = str(status.get("reason") or "")
    if result:
        if _num(result.get("epochs")) is not None:
            run.epochs = _num(result["epochs"])
        if _num(result.get("samples_per_s")):
            run.samples_per_s = _num(result["samples_per_s"])
            run.throughput_basis = "status.json result.samples_per_s"
            if result.get("sample_unit"):
                run.sample_unit = str(result["sample_unit"])
        if result.get("quality") is not None and run.quality is None:
            run.quality = result["quality"]
        if result.get("target") is not None:
            run.target = result["target"]
    ctx.runs.append(run)
