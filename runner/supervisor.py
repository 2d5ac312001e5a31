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

from runner import __version__, artifacts, launch, rundir
from runner.cli import UsageError

GRACE_S = 20.0  # how long stopped workload processes get to log their end
POLL_S = 0.2


def add_arguments(p) -> None:
    p.add_argument("workload", help="a registered workload (python -m runner list)")
    p.add_argument("--out", required=True, metavar="RUN_DIR",
                   help="run directory to create (must not exist or be empty)")
    p.add_argument("--gpus", default="all", metavar="all|N|I,J,...",
                   help="'all', a count (0 = CPU), or indices as the host numbers them; "
                        "a single index takes a trailing comma: '3,' (default: all)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: drawn and recorded)")
    p.add_argument("--mode", choices=("ttt", "throughput"), default="ttt",
                   help="train to the quality target (default) or measure samples/s")
    p.add_argument("--scale", choices=("full", "small", "tiny"), default="full",
                   help="full: real data and MLPerf target; small/tiny: generated data, smaller targets")
    p.add_argument("--data", default=None, metavar="PATH", help="prepared dataset root (needed for full ttt)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                   help="auto: bf16 on GPUs that support it, else fp32")
    p.add_argument("--framework", choices=("pytorch", "tensorflow"), default="pytorch")
    p.add_argument("--max-minutes", type=float, default=None, metavar="M",
                   help="wall-clock limit; the run is then aborted and recorded as such")
    p.add_argument("--nnodes", type=int, default=1, help="hosts taking part (multi-host torch.distributed)")
    p.add_argument("--node-rank", type=int, default=0, help="this host's rank among --nnodes")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                   help="rendezvous endpoint (needed when --nnodes > 1)")
    p.add_argument("--python", default=None, metavar="PATH",
                   help="interpreter for the workload processes (default: this one)")
    p.add_argument("--cache-dir", default=None, metavar="PATH",
                   help="compiled-kernel cache shared by the runs of a sweep "
                        "(default: $GPULAB_CACHE_DIR or ~/.cache/gpulab-runner)")
    p.add_argument("--no-compile", action="store_true",
                   help="do not use torch.compile (eager mode)")
    p.add_argument("--max-epochs", type=int, default=None, metavar="N",
                   help="ttt mode: stop after N epochs even below the target (default: per workload and scale)")
    p.add_argument("--measure-seconds", type=float, default=None, metavar="S",
                   help="throughput mode: seconds of timed steps after warm-up (default: per workload)")
    p.add_argument("--warmup-steps", type=int, default=None, metavar="N",
                   help="throughput mode: untimed steps first (default: per workload)")
    p.add_argument("--cpu-procs", type=int, default=None, metavar="N",
                   help="testing: run N gloo processes on CPU (only when no GPU is selected)")


def _fail(msg: str):
    raise UsageError(f"runner run: {msg}")


def max_cpu_procs() -> int:
    """--cpu-procs runs test processes on the CPU: at most twice this host's CPUs (at least 2), 64 in all."""
    return min(64, max(2, 2 * (os.cpu_count() or 1)))


# option -> (lowest, highest) accepted: every count and duration is checked before anything starts
# (the controller keeps its own ranges, lab/limits.py: the runner never imports lab)
RANGES = {
    "seed": (0, 2**31 - 1),
    "max_minutes": (0.01, 7 * 24 * 60),
    "measure_seconds": (0.01, 24 * 3600),
    "max_epochs": (1, 10_000),
    "warmup_steps": (1, 1_000_000),
    "nnodes": (1, 64),
}


def _check_ranges(args) -> None:
    for key, (lo, hi) in RANGES.items():
        value = getattr(args, key)
        if value is not None and not lo <= value <= hi:   # NaN fails too
            _fail(f"--{key.replace('_', '-')} {value}: must be in {lo:g}..{hi:g}")
    if args.cpu_procs is not None and not 1 <= args.cpu_procs <= max_cpu_procs():
        _fail(f"--cpu-procs {args.cpu_procs}: must be in 1..{max_cpu_procs()} "
              f"(twice this host's {os.cpu_count()} CPUs, at most 64)")


def plan(args, host_gpus: int | None = None) -> dict:
    """Check the request against the catalogue and the host; UsageError when bad."""
    from runner import workloads

    try:
        catalogue = workloads.load()
    except workloads.CatalogueError as exc:
        _fail(str(exc))
    name = args.workload
    if name not in catalogue:
        _fail(f"unknown workload {name!r} (known: {', '.join(catalogue)})")
    entry = catalogue[name]
    if args.framework not in entry["frameworks"]:
        _fail(f"workload {name!r} has no {args.framework} implementation "
              f"(it has: {', '.join(entry['frameworks'])})")
    python = args.python or sys.executable
    if not launch.python_ok(python):
        _fail(f"--python {python!r} is not an executable file")
    fw_module = {"pytorch": "torch", "tensorflow": "tensorflow"}[args.framework]
    if not launch.has_module(python, fw_module):
        pretty = {"torch": "PyTorch (torch)", "tensorflow": "TensorFlow"}[fw_module]
        _fail(f"--framework {args.framework}: {pretty} is not installed for {python} "
              f"(install the runner's '{'runner' if fw_module == 'torch' else 'tensorflow'}' extra)")
    if host_gpus is None:
        host_gpus = launch.host_gpu_count()
    try:
        gpus = launch.parse_gpus(args.gpus, host_gpus)
    except launch.LaunchError as exc:
        _fail(str(exc))
    if args.cpu_procs is not None:
        if gpus:
            _fail("--cpu-procs is for CPU runs only (select no GPU: --gpus 0)")
        if args.cpu_procs < 1:
            _fail(f"--cpu-procs {args.cpu_procs}: must be at least 1")
    nprocs = len(gpus) if gpus else (args.cpu_procs or 1)
    if args.framework == "tensorflow":  # one process drives every GPU (MirroredStrategy)
        if args.cpu_procs is not None and args.cpu_procs > 1:
            _fail("--cpu-procs is for PyTorch workloads (--framework tensorflow runs one process)")
        if args.nnodes > 1:
            _fail("--framework tensorflow runs on one host (--nnodes 1)")
        nprocs = 1
    if args.nnodes < 1:
        _fail(f"--nnodes {args.nnodes}: must be at least 1")
    if not 0 <= args.node_rank < args.nnodes:
        _fail(f"--node-rank {args.node_rank}: must be in 0..{args.nnodes - 1}")
    if args.rdzv_endpoint is not None:
        try:
            launch.parse_endpoint(args.rdzv_endpoint)
        except launch.LaunchError as exc:
            _fail(str(exc))
    elif args.nnodes > 1:
        _fail(f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT")
    if args.seed is not None and not 0 <= args.seed < 2**31:
        _fail(f"--seed {args.seed}: must be in 0..{2**31 - 1}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        _fail(f"--max-minutes {args.max_minutes}: must be positive")
    if args.measure_seconds is not None and not args.measure_seconds > 0:
        _fail(f"--measure-seconds {args.measure_seconds}: must be positive")
    if args.max_epochs is not None and args.max_epochs < 1:
        _fail(f"--max-epochs {args.max_epochs}: must be at least 1")
    if args.warmup_steps is not None and args.warmup_steps < 1:
        _fail(f"--warmup-steps {args.warmup_steps}: must be at least 1")
    _check_ranges(args)
    if args.precision == "fp16" and not gpus:
        _fail("--precision fp16 needs a GPU (this run selects none)")
    if args.data is not None and not Path(args.data).is_dir():
        _fail(f"--data {args.data!r}: no such directory")
    scale_cfg = entry["scales"][args.scale]
    if args.mode == "ttt" and scale_cfg["data"] == "prepared" and args.data is None:
        _fail(f"--scale {args.scale} --mode ttt trains on the prepared dataset: give --data PATH")
    if args.mode == "ttt" and scale_cfg.get("pretrained") and args.data is not None:
        try:  # the published backbone weights, or bad input: never a run from scratch
            artifacts.check(scale_cfg["pretrained"], args.data)
        except (artifacts.ArtifactError, OSError) as exc:
            _fail(str(exc))
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        _fail(f"--out {args.out!r} already exists and is not an empty directory")
    parent = next((p for p in out.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        _fail(f"--out {args.out!r}: {parent} is not a folder")
    if parent is None or not os.access(parent, os.W_OK | os.X_OK):
        _fail(f"--out {args.out!r}: {parent} is not writable")
    cache = Path(args.cache_dir or os.environ.get("GPULAB_CACHE_DIR")
                 or Path.home() / ".cache" / "gpulab-runner")
    return {
        "workload": name, "entry": entry, "python": python, "gpus": gpus, "nprocs": nprocs,
        "world_size": nprocs * args.nnodes, "out": out, "cache_dir": cache,
    }


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
        "host": {"hostname": socket.gethostname(), "os": os_name, "kernel": platform.release(),
                 "machine": platform.machine(), "cpus": os.cpu_count(),
                 "python": platform.python_version()},
        "frameworks": {"torch": version("torch"), "tensorflow": version("tensorflow"),
                       "mlperf-logging": version("mlperf-logging"), "numpy": version("numpy")},
        "gpus": [{"index": i} for i in gpus],
    }


def _probe(gpus: list[int]) -> dict:
    try:
        from runner import probe as _probe_mod
        collect = _probe_mod.collect
    except (ImportError, AttributeError):
        return _minimal_probe(gpus)
    try:
        return collect(gpu_indices=gpus)
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


def main(args) -> int:
    t_launch = time.time()
    p = plan(args)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    out: Path = p["out"]
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / rundir.STDOUT).touch()
    except OSError as exc:   # e.g. under /proc: nothing is written, nothing started
        _fail(f"--out {args.out!r}: cannot create the run directory there ({exc.strerror or exc})")
    start_iso = rundir.iso(t_launch)
    abort_reason: list[str] = []
    internal: list[str] = []

    def on_signal(signum, frame):
        if not abort_reason:
            abort_reason.append(f"stopped by {signal.Signals(signum).name}")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    tmp = Path(tempfile.mkdtemp(prefix="gpulab-run-"))
    stdout_log = out / rundir.STDOUT
    stdout_log.touch()
    tele = None
    procs = None
    doc = None
    rc = None
    try:
        spec = {
            "workload": p["workload"], "entry": p["entry"], "scale": args.scale, "mode": args.mode,
            "seed": seed, "data": str(Path(args.data).resolve()) if args.data else None,
            "precision": args.precision, "framework": args.framework, "gpus": p["gpus"],
            "run_dir": str(out.resolve()), "result_path": str(tmp / "result.json"),
            "t_launch": t_launch, "compile": (not args.no_compile) and bool(p["gpus"]),
            "measure_s": args.measure_seconds, "max_epochs": args.max_epochs, "warmup_steps": args.warmup_steps,
            "drop_caches": args.scale == "full" and args.mode == "ttt",
        }
        spec_path = tmp / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        cmd = launch.worker_command(p["python"], spec_path, nprocs=p["nprocs"], nnodes=args.nnodes,
                                    node_rank=args.node_rank, rdzv=args.rdzv_endpoint,
                                    run_id=f"gpulab-{p['workload']}-{seed}")
        env = launch.child_env(p["gpus"], cache_dir=p["cache_dir"], nprocs=p["nprocs"])
        manifest = {
            "schema": rundir.MANIFEST_SCHEMA, "contract": rundir.CONTRACT_VERSION,
            "runner_version": __version__, "runner": _version_line(),
            "command": shlex.join([sys.executable, "-m", "runner"] + sys.argv[1:]),
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                        if k != "command"},
            "seed": seed, "gpus": p["gpus"], "world_size": p["world_size"],
            "launch": cmd, "launch_env": {k: env[k] for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")},
            "probe": _probe(p["gpus"]),
        }
        rundir.write_json(out / rundir.MANIFEST, manifest)
        tele = _Telemetry(p["gpus"], out / rundir.TELEMETRY)
        print(f"[runner] {p['workload']} {args.mode} {args.scale} seed {seed} on "
              f"{'GPUs ' + ','.join(map(str, p['gpus'])) if p['gpus'] else 'CPU'} "
              f"({p['world_size']} process{'es' if p['world_size'] > 1 else ''}): {out}", flush=True)
        if not abort_reason:
            procs = launch.Processes(cmd, env, stdout_log, cwd=tmp)
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
            procs.signal_group(signal.SIGKILL)  # no straggler survives its leader
        result_file = tmp / "result.json"
        if result_file.is_file():
            try:
                doc = json.loads(result_file.read_text(encoding="utf-8"))
            except ValueError:
                doc = None
    except Exception as exc:  # a fault of the runner itself: still leave a complete run directory
        import traceback

        with open(stdout_log, "a", encoding="utf-8") as f:
            f.write("[runner] " + traceback.format_exc().replace("\n", "\n[runner] ") + "\n")
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
        mlpath = out / rundir.MLLOG
        if not mlpath.exists():
            mlpath.touch()
        if outcome == "aborted":
            from runner.mllog import close_aborted

            close_aborted(mlpath, reason)
        exit_code = 0 if outcome == "success" else 1
        result = (doc or {}).get("result") or {}
        if tele is not None and tele.note:
            result.setdefault("notes", []).append(tele.note)
        status = rundir.status_document(
            runner_version=__version__, workload=p["workload"], benchmark=p["entry"]["benchmark"],
            framework=args.framework, mode=args.mode, scale=args.scale, seed=seed,
            precision=(doc or {}).get("precision", args.precision), gpus=p["gpus"],
            world_size=p["world_size"], nnodes=args.nnodes, node_rank=args.node_rank,
            start=start_iso, end=rundir.utc_now(), exit_code=exit_code, outcome=outcome,
            reason=reason, result=result)
        with open(stdout_log, "a", encoding="utf-8") as f:
            f.write(f"[runner] outcome {outcome}: {reason}\n")
        rundir.write_json(out / rundir.STATUS, status)
        rundir.write_sums(out)
        _rmtree(tmp)
        for s, h in old.items():
            signal.signal(s, h)
    print(f"[runner] {outcome}: {reason}", flush=True)
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
