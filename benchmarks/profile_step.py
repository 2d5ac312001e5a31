"""Where one training step's time goes: a kernel-time profile of a workload's throughput step.

Builds the same step as benchmarks/throughput.py (``runner.workloads.base.bench_step``:
the runner's optimized path, or ``--baseline`` for the plain eager loop), runs
``--warmup-steps`` untimed steps (compilation, cuDNN algorithm search), times
``--steps`` steps, then records ``--profile-steps`` more under torch.profiler
and sums the device time of every kernel into categories:

- ``convolution``: cuDNN / CUTLASS convolution kernels (forward, data and weight gradients);
- ``matmul``: cuBLAS / cuBLASLt GEMMs (including convolutions lowered to matmuls);
- ``fused (triton)``: the kernels torch.compile generates (batch norm, activations, losses);
- ``optimizer``: multi-tensor and fused optimizer kernels;
- ``copy``: memory copies and fills; ``other``: the rest (eager elementwise kernels ...).

JSON (``--out``): samples/s of the timed steps, the step time, the summed kernel
time per step (less than the step time when the GPU waits on the host), the
categories and the top kernels. Options of torch are set here for one process:
``--mode`` and ``--inductor`` as GPULAB_COMPILE_MODE / GPULAB_INDUCTOR (see
runner.workloads.base.compile_fn), ``--cudnn-benchmark-limit`` as
``torch.backends.cudnn.benchmark_limit`` (0: try every cuDNN algorithm).

    python benchmarks/profile_step.py resnet50 --out profile-resnet50.json [--batch 512]
        [--trace trace.json]

On a CPU (``--device cpu``, scale tiny) the categories are CPU operator times.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput
from runner.workloads import base

CATEGORIES = (
    # (category, substrings of a lower-cased kernel name); the first match wins
    ("optimizer", ("multi_tensor", "fused_sgd", "fusedsgd", "_fused_adam", "fused_adam", "foreach")),
    ("fused (triton)", ("triton_",)),
    ("convolution", ("conv", "cudnn", "xmma", "implicit_gemm", "dgrad", "wgrad", "fprop", "sm90_xmma")),
    ("matmul", ("gemm", "nvjet", "cublas", "cutlass", "matmul")),
    ("copy", ("memcpy", "memset", "copy_", "fill")),
)


def category(name: str) -> str:
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other"


def summarize(events, steps: int, top: int) -> dict:
    """``events``: (name, total microseconds, calls) -> per-step categories and top kernels."""
    cats: dict[str, float] = {}
    rows = []
    for name, us, calls in events:
        if us <= 0:
            continue
        cat = category(name)
        cats[cat] = cats.get(cat, 0.0) + us
        rows.append((us, name, calls, cat))
    total = sum(cats.values())
    rows.sort(reverse=True)
    per = max(1, steps)
    return {
        "kernel_ms_per_step": round(total / per / 1000, 3),
        "categories": {c: {"ms_per_step": round(v / per / 1000, 3), "share": round(v / total, 4) if total else 0.0}
                       for c, v in sorted(cats.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"name": n[:160], "category": c, "ms_per_step": round(us / per / 1000, 3),
                         "calls_per_step": round(k / per, 2), "share": round(us / total, 4) if total else 0.0}
                        for us, n, k, c in rows[:top]],
    }


def profile(args) -> dict:
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda and args.cudnn_benchmark_limit is not None:
        torch.backends.cudnn.benchmark_limit = args.cudnn_benchmark_limit
    step, per_step, sync, first = throughput.warm_step(args.workload, dev, not args.baseline, args.scale,
                                                       args.warmup_steps, args.batch, args.overrides)
    t = time.time()
    for _ in range(args.steps):
        step()
    sync()
    step_s = (time.time() - t) / max(1, args.steps)
    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with torch_profile(activities=activities) as prof:
        for _ in range(args.profile_steps):
            step()
        sync()
    if args.trace:
        prof.export_chrome_trace(args.trace)
    events = []
    for e in prof.key_averages():
        if getattr(e, "is_user_annotation", False):
            continue  # a record_function range, not work of its own
        if cuda:
            # kernels only: a CPU operator's device time is that of the kernels it launched
            if e.device_type != DeviceType.CUDA:
                continue
            us = e.self_device_time_total
        else:
            us = e.self_cpu_time_total
        events.append((e.key, float(us), int(e.count)))
    doc = summarize(events, args.profile_steps, args.top)
    doc = {"workload": args.workload, "variant": "baseline" if args.baseline else "optimized",
           "samples_per_step": per_step, "samples_per_s": round(per_step / step_s, 1),
           "step_ms": round(step_s * 1000, 3), "build_and_first_step_s": round(first, 2),
           "timed_steps": args.steps, "profiled_steps": args.profile_steps, **doc}
    doc["settings"] = {"device": str(dev), "scale": args.scale, "torch": torch.__version__,
                       "compile_mode": os.environ.get("GPULAB_COMPILE_MODE") or None,
                       "inductor": os.environ.get("GPULAB_INDUCTOR") or None,
                       "cudnn_benchmark_limit": args.cudnn_benchmark_limit, "set": args.overrides or None}
    if cuda:
        doc["settings"]["gpu"] = torch.cuda.get_device_name(dev)
        doc["settings"]["cudnn"] = torch.backends.cudnn.version()
        doc["max_memory_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
    return doc


def main(argv=None) -> int:
    from runner import workloads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload")
    ap.add_argument("--baseline", action="store_true", help="profile the plain eager baseline")
    ap.add_argument("--batch", type=int, default=None, help="per-process batch (default: the catalogue's)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--scale", choices=("full", "small", "tiny"), default=None)
    ap.add_argument("--warmup-steps", type=int, default=None, help="default: 20 on a GPU, 2 on a CPU")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default: 30 on a GPU, 3 on a CPU)")
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=25, help="kernels listed")
    ap.add_argument("--mode", default=None, help="compile mode (GPULAB_COMPILE_MODE)")
    ap.add_argument("--inductor", default=None, help="KEY=VALUE,... (GPULAB_INDUCTOR)")
    ap.add_argument("--cudnn-benchmark-limit", type=int, default=None,
                    help="cuDNN algorithms tried per convolution (0: all)")
    ap.add_argument("--set", default=None, metavar="KEY=VALUE,...",
                    help="replace settings of the workload's scale for this profile (as tune.py's set=)")
    ap.add_argument("--trace", default=None, help="also write a Chrome trace here")
    ap.add_argument("--out", default=None, help="JSON output (default: stdout only)")
    args = ap.parse_args(argv)
    if args.workload not in workloads.load():
        print(f"profile_step.py: workload {args.workload!r} is not registered "
              f"(known: {', '.join(sorted(workloads.load()))})", file=sys.stderr)
        return 2
    for flag, value in (("--batch", args.batch), ("--profile-steps", args.profile_steps),
                        ("--steps", args.steps)):
        if value is not None and value < 1:
            print(f"profile_step.py: {flag} {value}: must be at least 1", file=sys.stderr)
            return 2
    try:
        args.overrides = base.key_values(args.set or "", "--set")
    except base.WorkloadError as exc:
        print(f"profile_step.py: {exc}", file=sys.stderr)
        return 2
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = args.device == "cuda"
    args.scale = args.scale or ("full" if gpu else "tiny")
    args.warmup_steps = args.warmup_steps if args.warmup_steps is not None else (20 if gpu else 2)
    args.steps = args.steps or (30 if gpu else 3)
    if args.mode:
        os.environ["GPULAB_COMPILE_MODE"] = args.mode
    if args.inductor:
        os.environ["GPULAB_INDUCTOR"] = args.inductor
    try:
        doc = profile(args)
    except base.WorkloadError as exc:
        print(f"profile_step.py: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(f"[profile] {args.workload} {doc['variant']}: {doc['samples_per_s']:,} samples/s, "
          f"step {doc['step_ms']} ms, kernels {doc['kernel_ms_per_step']} ms/step", flush=True)
    for cat, v in doc["categories"].items():
        print(f"[profile]   {cat:<16} {v['ms_per_step']:>9.3f} ms/step  {100 * v['share']:5.1f} %", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
