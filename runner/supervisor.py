"""``python -m runner run WORKLOAD --out RUN_DIR ...``: the supervisor.

Checks the request (bad input: one line, exit 2, nothing written), creates the
run directory, writes the manifest, samples telemetry, starts the workload
processes (runner/launch.py), stops them on SIGTERM/SIGINT or at the time
limit, and always ends with status.json and SHA256SUMS. It imports no
deep-learning framework, so that it starts fast and can drive a workload that
runs under another interpreter (``--python``).
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shlex
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from runner import __version__, launch, rundir
from runner.runplan import add_arguments, plan  # noqa: F401  (runner/cli.py calls supervisor.add_arguments)
from runner.runplan import fail as _fail

GRACE_S = 20.0  # how long stopped workload processes get to log their end
POLL_S = 0.2


def _minimal_probe(gpus: list[int]) -> dict:
    """Host facts without runner.probe: enough to identify the host and stack."""
    from importlib import metadata

    def version(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    os_name = None
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {
        "source": "minimal (runner.probe is not available)",
        "host": {
            "hostname": socket.gethostname(),
            "os": os_name,
            "kernel": platform.release(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "frameworks": {
            "torch": version("torch"),
            "tensorflow": version("tensorflow"),
            "mlperf-logging": version("mlperf-logging"),
            "numpy": version("numpy"),
        },
        "gpus": [{"index": i} for i in gpus],
    }


def _probe(gpus: list[int]) -> dict:
    try:
        from runner import probe as _probe_mod

        gather = _probe_mod.gather
    except (ImportError, AttributeError):
        return _minimal_probe(gpus)
    try:
        return gather(gpu_indices=gpus)
    except Exception as exc:  # the run goes on; the manifest says what went wrong
        doc = _minimal_probe(gpus)
        doc["source"] = f"minimal (runner.probe failed: {type(exc).__name__}: {exc})"
        return doc


class _Telemetry:
    """runner.telemetry.Sampler when available and GPUs are used, else a header-only file."""

    def __init__(self, gpus: list[int], path: Path, interval_s: float = 1.0):
        self.sampler = None
        self.note = None
        if gpus:
            try:
                from runner.telemetry import Sampler
            except ImportError:
                self.note = "runner.telemetry is not available: telemetry.csv holds the header only"
            else:
                try:
                    self.sampler = Sampler(gpus, path, interval_s)
                    self.sampler.start()
                except Exception as exc:
                    self.sampler = None
                    self.note = f"telemetry sampler failed ({type(exc).__name__}: {exc})"
        if self.sampler is None:
            rundir.write_telemetry_header(path)

    def stop(self):
        if self.sampler is not None:
            try:
                self.sampler.stop()
            except Exception as exc:
                self.note = f"telemetry sampler failed at stop ({type(exc).__name__}: {exc})"


def _last_error_line(stdout_log: Path) -> str:
    try:
        lines = [ln.strip() for ln in stdout_log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    for ln in reversed(lines):
        if ln and not ln.startswith("[runner]"):
            return ln[:300]
    return ""


def _make_run_dir(args, out: Path) -> None:
    """The run directory and its stdout.log, or one line and exit 2 where it cannot be (nothing started)."""
    problem = rundir.run_dir_problem(out)  # a link or a FIFO planted where the run writes: nothing started
    if problem:
        _fail(f"--out {args.out!r}: {problem}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        rundir.open_file(out / rundir.STDOUT, append=True).close()
    except OSError as exc:  # e.g. under /proc: nothing is written, nothing started
        _fail(f"--out {args.out!r}: cannot create the run directory there ({exc.strerror or exc})")


def _worker_spec(args, p: dict, seed: int, out: Path, tmp: Path, t_launch: float) -> dict:
    """What the worker processes are told (spec.json)."""
    return {
        "workload": p["workload"],
        "entry": p["entry"],
        "scale": args.scale,
        "mode": args.mode,
        "seed": seed,
        "data": str(Path(args.data).resolve()) if args.data else None,
        "precision": args.precision,
        "framework": args.framework,
        "gpus": p["gpus"],
        "run_dir": str(out.resolve()),
        "result_path": str(tmp / "result.json"),
        "t_launch": t_launch,
        "compile": (not args.no_compile) and (bool(p["gpus"]) or args.compile),
        "measure_s": args.measure_seconds,
        "max_epochs": args.max_epochs,
        "warmup_steps": args.warmup_steps,
        "drop_caches": args.scale == "full" and args.mode == "ttt",
        "cache_dir": str(p["cache_dir"]) if p["cache_dir"] is not None else None,
        "settings": p.get("settings") or {},  # --set: replaces the scale's settings (checked by runplan)
    }


def _manifest(args, p: dict, seed: int, cmd, env: dict) -> dict:
    """manifest.json: the runner, the command, its options, the launch and the probe of the GPUs."""
    return {
        "schema": rundir.MANIFEST_SCHEMA,
        "contract": rundir.CONTRACT_VERSION,
        "runner_version": __version__,
        "runner": _version_line(),
        "command": shlex.join([sys.executable, "-m", "runner"] + sys.argv[1:]),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "command"},
        "seed": seed,
        "gpus": p["gpus"],
        "world_size": p["world_size"],
        "launch": cmd,
        "launch_env": {k: env[k] for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")},
        "probe": _probe(p["gpus"]),
    }


def _wait(procs, args, t_launch: float, abort_reason: list[str], old: dict):
    """The workers' exit code; past ``--max-minutes`` or on a signal they are stopped (GRACE_S, then killed)."""
    rc = None
    deadline = t_launch + args.max_minutes * 60 if args.max_minutes else None
    while rc is None:
        rc = procs.wait(POLL_S)
        if rc is not None:
            break
        if deadline is not None and time.time() > deadline and not abort_reason:
            abort_reason.append(f"time limit of {args.max_minutes:g} minutes reached")
        if abort_reason:
            for s in old:  # a second Ctrl-C must not interrupt the cleanup
                signal.signal(s, signal.SIG_IGN)
            rc = procs.stop(GRACE_S)
    return rc


def _read_result(path: Path) -> dict | None:
    """The workers' result.json (None when absent or not JSON)."""
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            return None
    return None


def _log_traceback(stdout_log: Path) -> None:
    """The runner's own fault, its traceback into stdout.log (each line marked [runner])."""
    import traceback

    with rundir.open_file(stdout_log, append=True) as f:
        f.write("[runner] " + traceback.format_exc().replace("\n", "\n[runner] ") + "\n")


def _close_mllog(mlpath: Path, outcome: str, reason: str) -> None:
    """mllog.log exists after every run; an aborted run's log gets its closing events."""
    rundir.open_file(mlpath, append=True).close()
    if outcome == "aborted":
        from runner.mllog import close_aborted

        close_aborted(mlpath, reason)


def _status(
    args, p: dict, seed: int, doc: dict | None, start_iso: str, exit_code: int, outcome: str, reason: str, result: dict
) -> dict:
    """status.json's document."""
    return rundir.status_document(
        runner_version=__version__,
        workload=p["workload"],
        benchmark=p["entry"]["benchmark"],
        framework=args.framework,
        mode=args.mode,
        scale=args.scale,
        seed=seed,
        precision=(doc or {}).get("precision", args.precision),
        gpus=p["gpus"],
        world_size=p["world_size"],
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        start=start_iso,
        end=rundir.utc_now(),
        exit_code=exit_code,
        outcome=outcome,
        reason=reason,
        result=result,
    )


def main(args) -> int:
    t_launch = time.time()
    p = plan(args)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    out: Path = p["out"]
    _make_run_dir(args, out)
    start_iso = rundir.iso(t_launch)
    abort_reason: list[str] = []
    internal: list[str] = []

    def on_signal(signum, frame):
        if not abort_reason:
            abort_reason.append(f"stopped by {signal.Signals(signum).name}")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    tmp = Path(tempfile.mkdtemp(prefix="gpulab-run-"))
    stdout_log = out / rundir.STDOUT
    tele = None
    procs = None
    doc = None
    rc = None
    xid0, probed = None, []
    try:
        spec = _worker_spec(args, p, seed, out, tmp, t_launch)
        spec_path = tmp / "spec.json"
        cmd = launch.worker_command(
            p["python"],
            spec_path,
            nprocs=p["nprocs"],
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            rdzv=args.rdzv_endpoint,
            run_id=f"gpulab-{p['workload']}-{seed}",
        )
        env = launch.child_env(p["gpus"], cache_dir=p["cache_dir"], nprocs=p["nprocs"])
        manifest = _manifest(args, p, seed, cmd, env)
        rundir.write_json(out / rundir.MANIFEST, manifest)
        if p["gpus"]:  # the XIDs the kernel log has now: those that come during the run go into xid.json
            from runner import health

            probed = manifest["probe"].get("gpus") or []
            xid0 = health.xid_baseline(probed)
        tele = _Telemetry(p["gpus"], out / rundir.TELEMETRY)
        print(
            f"[runner] {p['workload']} {args.mode} {args.scale} seed {seed} on "
            f"{'GPUs ' + ','.join(map(str, p['gpus'])) if p['gpus'] else 'CPU'} "
            f"({p['world_size']} process{'es' if p['world_size'] > 1 else ''}): {out}",
            flush=True,
        )
        if not abort_reason:
            spec_path.write_text(json.dumps({**spec, "t_spawn": time.time()}), encoding="utf-8")  # runner.phases
            procs = launch.Processes(cmd, env, stdout_log, cwd=tmp)
            rc = _wait(procs, args, t_launch, abort_reason, old)
            procs.signal_group(signal.SIGKILL)  # no straggler survives its leader
        doc = _read_result(tmp / "result.json")
    except Exception as exc:  # a fault of the runner itself: still leave a complete run directory
        _log_traceback(stdout_log)
        internal.append(f"runner error: {type(exc).__name__}: {exc}")
    finally:
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        if procs is not None:
            procs.close()
        if tele is not None:
            tele.stop()
        if internal and not abort_reason:
            outcome, reason = "failed", internal[0]
        else:
            outcome, reason = _outcome(abort_reason, doc, rc, args.node_rank, stdout_log)
        exit_code = _record(args, p, seed, doc, start_iso, outcome, reason, tele, (xid0, probed))
        _rmtree(tmp)
        for s, h in old.items():
            signal.signal(s, h)
    print(f"[runner] {outcome}: {reason}", flush=True)
    return exit_code


def _record(args, p: dict, seed: int, doc, start_iso: str, outcome: str, reason: str, tele, xids: tuple) -> int:
    """Close the run directory: the MLLOG's run_stop, status.json, the outcome line of stdout.log, the health
    epilogue (``xids``: the XID baseline and the probed GPUs), SHA256SUMS; the run's exit code."""
    out: Path = p["out"]
    _close_mllog(out / rundir.MLLOG, outcome, reason)
    exit_code = 0 if outcome == "success" else 1
    result = (doc or {}).get("result") or {}
    if tele is not None and tele.note:
        result.setdefault("notes", []).append(tele.note)
    status = _status(args, p, seed, doc, start_iso, exit_code, outcome, reason, result)
    with rundir.open_file(out / rundir.STDOUT, append=True) as f:
        f.write(f"[runner] outcome {outcome}: {reason}\n")
    xid0, probed = xids
    if xid0 is not None or outcome in ("failed", "aborted"):
        from runner import health

        health.epilogue(out, xid0, probed, failed=outcome in ("failed", "aborted"))
    rundir.write_json(out / rundir.STATUS, status)
    rundir.write_sums(out)
    return exit_code


def _outcome(abort_reason, doc, rc, node_rank, stdout_log) -> tuple[str, str]:
    if abort_reason:
        return "aborted", abort_reason[0]
    if doc is not None:
        outcome, reason = doc.get("outcome", "failed"), doc.get("reason") or ""
        if outcome == "aborted":  # stopped from outside the supervisor (a signal to a rank)
            return "aborted", reason or "stopped by a signal"
        if outcome == "success" and rc not in (0, None):
            return "failed", f"{reason}; but the workload processes exited with code {rc}"
        return outcome, reason
    if rc is None:
        return "aborted", "stopped before the workload started"
    if rc == 0 and node_rank != 0:
        return "success", f"node {node_rank}'s processes ended normally (rank 0 on node 0 holds the result)"
    last = _last_error_line(stdout_log)
    return "failed", f"workload processes exited with code {rc}" + (f": {last}" if last else "")


def _version_line() -> str:
    from runner.cli import version_string

    return version_string()


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
