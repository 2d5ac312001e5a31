"""Where one training step's time goes: a kernel-time profile of a workload's throughput step.

Builds the same step as benchmarks/throughput.py (``runner.workloads.base.bench_step``:
the runner's throughput path, or ``--baseline`` for the plain eager loop), runs
``--warmup-steps`` untimed steps (compilation, cuDNN algorithm search), times
``--steps`` steps, then records ``--profile-steps`` more under torch.profiler
and sums the device time of every kernel into categories (the first that matches
a kernel's name):

- ``optimizer``: multi-tensor and fused optimizer kernels;
- ``fused (triton)``: the kernels torch.compile generates (normalization, activations, residuals, losses);
- ``attention``: flash / memory-efficient / cuDNN attention (``scaled_dot_product_attention``);
- ``recurrent``: cuDNN's RNN kernels (gnmt's LSTMs);
- ``convolution``: cuDNN / CUTLASS convolution kernels (forward, data and weight gradients);
- ``matmul``: cuBLAS / cuBLASLt / CUTLASS GEMMs (including convolutions lowered to matmuls);
- ``gather / embedding``: embedding lookups and their backward, index and scatter kernels, sorts;
- ``copy``: memory copies and fills;
- ``elementwise (eager)``: ATen's own elementwise, reduction, normalization and softmax kernels
  (on a CPU: every other ATen operator); ``other``: the rest.

Kernel time per step below the step time is time the GPU waits (host work, kernel
launches, data): ``gpu_idle_ms_per_step``. ``--table`` writes a short Markdown table
of the same: groups (GEMM / convolution / attention / RNN, elementwise and
normalization, optimizer, memory, GPU idle) as shares of the step, the categories and
the top kernels.

JSON (``--out``): samples/s of the timed steps, the step time, the summed kernel
time per step (less than the step time when the GPU waits on the host), the
categories and the top kernels. Options of torch are set here for one process:
``--mode`` and ``--inductor`` as GPULAB_COMPILE_MODE / GPULAB_INDUCTOR (see
runner.workloads.base.compile_fn), ``--cudnn-benchmark-limit`` as
``torch.backends.cudnn.benchmark_limit`` (0: try every cuDNN algorithm).

    python benchmarks/profile_step.py resnet50 --out profile-resnet50.json [--batch 512]
        [--table profile-resnet50.md] [--trace trace.json]

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
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("recurrent", ("rnn", "lstm", "persist")),
    ("convolution", ("conv", "cudnn", "xmma", "implicit_gemm", "dgrad", "wgrad", "fprop", "sm90_xmma")),
    ("matmul", ("gemm", "nvjet", "cublas", "cutlass", "matmul", "aten::mm", "aten::addmm", "aten::bmm")),
    ("gather / embedding", ("embedding", "index", "gather", "scatter", "segment", "radixsort", "sort")),
    ("copy", ("memcpy", "memset", "copy_", "fill")),
    ("elementwise (eager)", ("elementwise", "reduce_kernel", "norm", "softmax", "aten::")),
)
#: a GEMM that is no convolution (cuBLAS's sm90_xmma_gemm_* kernels) is a matmul, not a convolution
CONV_MARKS = ("conv", "implicit", "dgrad", "wgrad", "fprop")
NORM_MARKS = ("bn_", "batchnorm", "batch_norm")
#: --table's groups of categories (the step's GPU idle time is a row of its own)
GROUPS = (
    ("GEMM / convolution / attention / RNN", ("matmul", "convolution", "attention", "recurrent")),
    ("elementwise and normalization (Triton, eager)", ("fused (triton)", "elementwise (eager)")),
    ("optimizer", ("optimizer",)),
    ("memory (gathers, embeddings, copies)", ("gather / embedding", "copy")),
    ("other kernels", ("other",)),
)


def category(name: str) -> str:
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            if cat == "convolution" and any(m in low for m in NORM_MARKS):
                return "elementwise (eager)"  # cuDNN's batch norm (the eager baseline)
            if cat == "convolution" and "gemm" in low and not any(m in low for m in CONV_MARKS):
                return "matmul"
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
        "categories": {
            c: {"ms_per_step": round(v / per / 1000, 3), "share": round(v / total, 4) if total else 0.0}
            for c, v in sorted(cats.items(), key=lambda kv: -kv[1])
        },
        "top_kernels": [
            {
                "name": n[:160],
                "category": c,
                "ms_per_step": round(us / per / 1000, 3),
                "calls_per_step": round(k / per, 2),
                "share": round(us / total, 4) if total else 0.0,
            }
            for us, n, k, c in rows[:top]
        ],
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
    step, per_step, sync, first = throughput.warm_step(
        args.workload, dev, not args.baseline, args.scale, args.warmup_steps, args.batch, args.overrides
    )
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
    step_ms = step_s * 1000
    # "optimized" where the runner's path has speed settings of its own, else "compiled" (plain torch.compile)
    variant = "baseline" if args.baseline else throughput.runner_variant(args.workload, args.scale)
    doc = {
        "workload": args.workload,
        "variant": variant,
        "samples_per_step": per_step,
        "samples_per_s": round(per_step / step_s, 1),
        "step_ms": round(step_ms, 3),
        "build_and_first_step_s": round(first, 2),
        "timed_steps": args.steps,
        "profiled_steps": args.profile_steps,
        **doc,
    }
    # the GPU's idle time per step: host work, launches and data between kernels (0 where streams overlap)
    doc["gpu_idle_ms_per_step"] = round(max(0.0, step_ms - doc["kernel_ms_per_step"]), 3) if cuda else None
    doc["settings"] = {
        "device": str(dev),
        "scale": args.scale,
        "torch": torch.__version__,
        "compile_mode": os.environ.get("GPULAB_COMPILE_MODE") or None,
        "inductor": os.environ.get("GPULAB_INDUCTOR") or None,
        "cudnn_benchmark_limit": args.cudnn_benchmark_limit,
        "set": args.overrides or None,
    }
    if cuda:
        doc["settings"]["gpu"] = torch.cuda.get_device_name(dev)
        doc["settings"]["cudnn"] = torch.backends.cudnn.version()
        doc["max_memory_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
    return doc


def table(doc: dict, top: int = 10) -> str:
    """A short Markdown table of a profile document: groups as shares of the step, categories, top kernels."""
    cats = doc["categories"]
    idle = doc.get("gpu_idle_ms_per_step")
    # on a GPU the shares are of the step (kernels + idle; overlapping streams can only add up to more);
    # on a CPU of the summed operator time (threads and the profiler make it no part of the step)
    whole = max(doc["step_ms"], doc["kernel_ms_per_step"]) if idle is not None else doc["kernel_ms_per_step"]
    whole = whole or 1.0
    st = doc["settings"]
    lines = [
        (
            f"# {doc['workload']} ({doc['variant']}), scale {st['scale']}, {st.get('gpu') or st['device']}, "
            f"torch {st['torch']}"
        ),
        "",
        (
            f"{doc['samples_per_s']:,} samples/s at {doc['samples_per_step']:,} a step; step {doc['step_ms']} ms, "
            f"kernels {doc['kernel_ms_per_step']} ms/step ({doc['profiled_steps']} steps profiled, "
            f"{doc['timed_steps']} timed); build and first step {doc['build_and_first_step_s']} s"
        ),
        "",
        "| where the step's time goes | ms/step | share of the "
        + ("step |" if idle is not None else "operator time (CPU) |"),
        "|---|---:|---:|",
    ]
    for group, members in GROUPS:
        ms = sum(cats[c]["ms_per_step"] for c in members if c in cats)
        if ms:
            lines.append(f"| {group} | {ms:.3f} | {100 * ms / whole:.1f} % |")
    lines.append(
        f"| GPU idle (host work, launches, data) | {idle:.3f} | {100 * idle / whole:.1f} % |"
        if idle is not None
        else "| GPU idle (host work, launches, data) | not measured (CPU) | |"
    )
    lines += ["", "| category | ms/step | share of kernel time |", "|---|---:|---:|"]
    lines += [f"| {c} | {v['ms_per_step']:.3f} | {100 * v['share']:.1f} % |" for c, v in cats.items()]
    lines += [
        "",
        f"| top kernel ({min(top, len(doc['top_kernels']))}) | category | ms/step | calls/step | share |",
        "|---|---|---:|---:|---:|",
    ]
    for k in doc["top_kernels"][:top]:
        name = k["name"].replace("|", "/")[:100]
        lines.append(
            f"| `{name}` | {k['category']} | {k['ms_per_step']:.3f} | {k['calls_per_step']:g} | "
            f"{100 * k['share']:.1f} % |"
        )
    return "\n".join(lines) + "\n"


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
    ap.add_argument(
        "--cudnn-benchmark-limit", type=int, default=None, help="cuDNN algorithms tried per convolution (0: all)"
    )
    ap.add_argument(
        "--set",
        default=None,
        metavar="KEY=VALUE,...",
        help="replace settings of the workload's scale for this profile (as tune.py's set=)",
    )
    ap.add_argument("--trace", default=None, help="also write a Chrome trace here")
    ap.add_argument("--out", default=None, help="JSON output (default: stdout only)")
    ap.add_argument("--table", default=None, help="also write a short Markdown table here")
    args = ap.parse_args(argv)
    if args.workload not in workloads.load():
        print(
            f"profile_step.py: workload {args.workload!r} is not registered "
            f"(known: {', '.join(sorted(workloads.load()))})",
            file=sys.stderr,
        )
        return 2
    for flag, value in (("--batch", args.batch), ("--profile-steps", args.profile_steps), ("--steps", args.steps)):
        if value is not None and value < 1:
            print(f"profile_step.py: {flag} {value}: must be at least 1", file=sys.stderr)
            return 2
    for flag, path in (("--out", args.out), ("--table", args.table)):
        if path and not Path(path).resolve().parent.is_dir():
            print(f"profile_step.py: {flag} {path}: its folder does not exist", file=sys.stderr)
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
    if args.table:
        Path(args.table).write_text(table(doc))
    print(
        f"[profile] {args.workload} {doc['variant']}: {doc['samples_per_s']:,} samples/s, "
        f"step {doc['step_ms']} ms, kernels {doc['kernel_ms_per_step']} ms/step, "
        f"GPU idle {doc['gpu_idle_ms_per_step'] if gpu else 'n/a (CPU)'} ms/step",
        flush=True,
    )
    for cat, v in doc["categories"].items():
        print(f"[profile]   {cat:<16} {v['ms_per_step']:>9.3f} ms/step  {100 * v['share']:5.1f} %", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
