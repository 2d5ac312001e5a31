"""Throughput of the runner's workloads: its throughput path against a plain compiled model and a plain eager loop.

For each workload, in one invocation on a GPU machine:

- ``optimized``: samples/s of the runner's throughput path at full model size
  (``runner.workloads.base.bench_step(name, device, optimized=True)``: bf16
  autocast, channels-last, fused optimizer, torch.compile with the scale's
  ``compile_mode`` and ``inductor`` settings, the workload's replacement
  layers), on synthetic on-device data;
- ``compiled``: the same model under a plain ``torch.compile`` (default mode),
  channels-last, bf16 autocast, fused optimizer, without the workload's speed
  settings (``PLAIN_COMPILE``: no replacement layers, no Inductor settings,
  Mask R-CNN's RoIAlign left eager, gnmt's compile on at every scale), the
  same batch;
- ``baseline``: the same model as a plain eager loop (fp32 weights, bf16
  autocast, NCHW, no compile, torch.optim defaults);
- ``speed_settings``: what the optimized path has beyond the compiled one.
  ``{}`` (ssd, gnmt, transformer and ncf at full scale): the runner's
  throughput path *is* the plain ``torch.compile``, so there is no
  "optimized" variant to measure: the row has ``runner_path: "compiled"``,
  no ``optimized``, ``ratio`` or ``ratio_to_compiled``, and ``--variants
  optimized`` measures ``compiled`` (once);
- ``ratio`` = optimized / baseline, ``ratio_to_compiled`` = optimized /
  compiled, ``compiled_ratio`` = compiled / baseline (ratios survive machine
  noise; the three are measured in the same call);
- ``time_to_first_step_s``: from the start of a real ``python -m runner run
  WORKLOAD --mode throughput`` to the end of its first training step, twice:
  ``cold`` (an empty ``--cache-dir``) and ``warm`` (the same cache dir, as the
  second run of a sweep), with that run's own samples/s. These runs come
  first: the measurement of the runner's own path (``runner_path``) then
  reuses their compiled graphs (the same step at the same batch) instead of
  compiling again.

Each measurement runs in a child process of its own (a failure or an
out-of-memory in one does not end the others; its error is recorded).
``GPULAB_COMPILE_MODE`` and ``GPULAB_INDUCTOR`` reach only the optimized
path. Output, rewritten after every measurement: JSON ``{workload: {optimized,
compiled, baseline, ratio, ratio_to_compiled, compiled_ratio, unit, batch,
speed_settings, runner_path, time_to_first_step_s: {cold, warm},
runner_samples_per_s: {cold, warm}, errors}, "_meta": {...}}``.

    python benchmarks/throughput.py [--workloads resnet50,ssd,maskrcnn,gnmt,transformer,ncf]
        [--variants optimized,compiled,baseline|none] [--runner-runs all|none|W,W]
        [--measure-seconds 10] [--warmup-steps N] [--out throughput.json] [--workdir DIR]
        [--device cuda|cpu] [--scale full|small|tiny] [--deadline S] [--timeout S]

``--no-runner-runs`` is ``--runner-runs none``. ``--deadline`` bounds the
whole call: no measurement starts with less than 30 s left, a running one is
stopped at it, and what was measured is written. On a CPU (``--device cpu``,
default scale tiny) it is a smoke test of the same code paths (nothing is
compiled there, as in the runner); the figures then mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from benchcommon import default_device, torch_meta, workload_names  # noqa: E402

VARIANTS = ("optimized", "compiled", "baseline")
#: the "compiled" variant: scale settings that make the optimized path more than a plain
#: torch.compile of the model (only those a scale has are replaced)
PLAIN_COMPILE = {
    "space_to_depth_stem": False,
    "stem_pad_channels": None,
    "offset_maxpool": False,
    "compile_mode": "default",
    "inductor": {},
    "compile_roi_align": False,
    "compile": True,
}
SPEED_ENV = ("GPULAB_COMPILE_MODE", "GPULAB_INDUCTOR")  # the optimized path's overrides
MIN_START_S = 30.0


def plain_compile_overrides(name: str, scale: str) -> dict:
    """PLAIN_COMPILE restricted to the settings the scale of ``name`` has."""
    from runner import workloads

    cfg = workloads.load()[name]["scales"][scale]
    return {k: v for k, v in PLAIN_COMPILE.items() if k in cfg}


def speed_settings(name: str, scale: str) -> dict:
    """The settings of the scale that make its optimized path more than a plain torch.compile (the
    values PLAIN_COMPILE would replace); {} where the optimized path is plain torch.compile."""
    from runner import workloads

    cfg = workloads.load()[name]["scales"][scale]
    return {k: cfg[k] for k, v in plain_compile_overrides(name, scale).items() if cfg[k] != v}


def runner_variant(name: str, scale: str) -> str:
    """The variant that is the runner's own throughput path: "optimized", or "compiled" where the
    scale has no speed settings (and no GPULAB_COMPILE_MODE / GPULAB_INDUCTOR override reaches it):
    then the runner runs a plain torch.compile and that is what it is called."""
    if speed_settings(name, scale) or any(os.environ.get(k) for k in SPEED_ENV):
        return "optimized"
    return "compiled"


def variants_for(name: str, scale: str, asked) -> list[str]:
    """``asked`` in order, "optimized" read as "compiled" where the two are one program (measured once)."""
    plain = runner_variant(name, scale) == "compiled"
    out: list[str] = []
    for v in asked:
        v = "compiled" if plain and v == "optimized" else v
        if v not in out:
            out.append(v)
    return out


def _env(cache: Path | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        env["TRITON_CACHE_DIR"] = str(cache / "triton")
        env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"
        env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "1"
    return env


def warm_step(
    name: str, device, optimized: bool, scale: str, warmup: int, batch: int | None = None, overrides: dict | None = None
):
    """The benchmark step of one workload, built and run ``warmup`` times (compilation, cuDNN search).

    Returns ``(step, samples_per_step, sync, build_and_first_step_s)``; ``sync()``
    waits for the device. benchmarks/profile_step.py starts from here too.
    """
    import torch

    from runner.workloads import base

    dev = torch.device(device)
    if dev.type == "cuda":
        from runner.workloads.compiling import cuda_backends

        cuda_backends()
    t0 = time.time()
    step, per_step = base.bench_step(
        name, dev, optimized, scale=scale, precision="bf16", batch_size=batch, overrides=overrides
    )

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    step()
    sync()
    first = time.time() - t0
    for _ in range(max(warmup - 1, 0)):
        step()
    sync()
    return step, per_step, sync, first


def measure_one(
    name: str,
    device: str,
    optimized: bool,
    scale: str,
    measure_s: float,
    warmup: int,
    batch: int | None,
    overrides: dict | None = None,
    plain_compile: bool = False,
) -> dict:
    """Samples/s of one workload, one variant, in this process.

    ``plain_compile`` (with ``optimized``): the "compiled" variant, the scale's
    speed settings replaced by PLAIN_COMPILE.
    """
    import torch

    from runner import workloads

    entry = workloads.load()[name]
    dev = torch.device(device)
    if plain_compile:
        overrides = {**plain_compile_overrides(name, scale), **(overrides or {})}
    step, per_step, sync, first = warm_step(name, dev, optimized, scale, warmup, batch, overrides)
    steps, t = 0, time.time()
    while True:
        step()
        steps += 1
        if steps % 5 == 0 or dev.type == "cpu":
            sync()
            if time.time() - t >= measure_s and steps >= 3:
                break
    sync()
    elapsed = time.time() - t
    out = {
        "samples_per_s": steps * per_step / elapsed,
        "steps": steps,
        "elapsed_s": round(elapsed, 3),
        "samples_per_step": per_step,
        "unit": f"{entry['sample_unit']}/s",
        "build_and_first_step_s": round(first, 3),
    }
    if dev.type == "cuda":
        out["max_memory_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is not None and os.environ.get("GPULAB_COMPILE_MODE") == "reduce-overhead":
        # graphs Inductor ran without CUDA graphs (input mutation, CPU tensors...): 0 means all were captured
        out["cudagraph_skips"] = int(dynamo.counters["inductor"].get("cudagraph_skips", 0))
    return out


def run_child(
    name: str,
    variant: str,
    *,
    device: str,
    scale: str,
    measure_s: float,
    warmup: int,
    timeout: float,
    cache: Path,
    batch: int | None = None,
    extra_env: dict | None = None,
    overrides: dict | None = None,
) -> dict:
    """measure_one in a child process of its own; {'error': ...} when it fails.

    ``variant`` is "optimized", "compiled" or "baseline"; ``extra_env`` is added to the
    child's environment (benchmarks/tune.py sets GPULAB_COMPILE_MODE and
    GPULAB_INDUCTOR there); ``overrides`` replaces settings of the scale.
    """
    fd, res = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_one",
        name,
        "--_variant",
        variant,
        "--_result",
        res,
        "--device",
        device,
        "--scale",
        scale,
        "--measure-seconds",
        str(measure_s),
        "--warmup-steps",
        str(warmup),
    ]
    if batch is not None:
        cmd += ["--_batch", str(batch)]
    if overrides:
        cmd += ["--_set", json.dumps(overrides)]
    env = _env(cache)
    if variant != "optimized":
        for k in SPEED_ENV:
            env.pop(k, None)
    env.update(extra_env or {})
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        text = Path(res).read_text() if os.path.getsize(res) else ""
        if p.returncode == 0 and text:
            doc = json.loads(text)
            # what Inductor said about CUDA graphs (mode=reduce-overhead): whether they were used, or why not
            said = [ln.strip()[:200] for ln in (p.stderr or "").splitlines() if "cudagraph" in ln.lower()]
            if said:
                doc["cudagraph_notes"] = said[:5]
            return doc
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
        return {"error": tail[0][:300]}
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    finally:
        os.unlink(res)


RUNNER_WARMUP_STEPS = 5  # runner runs are for the time to the first step; their samples/s is secondary


def _runner_run(args, name: str, out: Path, cache: Path, timeout: float) -> dict:
    """A real ``runner run --mode throughput``: time to first step and samples/s from status.json."""
    gpus = "1" if args.device == "cuda" else "0"
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "run",
        name,
        "--mode",
        "throughput",
        "--scale",
        args.scale,
        "--gpus",
        gpus,
        "--seed",
        "1",
        "--out",
        str(out),
        "--cache-dir",
        str(cache),
        "--measure-seconds",
        str(max(1.0, min(args.measure_seconds, 3.0))),
        "--warmup-steps",
        str(RUNNER_WARMUP_STEPS),
    ]
    env = _env()
    for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR") + SPEED_ENV:
        env.pop(k, None)  # the runner derives them from --cache-dir; it runs the catalogue's settings
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        return {"error": f"runner run timed out after {timeout:.0f} s"}
    try:
        st = json.loads((out / "status.json").read_text())
    except (OSError, ValueError):
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:300]}
    res = st.get("result") or {}
    doc = {
        "outcome": st.get("outcome"),
        "time_to_first_step_s": res.get("time_to_first_step_s"),
        "samples_per_s": res.get("samples_per_s"),
    }
    if st.get("outcome") != "success":
        doc["error"] = st.get("reason")
    return doc


def _left(end: float | None, timeout: float) -> float | None:
    """Seconds a child may take: the timeout, cut at the deadline; None when too little is left."""
    if end is None:
        return timeout
    left = end - time.time()
    return None if left < MIN_START_S else min(timeout, left)


def _ratio(a, b):
    return round(a / b, 3) if a and b else None


def run(args, write=None) -> dict:
    """Every selected measurement; ``write(doc)`` after each (the partial document)."""
    from runner import workloads

    catalogue = workloads.load()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpulab-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    bench_cache = work / "bench-cache"
    t0 = time.time()
    end = t0 + args.deadline if args.deadline else None
    doc: dict = {"_meta": _meta(args)}
    write = write or (lambda d: None)
    for name in args.workloads + [w for w in args.runner_runs if w not in args.workloads]:
        if name not in catalogue:
            doc[name] = {"error": f"workload {name!r} is not registered in this runner"}
            print(f"[bench] {name}: not registered", flush=True)
            continue
        unit = f"{catalogue[name]['sample_unit']}/s"
        row: dict = {
            "unit": unit,
            "speed_settings": speed_settings(name, args.scale),
            "runner_path": runner_variant(name, args.scale),
            "errors": {},
        }
        doc[name] = row
        if row["runner_path"] == "compiled" and name in args.workloads:
            print(
                f"[bench] {name}: the runner's throughput path is plain torch.compile (no speed settings): "
                "measured once, as 'compiled'",
                flush=True,
            )
        cache = work / f"runner-cache-{name}"
        if name in args.runner_runs:
            shutil.rmtree(cache, ignore_errors=True)
            first, sps = {}, {}
            for which in ("cold", "warm"):
                out = work / f"run-{name}-{which}"
                shutil.rmtree(out, ignore_errors=True)
                budget = _left(end, args.timeout)
                r = (
                    _runner_run(args, name, out, cache, budget)
                    if budget is not None
                    else {"error": "not started: deadline"}
                )
                first[which] = r.get("time_to_first_step_s")
                sps[which] = r.get("samples_per_s")
                if r.get("error"):
                    row["errors"][f"runner_{which}"] = r["error"]
                print(
                    f"[bench] {name} runner run ({which} cache): first step after "
                    f"{first[which]} s, {sps[which]} {unit}",
                    flush=True,
                )
                row["time_to_first_step_s"] = first
                row["runner_samples_per_s"] = sps
                write(doc)
        for variant in variants_for(name, args.scale, args.variants) if name in args.workloads else ():
            budget = _left(end, args.timeout)
            if budget is None:
                r = {"error": "not started: deadline"}
            else:
                # the runner's own step finds its graphs in the runner runs' cache
                use = cache if variant == row["runner_path"] and cache.is_dir() else bench_cache
                r = run_child(
                    name,
                    variant,
                    device=args.device,
                    scale=args.scale,
                    measure_s=args.measure_seconds,
                    warmup=args.warmup_steps,
                    timeout=budget,
                    cache=use,
                )
            if "error" in r:
                row[variant] = None
                row["errors"][variant] = r["error"]
            else:
                row[variant] = round(r["samples_per_s"], 1)
                row["batch"] = r["samples_per_step"]
                row[f"{variant}_detail"] = r
            print(
                f"[bench] {name} {variant}: {row[variant]} {unit}"
                + (f" ({row['errors'][variant]})" if variant in row["errors"] else ""),
                flush=True,
            )
            if row["runner_path"] == "optimized":
                row["ratio"] = _ratio(row.get("optimized"), row.get("baseline"))
                row["ratio_to_compiled"] = _ratio(row.get("optimized"), row.get("compiled"))
            row["compiled_ratio"] = _ratio(row.get("compiled"), row.get("baseline"))
            write(doc)
        if not row["errors"]:
            del row["errors"]
        write(doc)
    doc["_meta"]["elapsed_s"] = round(time.time() - t0, 1)
    return doc


def _meta(args) -> dict:
    import platform

    import datetime

    meta = {
        "device": args.device,
        "scale": args.scale,
        "measure_seconds": args.measure_seconds,
        "variants": list(args.variants),
        "runner_runs": list(args.runner_runs),
        "deadline_s": args.deadline,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
    }
    meta.update(torch_meta(args.device))
    return meta


def _names(text: str, known: tuple, what: str, default: list[str]) -> list[str]:
    low = text.strip().lower()
    if low == "none":
        return []
    if low == "all":
        return list(default)
    items = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in items if w not in known]
    if bad or not items:
        raise ValueError(f"{what}: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(known)})")
    return items


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--workloads",
        default="all",
        help="comma-separated, or all: every workload of the runner's catalogue (the default)",
    )
    ap.add_argument(
        "--variants", default=",".join(VARIANTS), help="of optimized,compiled,baseline, or none (default: all three)"
    )
    ap.add_argument(
        "--runner-runs",
        default="all",
        help="workloads whose cold and warm 'runner run' to time: all (of --workloads), none, or a list",
    )
    ap.add_argument(
        "--no-runner-runs",
        dest="runner_runs",
        action="store_const",
        const="none",
        help="the same as --runner-runs none",
    )
    ap.add_argument("--measure-seconds", type=float, default=10.0, help="timed seconds per measurement")
    ap.add_argument(
        "--warmup-steps", type=int, default=None, help="untimed steps first (default: 15 on a GPU, 2 on a CPU)"
    )
    ap.add_argument("--out", default="throughput.json", help="JSON output file (rewritten after each measurement)")
    ap.add_argument("--workdir", default=None, help="run directories and caches (default: a new temp dir)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available, else cpu")
    ap.add_argument(
        "--scale",
        choices=("full", "small", "tiny"),
        default=None,
        help="model size (default: full on cuda, tiny on cpu)",
    )
    ap.add_argument("--deadline", type=float, default=None, help="seconds for the whole call")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per child process")
    ap.add_argument("--_one", help=argparse.SUPPRESS)
    ap.add_argument("--_variant", help=argparse.SUPPRESS)
    ap.add_argument("--_result", help=argparse.SUPPRESS)
    ap.add_argument("--_batch", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_set", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.device is None:
        args.device = default_device()
    if args.scale is None:
        args.scale = "full" if args.device == "cuda" else "tiny"
    if args.warmup_steps is None:
        args.warmup_steps = 15 if args.device == "cuda" else 2
    if args._one:
        r = measure_one(
            args._one,
            args.device,
            args._variant != "baseline",
            args.scale,
            args.measure_seconds,
            args.warmup_steps,
            args._batch,
            json.loads(args._set) if args._set else None,
            plain_compile=args._variant == "compiled",
        )
        Path(args._result).write_text(json.dumps(r))
        return 0
    try:
        known = workload_names()
        args.workloads = _names(args.workloads, known, "--workloads", list(known))
        args.variants = _names(args.variants, VARIANTS, "--variants", list(VARIANTS))
        args.runner_runs = _names(args.runner_runs, known, "--runner-runs", args.workloads)
        if args.deadline is not None and not args.deadline > 0:
            raise ValueError(f"--deadline {args.deadline}: must be positive")
    except ValueError as exc:
        print(f"throughput.py: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)

    def write(doc):
        out.write_text(json.dumps(doc, indent=2) + "\n")

    write(run(args, write))
    print(f"[bench] wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
