"""One gpulab run directory (runner/README.md) read into a ``Run``: SHA256SUMS verified first
(lab.results.checksums), then status.json, manifest.json (device, stack, host: the precedence rules are
lab.results.logreader' docstring's), mllog.log (lab.results.mllog) and telemetry.csv (lab.results.telemetry).
lab.results.logreader finds the directories and passes its discovery context (``ctx``: rules, skip, sweep facts) in.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from lab.core import bounded, fields, limits, plaindata
from lab.core.errors import ConfigError
from lab.results import checksums, compliance
from lab.results.logfacts import LogProblem, integer as _int, num as _num
from lab.results.plainlogs import parse_log
from lab.results.runs import Run
from lab.results.telemetry import read_telemetry
from runner.rundir import MANIFEST, MLLOG, OUTCOMES, STATUS, TELEMETRY

MAX_LOG_BYTES = limits.LOG_BYTES
KEEP_BYTES = {MLLOG: limits.LOG_BYTES, TELEMETRY: limits.TELEMETRY_BYTES}


def read_json(path: Path, root: Path | None = None):
    """A JSON file read with bounds (a regular file inside ``root``, default its folder); None if not."""
    try:
        return bounded.read_json(path, root=root or Path(path).parent, limit=limits.JSON_BYTES)
    except bounded.Unreadable:
        return None


def read_text(ctx, path: Path, root: Path | None = None) -> str | None:
    """A log read with bounds (lab.core.bounded: a regular file inside ``root``, capped); skipped if not."""
    try:
        return bounded.read_text(path, root=root or path.parent, limit=MAX_LOG_BYTES, errors="replace")
    except bounded.Unreadable as exc:
        ctx.skip(path, exc.reason)
        return None


def _first(d: dict, *keys):
    for k in keys:
        v = d.get(k)
        if v not in (None, "", "auto"):
            return v
    return None


def verify_sums(rundir: Path, keep: tuple[str, ...] = ()) -> tuple[str | None, dict[str, bytes]]:
    """(None, kept) when SHA256SUMS verifies (lab.results.checksums), else (why not, {}).

    ``kept`` holds the bytes of the files named in ``keep`` that were verified,
    so that they are read once.
    """
    checked = checksums.compare(rundir, keep={k: KEEP_BYTES.get(k, MAX_LOG_BYTES) for k in keep})
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


def manifest_gpus(manifest: dict) -> list[dict]:
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
    parts = []  # every version; the label keeps driver, CUDA and framework
    for key, label in (
        ("driver", "driver"),
        ("cuda_toolkit", "cuda"),
        ("cuda", "cuda"),
        ("cudnn", "cudnn"),
        ("nccl", "nccl"),
    ):
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


def _read_status(ctx, rundir: Path) -> dict | None:
    """status.json of ``rundir`` when the run ended with a known outcome; None (said as a skip) otherwise."""
    try:
        os.lstat(rundir / STATUS)
    except OSError as exc:  # a folder that may be listed but not searched, too
        entry = ctx.planned_dir(rundir)
        why = "incomplete run directory: no status.json (still running or interrupted)"
        if not isinstance(exc, FileNotFoundError):
            why = f"status.json cannot read ({exc.strerror or exc})"
        if entry:
            why += f"; sweep state: {entry.get('state') or 'unknown'}"
            if entry.get("reason"):
                why += f": {entry['reason']}"
        ctx.skip(rundir, why)
        return None
    try:
        status = plaindata.loads(bounded.read_text(rundir / STATUS, root=rundir, limit=limits.JSON_BYTES))
    except bounded.Unreadable as exc:
        ctx.skip(rundir, f"status.json {exc.reason}")
        return None
    except (ValueError, RecursionError):
        status = None
    if not isinstance(status, dict):
        ctx.skip(rundir, "status.json is not a readable JSON object")
        return None
    if status.get("outcome") not in OUTCOMES:
        ctx.skip(rundir, f"status.json: outcome {status.get('outcome')!r} is not one of {', '.join(OUTCOMES)}")
        return None
    try:  # the GPUs counted: a million as [0, 0, ...] is no run
        fields.run_gpus(status.get("gpus"), status.get("nnodes"), status.get("world_size"))
    except ConfigError as exc:
        ctx.skip(rundir, exc.message)
        return None
    return status


def _host_of(ctx, rundir: Path, manifest: dict) -> tuple[str | None, dict]:
    """The run's host and what sweep.json says of it (in a sweep, ``<host>/`` is the lab's inventory name)."""
    sweep = ctx.sweep(rundir.parent.parent) if os.path.isfile(rundir.parent.parent / "sweep.json") else None
    host = _manifest_host(manifest)
    host_facts = {}
    if sweep:
        host_facts = sweep["hosts"].get(rundir.parent.name) or (sweep["hosts"].get(host) if host else None) or {}
        if rundir.parent.name in sweep["hosts"] or not host:
            host = rundir.parent.name
    return host, host_facts


def _read_log(ctx, rundir: Path, kept: dict, rules):
    """``(text, facts, problem)`` of the run's mllog.log (verified bytes when SHA256SUMS kept them)."""
    log_facts, log_problem = None, None
    if MLLOG in kept:
        text = kept[MLLOG].decode("utf-8", errors="replace")
    else:
        text = read_text(ctx, rundir / MLLOG) if os.path.lexists(rundir / MLLOG) else None
    if text is None:
        log_problem = "no mllog.log"
    else:
        try:
            log_facts = parse_log(text, rules)
        except LogProblem as exc:
            log_problem = f"mllog.log: {exc}"
    return text, log_facts, log_problem


def _device_of(rules, rundir: Path, manifest: dict, idx, host_facts: dict, sources: dict) -> str | None:
    """The run's device: status.json (no GPUs), manifest.json's GPUs, sweep.json's host, or a folder name."""
    if idx == []:
        sources["device"] = "status.json (no GPUs)"
        return "CPU"
    names = []
    for g in manifest_gpus(manifest):
        gi = _int(g.get("index"))
        if idx is None or gi is None or gi in idx:
            n = _first(g, "name", "model", "product_name")
            if n:
                names.append(rules.device(n))
    names = sorted(set(names))
    if names:
        sources["device"] = "manifest.json"
        return names[0] if len(names) == 1 else "mixed(" + "+".join(names) + ")"
    if host_facts and _first(host_facts, "gpu_model", "gpulab_gpu_model", "device", "model"):
        sources["device"] = "sweep.json"
        return rules.device(_first(host_facts, "gpu_model", "gpulab_gpu_model", "device", "model"))
    for name in [rundir.name, rundir.parent.name, rundir.parent.parent.name]:
        d, c = rules.find_system(name)
        if d:
            sources["device"] = f"folder name {name!r}"
            return d
    return None


def _stack_of(manifest: dict, host_facts: dict, sources: dict) -> tuple[str, str | None]:
    """``(stack label, every version)``: the manifest's profile, sweep.json's stack, or the manifest's versions."""
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
    return stack, all_versions


def read_rundir(ctx, rundir: Path):
    if not ctx.first_visit(rundir):
        return
    rules = ctx.rules
    checked = _checked(ctx, rundir)
    if checked is None:
        return
    status, kept = checked
    manifest = read_json(rundir / MANIFEST)
    notes = []
    if not isinstance(manifest, dict):
        if os.path.lexists(rundir / MANIFEST):
            notes.append("manifest.json unreadable")
        manifest = {}
    host, host_facts = _host_of(ctx, rundir, manifest)
    text, log_facts, log_problem = _read_log(ctx, rundir, kept, rules)
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
    device = _device_of(rules, rundir, manifest, idx, host_facts, sources)
    if device is None:
        device = "unknown"
        notes.append("device not in manifest.json, sweep.json or folder names")
    stack, stack_versions = _stack_of(manifest, host_facts, sources)

    energy, power = _energy(rundir, kept, idx, notes)
    run = Run(
        source=str(rundir),
        fmt="rundir",
        benchmark=bench,
        device=device,
        gpus=count,
        stack=stack,
        scale=status.get("scale"),
        mode=status.get("mode") or "ttt",
        host=host,
        seed=_int(status.get("seed")),
        outcome=status["outcome"],
        stack_versions=stack_versions,
        reason=str(status.get("reason") or ""),
        energy_j=energy,
        avg_power_w=power,
        facts_from=", ".join(f"{k}: {v}" for k, v in sources.items()),
        notes=notes,
    )
    if text is not None and log_facts:
        verdict = compliance.check(text, "rundir", bench)
        run.judged(verdict)
    else:
        run.compliance_note = "not checked: no readable mllog.log"
    _take_log(run, log_facts, log_problem, status)
    _take_result(run, status)
    ctx.runs.append(run)


def _checked(ctx, rundir: Path) -> tuple[dict, dict] | None:
    """(status.json, the files SHA256SUMS verified and kept) of a run directory to report; None (with its
    Skipped entry where one is due) for one whose files do not verify or that is not node 0's."""
    status = _read_status(ctx, rundir)
    if status is None:
        return None
    problem, kept = verify_sums(rundir, keep=(MLLOG, TELEMETRY))
    if problem:
        ctx.skip(rundir, problem)
        return None
    node_rank = _int(status.get("node_rank")) or 0
    if node_rank > 0:
        ctx.skip(
            rundir,
            f"node {node_rank} of a {_int(status.get('nnodes')) or '?'}-node run: "
            "the run is reported from node 0's run directory",
        )
        return None
    try:
        first = ctx.first_of_run(checksums.run_key(rundir), rundir)
    except bounded.Unreadable as exc:  # changed since it was verified
        ctx.skip(rundir, exc.reason)
        return None
    if first is not None:
        ctx.skip(rundir, f"a copy of {first} (the same SHA256SUMS and status.json): the run is counted once")
        return None
    return status, kept


def _energy(rundir: Path, kept: dict, idx: list | None, notes: list[str]) -> tuple[float | None, float | None]:
    """(energy in joules, mean power in watts) from telemetry.csv, None where there is none; its note joins
    ``notes``."""
    tele = rundir / TELEMETRY
    if not (TELEMETRY in kept or os.path.lexists(tele)):
        return None, None
    energy, power, tnote = read_telemetry(tele, idx, kept.get(TELEMETRY))
    if tnote:
        notes.append(tnote)
    return energy, power


def _take_log(run, log_facts, log_problem, status: dict) -> None:
    """The run's clock, outcome and figures from its log (the log's clock wins), else from status.json."""
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
            run.notes.append(
                f"mllog.log says {log_facts.outcome}, status.json says {status['outcome']}: the log's clock is used"
            )
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


def _take_result(run, status: dict) -> None:
    """status.json's ``result``: its epochs, throughput, quality and target over the log's."""
    result = status.get("result") if isinstance(status.get("result"), dict) else {}
    if result:  # a figure past limits.MEASUREMENT_ABS (1e308 samples/s) is none: it would plot as inf
        if limits.measurement(_num(result.get("epochs"))) is not None:
            run.epochs = _num(result["epochs"])
        if limits.measurement(_num(result.get("samples_per_s"))):
            run.samples_per_s = _num(result["samples_per_s"])
            run.throughput_basis = "status.json result.samples_per_s"
            if result.get("sample_unit"):
                run.sample_unit = str(result["sample_unit"])
        if result.get("quality") is not None and run.quality is None:
            run.quality = result["quality"]
        if result.get("target") is not None:
            run.target = result["target"]
