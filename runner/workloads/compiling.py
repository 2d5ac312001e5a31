"""The speed path of the workloads, decided in one place: ``decide`` (which options a run takes),
``compile_fn`` (torch.compile with the scale's mode and Inductor settings), ``cuda_backends`` (TF32,
cuDNN's algorithm search) and the ``key=value``
parsing of ``GPULAB_INDUCTOR`` (re-exported by runner.workloads.base, where callers read them)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from runner.workloads.errors import WorkloadError

if TYPE_CHECKING:
    from runner.workloads.context import Context


def _option_value(text: str):
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def key_values(text: str, source: str) -> dict:
    """``"key=value,key=value"`` -> a dict of typed values (see _option_value); ``source`` names the text in errors."""
    out = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkloadError(f"{source}: {item!r} is not key=value")
        out[key.strip()] = _option_value(value)
    return out


def inductor_options(cfg_options: dict | None) -> dict:
    """The workload's ``inductor:`` settings, with ``GPULAB_INDUCTOR`` ("key=value,...") on top."""
    return {**(cfg_options or {}), **key_values(os.environ.get("GPULAB_INDUCTOR") or "", "GPULAB_INDUCTOR")}


def decide(ctx, compile_modes) -> None:
    """Settle the run's speed options on ``ctx`` before its trainer is built (WorkloadSpec.build).

    ``ctx.compile`` (asked by the run: on CUDA unless the spec says otherwise) stays on only in
    the modes the workload declares compilable (``compile_modes`` of its WorkloadSpec) and
    where the scale does not say ``compile: false``; what a workload compiles goes through
    ``compile_fn``. ``ctx.fast_layers`` (the workload's exact, faster replacement layers, such
    as resnet50's space-to-depth stem) is on for a compiled run of the optimized path:
    the forms pay once Inductor fuses them. ``ctx.channels_last`` and the fused optimizer
    (``ctx.fused()``) are the Context's own (CUDA, the optimized path).
    """
    ctx.compile = bool(ctx.compile and ctx.mode in compile_modes and ctx.cfg.get("compile", True))
    ctx.fast_layers = bool(ctx.optimized and ctx.compile)
    cpu_layout(ctx)


def cpu_layout(ctx) -> None:
    """Channels-last stays off in CPU bf16 runs where oneDNN's kernel would kill the process.

    The one owner of that rule (runner/README "CPU runs and oneDNN"): ``ctx.channels_last`` off,
    and for a compiled run Inductor's layout optimization too (on a CPU it turns every
    convolution channels-last), both said once on stderr and in ``ctx.notes``; the run goes on
    in NCHW. Elsewhere (GPU, fp32, AVX2) nothing changes.
    """
    if ctx.device.type != "cpu" or ctx.precision != "bf16" or not (ctx.channels_last or ctx.compile):
        return
    from runner.workloads import cpucaps

    why = cpucaps.bf16_channels_last_crash()
    if why is None:
        return
    ctx.channels_last = False
    if ctx.compile:
        import torch._inductor.config as inductor_config

        inductor_config.layout_optimization = False  # this process runs one workload
    note = f"channels-last off: {why}; the run uses the NCHW layout"
    if note not in ctx.notes:
        ctx.notes.append(note)
        print(f"[workload] {note}", file=sys.stderr, flush=True)


def cuda_backends() -> None:
    """The CUDA math settings of a GPU run, in one place (the runner's worker, the benchmarks): TF32 in
    matmul and convolution, and cuDNN's algorithm search. ``GPULAB_CUDNN_BENCHMARK`` sets the search:
    ``on`` (the default: ``cudnn.benchmark``, every convolution shape times the algorithms at its first
    call, in the first step), ``off`` (cuDNN's heuristics: no search) or a count N (the search tries at
    most N algorithms, ``cudnn.benchmark_limit``); another value is a WorkloadError."""
    import torch  # here, not at the top: benchmarks/tune.py reads key_values without loading torch

    text = (os.environ.get("GPULAB_CUDNN_BENCHMARK") or "on").strip().lower()
    if text not in ("on", "off") and not (text.isdigit() and int(text) > 0):
        raise WorkloadError(f"GPULAB_CUDNN_BENCHMARK={text!r}: use on, off or a count of algorithms (1 or more)")
    torch.backends.cudnn.benchmark = text != "off"
    if text.isdigit():
        torch.backends.cudnn.benchmark_limit = int(text)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def build_device(ctx):
    """Where a workload constructs its model (``with build_device(ctx): model = ...``).

    A GPU run builds it on the GPU itself (``torch.device`` as the default device): the initialisation
    is drawn there (the GPU's generator: other values of the same distributions than a host build) and
    no host-side initialisation and copy come before the first step (a warm start of transformer on an
    H100: the model built in 3.7 s on the host, 2.1 s on the GPU; the first step at 15.5 s and 14.1 s;
    benchmarks/recorded/h100-2026-12-07b).
    ``GPULAB_BUILD_ON_DEVICE=0`` builds on the host; a CPU run always does. Another value is a WorkloadError.
    """
    import contextlib

    value = (os.environ.get("GPULAB_BUILD_ON_DEVICE") or "1").strip()
    if value not in ("0", "1"):
        raise WorkloadError(f"GPULAB_BUILD_ON_DEVICE={value!r}: use 1 (build the model on the GPU) or 0")
    if value == "1" and ctx.device.type != "cpu":
        import torch

        return torch.device(ctx.device)
    return contextlib.nullcontext()


def compile_fn(ctx: Context, fn, dynamic: bool | None = False, options: dict | None = None):
    """``torch.compile(fn)`` when the context compiles, else ``fn``.

    The mode is the scale's ``compile_mode`` (for instance
    ``max-autotune-no-cudagraphs`` or ``reduce-overhead``);
    ``GPULAB_COMPILE_MODE`` overrides it. ``options`` (default: the scale's
    ``inductor:`` mapping), then ``GPULAB_INDUCTOR``, set Inductor's
    configuration (``torch._inductor.config``, dotted keys such as
    ``triton.cudagraphs``) for this process, which runs one workload; a
    setting the running PyTorch release lacks is skipped with a note on
    stderr (the runner supports releases from ``runner.OLDEST_TORCH`` on).
    Compiled artifacts land in ``TORCHINDUCTOR_CACHE_DIR`` (set by the
    supervisor to the sweep's cache), so later runs of a sweep skip the work.
    """
    if not ctx.compile:
        return fn
    import torch

    mode = os.environ.get("GPULAB_COMPILE_MODE") or ctx.cfg.get("compile_mode")  # the benchmark may try another
    from runner.workloads import COMPILE_MODES

    if mode and mode not in COMPILE_MODES:
        raise WorkloadError(f"compile mode {mode!r} (GPULAB_COMPILE_MODE): use one of {', '.join(COMPILE_MODES)}")
    opts = inductor_options(ctx.cfg.get("inductor") if options is None else options)
    if opts:
        import torch._inductor.config as inductor_config

        for key, value in opts.items():
            *path, leaf = key.split(".")
            target = inductor_config
            try:
                for part in path:
                    target = getattr(target, part)
                getattr(target, leaf)
            except AttributeError:  # settings come and go between releases: run without it, and say so
                print(
                    f"note: inductor option {key!r} skipped: torch {torch.__version__} has no such setting",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            setattr(target, leaf, value)
    kw = {"dynamic": dynamic}
    if mode and mode != "default":
        kw["mode"] = mode
    return torch.compile(fn, **kw)
