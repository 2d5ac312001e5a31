"""``runner run``'s options and their check: the request against its ranges, the catalogue and the host
(bad input: UsageError, one line, before anything is written). runner/supervisor.py runs the plan; like it,
this module imports no deep-learning framework."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from runner import artifacts, launch
from runner.cli import UsageError, path_problem


def add_arguments(p) -> None:
    """`runner run`'s options, in the order its help lists them."""
    _run_arguments(p)
    _host_arguments(p)
    _step_arguments(p)


def _run_arguments(p) -> None:
    """What runs: the workload, its run directory, GPUs, seed, mode, scale, data, precision, framework, limit."""
    p.add_argument("workload", help="a registered workload (python -m runner list)")
    p.add_argument(
        "--out", required=True, metavar="RUN_DIR", help="run directory to create (must not exist or be empty)"
    )
    p.add_argument(
        "--gpus",
        default="all",
        metavar="all|N|I,J,...",
        help="'all', a count (0 = CPU), or indices as the host numbers them; "
        "a single index takes a trailing comma: '3,' (default: all)",
    )
    p.add_argument("--seed", type=int, default=None, help="random seed (default: drawn and recorded)")
    p.add_argument(
        "--mode",
        choices=("ttt", "throughput"),
        default="ttt",
        help="train to the quality target (default) or measure samples/s",
    )
    p.add_argument(
        "--scale",
        choices=("full", "small", "tiny"),
        default="full",
        help="full: real data and MLPerf target; small/tiny: generated data, smaller targets",
    )
    p.add_argument("--data", default=None, metavar="PATH", help="prepared dataset root (needed for full ttt)")
    p.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16", "fp16"),
        default="auto",
        help="auto: bf16 on GPUs that support it, else fp32",
    )
    p.add_argument("--framework", choices=("pytorch", "tensorflow"), default="pytorch")
    p.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        metavar="M",
        help="wall-clock limit; the run is then aborted and recorded as such",
    )


def _host_arguments(p) -> None:
    """Where it runs: hosts of a multi-host run, the interpreter, the compiled-kernel cache."""
    p.add_argument("--nnodes", type=int, default=1, help="hosts taking part (multi-host torch.distributed)")
    p.add_argument("--node-rank", type=int, default=0, help="this host's rank among --nnodes")
    p.add_argument(
        "--rdzv-endpoint", default=None, metavar="HOST:PORT", help="rendezvous endpoint (needed when --nnodes > 1)"
    )
    p.add_argument(
        "--python", default=None, metavar="PATH", help="interpreter for the workload processes (default: this one)"
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        metavar="PATH",
        help="compiled-kernel cache shared by the runs of a sweep "
        "(default: $GPULAB_CACHE_DIR or ~/.cache/gpulab-runner)",
    )


def _step_arguments(p) -> None:
    """How it runs: compilation, epochs and timed steps, CPU processes, settings replaced."""
    p.add_argument("--no-compile", action="store_true", help="do not use torch.compile (eager mode)")
    p.add_argument(
        "--compile",
        action="store_true",
        help="use torch.compile on the CPU too (a GPU run compiles unless --no-compile; needs a "
        "C++ compiler and Python's headers on the host)",
    )
    p.add_argument(
        "--max-epochs",
        type=int,
        default=None,
        metavar="N",
        help="ttt mode: stop after N epochs even below the target (default: per workload and scale)",
    )
    p.add_argument(
        "--measure-seconds",
        type=float,
        default=None,
        metavar="S",
        help="throughput mode: seconds of timed steps after warm-up (default: per workload)",
    )
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=None,
        metavar="N",
        help="throughput mode: untimed steps first (default: per workload)",
    )
    p.add_argument(
        "--cpu-procs",
        type=int,
        default=None,
        metavar="N",
        help="testing: run N gloo processes on CPU (only when no GPU is selected)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="set",
        help="replace one of the scale's settings (a name the workload declares in workloads.yml; "
        "VALUE is JSON, else text), e.g. lr=0.003; repeat for more (a recipe of invoke tune)",
    )


#: settings --set may not change: the quality bar and what data a run reads belong to the benchmark
NOT_SETTABLE = ("target", "data", "pretrained", "max_epochs")
MAX_SETS = 64


def parse_sets(items: list[str], entry: dict, name: str) -> dict:
    """``--set KEY=VALUE`` options -> {key: value}, each checked against the workload's declarations."""
    import json

    from runner.workloads.settings import DeclarationError, declarations, problem

    if len(items) > MAX_SETS:
        fail(f"--set: {len(items)} settings given, at most {MAX_SETS}")
    try:
        declared = declarations(entry.get("settings", {}))
    except DeclarationError as exc:
        fail(f"workload {name!r}: {exc}")
    out: dict = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            fail(f"--set {item[:60]!r}: expected KEY=VALUE")
        if key in NOT_SETTABLE:
            fail(f"--set {key}: not a setting a run may change ({', '.join(NOT_SETTABLE)} belong to the benchmark)")
        if key not in declared:
            fail(f"--set {key[:40]!r}: workload {name} declares no such setting")
        if len(text) > 4096:
            fail(f"--set {key}: value longer than 4096 characters")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        bad = problem(declared[key], value, key)
        if bad:
            fail(f"--set: {bad}")
        out[key] = value
    return out


def fail(msg: str):
    raise UsageError(f"runner run: {msg}")


def check_path(value: str, what: str, *, made_here: bool = False) -> Path:
    problem = path_problem(value, made_here=made_here)
    if problem:
        fail(f"{what} {problem}")
    return Path(value)


def max_cpu_procs() -> int:
    """--cpu-procs runs test processes on the CPU: at most twice this host's CPUs (at least 2), 64 in all."""
    return min(64, max(2, 2 * (os.cpu_count() or 1)))


# option -> (lowest, highest) accepted: every count and duration is checked before anything starts
# (the controller keeps its own ranges, lab/core/limits.py: the runner never imports lab)
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
        if value is not None and not lo <= value <= hi:  # NaN fails too
            fail(f"--{key.replace('_', '-')} {value}: must be in {lo:g}..{hi:g}")
    if args.cpu_procs is not None and not 1 <= args.cpu_procs <= max_cpu_procs():
        fail(
            f"--cpu-procs {args.cpu_procs}: must be in 1..{max_cpu_procs()} "
            f"(twice this host's {os.cpu_count()} CPUs, at most 64)"
        )


def _check_numbers(args) -> None:
    """The multi-node arguments, the seed and the run's limits (UsageError when out of range)."""
    if args.nnodes < 1:
        fail(f"--nnodes {args.nnodes}: must be at least 1")
    if not 0 <= args.node_rank < args.nnodes:
        fail(f"--node-rank {args.node_rank}: must be in 0..{args.nnodes - 1}")
    if args.rdzv_endpoint is not None:
        try:
            launch.parse_endpoint(args.rdzv_endpoint)
        except launch.LaunchError as exc:
            fail(str(exc))
    elif args.nnodes > 1:
        fail(f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT")
    if args.seed is not None and not 0 <= args.seed < 2**31:
        fail(f"--seed {args.seed}: must be in 0..{2**31 - 1}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        fail(f"--max-minutes {args.max_minutes}: must be positive")
    if args.measure_seconds is not None and not args.measure_seconds > 0:
        fail(f"--measure-seconds {args.measure_seconds}: must be positive")
    if args.max_epochs is not None and args.max_epochs < 1:
        fail(f"--max-epochs {args.max_epochs}: must be at least 1")
    if args.warmup_steps is not None and args.warmup_steps < 1:
        fail(f"--warmup-steps {args.warmup_steps}: must be at least 1")


def _writable_folders(args) -> tuple[Path, Path]:
    """``--out`` (new or empty, under a writable folder) and the cache folder (``--cache-dir``,
    GPULAB_CACHE_DIR or ~/.cache/gpulab-runner), each refused in one line when gpulab cannot write there."""
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"--out {args.out!r} already exists and is not an empty directory")
    parent = next((p for p in out.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        fail(f"--out {args.out!r}: {parent} is not a folder")
    if parent is None or not os.access(parent, os.W_OK | os.X_OK):
        fail(f"--out {args.out!r}: {parent} is not writable")
    cache = Path(args.cache_dir or os.environ.get("GPULAB_CACHE_DIR") or Path.home() / ".cache" / "gpulab-runner")
    check_path(str(cache), "--cache-dir", made_here=True)
    made = next((p for p in cache.absolute().parents if os.path.lexists(p)), None)
    if made is not None and (not os.path.isdir(made) or not os.access(made, os.W_OK | os.X_OK)):
        fail(f"--cache-dir {str(cache)[:60]!r}: {made} is not a writable folder")
    return out, cache


def plan(args, host_gpus: int | None = None) -> dict:
    """Check the request against the catalogue and the host; UsageError when bad."""
    from runner import workloads

    try:
        catalogue = workloads.load()
    except workloads.CatalogueError as exc:
        fail(str(exc))
    name = args.workload
    if name not in catalogue:
        fail(f"unknown workload {name!r} (known: {', '.join(catalogue)})")
    entry = catalogue[name]
    if args.framework not in entry["frameworks"]:
        fail(f"workload {name!r} has no {args.framework} implementation (it has: {', '.join(entry['frameworks'])})")
    python = args.python or sys.executable
    if not launch.python_ok(python):
        fail(f"--python {python!r} is not an executable file")
    fw_module = {"pytorch": "torch", "tensorflow": "tensorflow"}[args.framework]
    if not launch.has_module(python, fw_module):
        pretty = {"torch": "PyTorch (torch)", "tensorflow": "TensorFlow"}[fw_module]
        fail(
            f"--framework {args.framework}: {pretty} is not installed for {python} "
            f"(install the runner's '{'runner' if fw_module == 'torch' else 'tensorflow'}' extra)"
        )
    if host_gpus is None:
        host_gpus = launch.host_gpu_count()
    try:
        gpus = launch.parse_gpus(args.gpus, host_gpus)
    except launch.LaunchError as exc:
        fail(str(exc))
    if args.cpu_procs is not None:
        if gpus:
            fail("--cpu-procs is for CPU runs only (select no GPU: --gpus 0)")
        if args.cpu_procs < 1:
            fail(f"--cpu-procs {args.cpu_procs}: must be at least 1")
    nprocs = len(gpus) if gpus else (args.cpu_procs or 1)
    if args.framework == "tensorflow":  # one process drives every GPU (MirroredStrategy)
        if args.cpu_procs is not None and args.cpu_procs > 1:
            fail("--cpu-procs is for PyTorch workloads (--framework tensorflow runs one process)")
        if args.nnodes > 1:
            fail("--framework tensorflow runs on one host (--nnodes 1)")
        nprocs = 1
    _check_numbers(args)
    _check_ranges(args)
    if args.compile and args.no_compile:
        fail("--compile and --no-compile: choose one")
    if args.precision == "fp16" and not gpus:
        fail("--precision fp16 needs a GPU (this run selects none)")
    for value, what, made in (
        (args.out, "--out", True),
        (args.data, "--data", False),
        (args.cache_dir, "--cache-dir", True),
        (args.python, "--python", False),
    ):
        if value is not None:
            check_path(value, what, made_here=made)
    if args.data is not None and not Path(args.data).is_dir():
        fail(f"--data {args.data!r}: no such directory")
    scale_cfg = entry["scales"][args.scale]
    if args.mode == "ttt" and scale_cfg["data"] == "prepared" and args.data is None:
        fail(f"--scale {args.scale} --mode ttt trains on the prepared dataset: give --data PATH")
    if args.mode == "ttt" and scale_cfg.get("pretrained") and args.data is not None:
        try:  # the published backbone weights, or bad input: never a run from scratch
            artifacts.check(scale_cfg["pretrained"], args.data)
        except (artifacts.ArtifactError, OSError) as exc:
            fail(str(exc))
    out, cache = _writable_folders(args)
    settings = parse_sets(args.set or [], entry, name)
    return {
        "settings": settings,
        "workload": name,
        "entry": entry,
        "python": python,
        "gpus": gpus,
        "nprocs": nprocs,
        "world_size": nprocs * args.nnodes,
        "out": out,
        "cache_dir": cache,
    }
