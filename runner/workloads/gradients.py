"""The whole-model gradient of one training step, for checking optimized paths.

``gradient_step(name, device, optimized, ...)`` builds workload ``name`` the
way the runner builds it and runs one training step through the trainer's own
step code, then returns every parameter's gradient as it stands when the
trainer calls its optimizer; the optimizer step itself is not taken.

- ``optimized=True``: the path throughput (or ttt) mode runs on a GPU:
  ``ctx.optimized``, torch.compile with the scale's ``compile_mode`` and
  ``inductor`` settings, channels-last, the workload's replacement layers
  (for instance resnet50's fast stem), fused optimizer, bf16 autocast, TF32
  allowed (as ``runner.worker`` allows it).
- ``optimized=False``: the plain model: eager, fp32 weights and arithmetic
  (no autocast, no TF32), NCHW, torch.optim defaults.

Both read the same batch: ``mode="throughput"`` the trainer's synthetic
on-device batch (drawn from the seed), ``mode="ttt"`` the first batch of
epoch 1 of the generated data set (tiny and small scales). Dropout is off
(``dropout: 0`` where the scale has that setting) and gradient clipping too
(``grad_clip: 0``: it rescales all gradients by one factor after the
backward pass, which is not what is checked). With ``weights=None`` the model
keeps its own initialization, except that parameters initialized to one
constant (normalization scales and shifts, biases, the zero-initialized last
BN of each residual branch) are moved off it by a seeded N(0, 0.1) draw: at a
constant initialization some gradients are exactly zero in every path (a
zero BN scale blocks its whole branch), and the check would prove nothing for
them. The weights used are returned, so that the other path can load them.

No workload module needs code for this: every trainer keeps the contract of
runner.workloads.trainer (its model in ``.model``, one shared optimizer step
that calls ``gradient_probe(loss)`` with the gradients in place, unscaled,
before the update), and runs a step through ``throughput_step()`` or
``train_epoch(epoch)``.
"""

from __future__ import annotations

import contextlib
import time

import torch

from runner.workloads.base import WorkloadError, bench_context
from runner.workloads.trainer import spec_of

#: settings that change the training step but not the gradient being checked
NEUTRAL = {"dropout": 0.0, "grad_clip": 0}
MODES = ("throughput", "ttt")


class _Taken(Exception):
    """Raised from the optimizer's step once the gradients are copied: the step ends there."""


@contextlib.contextmanager
def _numerics(device: torch.device, optimized: bool):
    """TF32 and cuDNN autotuning as the runner sets them (optimized) or off (the fp32 reference)."""
    if device.type != "cuda":
        yield
        return
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    torch.backends.cuda.matmul.allow_tf32 = optimized
    torch.backends.cudnn.allow_tf32 = optimized
    torch.backends.cudnn.benchmark = optimized
    try:
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) = saved


@contextlib.contextmanager
def _compile_backend(backend: str | None):
    """``torch.compile`` with ``backend`` while the trainer is built (it wraps its functions then)."""
    if backend is None:
        yield
        return
    real = torch.compile

    def compile_with(fn=None, **kw):
        kw["backend"] = backend
        kw.pop("mode", None)  # modes are Inductor's
        return real(fn, **kw) if fn is not None else real(**kw)

    torch.compile = compile_with
    try:
        yield
    finally:
        torch.compile = real


def perturb_constants(model: torch.nn.Module, seed: int) -> list[str]:
    """Add a seeded N(0, 0.1) draw to every trainable parameter that holds one value
    throughout; returns their names."""
    g = torch.Generator().manual_seed(seed * 7919 + 17)
    moved = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad or p.numel() == 0:
                continue
            flat = p.detach().reshape(-1)
            if bool((flat == flat[0]).all()):
                p.add_(0.1 * torch.randn(p.shape, generator=g).to(p.device, p.dtype))
                moved.append(name)
    return moved


def gradient_step(
    name: str,
    device,
    optimized: bool,
    *,
    scale: str = "small",
    seed: int = 0,
    precision: str | None = None,
    batch_size: int | None = None,
    mode: str = "throughput",
    weights: dict | None = None,
    compile: bool | None = None,
    channels_last: bool | None = None,
    overrides: dict | None = None,
    backend: str | None = None,
    tf32: bool | None = None,
) -> dict:
    """One training step of workload ``name``; see the module docstring.

    ``precision`` defaults to bf16 (optimized) and fp32 (plain); ``compile``
    and ``channels_last`` default to what the runner does on that device (a
    test may ask for both on the CPU); ``batch_size`` replaces the throughput
    batch; ``backend`` replaces torch.compile's (Inductor) with another, for
    instance ``aot_eager`` (Dynamo and AOTAutograd without code generation: a
    quick check on a CPU); ``tf32`` (default: ``optimized``) allows TF32 and
    cuDNN autotuning on a GPU (the noise pass: the plain model with the
    optimized path's numerics). Returns ``{"grads": {parameter: fp32 CPU tensor or None},
    "weights": state dict (CPU), "perturbed": [names], "loss": float,
    "modules": [class names in the model], "build_s", "step_s"}``.
    """
    if mode not in MODES:
        raise WorkloadError(f"gradient_step: mode {mode!r}: use one of {', '.join(MODES)}")
    device = torch.device(device)
    precision = precision or ("bf16" if optimized else "fp32")
    t0 = time.time()
    ctx, module = bench_context(
        name,
        device,
        optimized,
        scale=scale,
        precision=precision,
        batch_size=batch_size,
        seed=seed,
        overrides=overrides,
        mode=mode,
        compile=compile,
        channels_last=channels_last,
    )
    trainer, perturbed = _build(ctx, module, seed, weights, backend)
    model = trainer.model
    used = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    build_s = time.time() - t0
    t1 = time.time()
    grads, losses = _take_gradients(trainer, device, optimized if tf32 is None else tf32, mode, seed)
    if not grads:
        raise WorkloadError(f"gradient_step: {name} ({mode}) never reached its optimizer step")
    modules = sorted({type(m).__name__ for m in model.modules()})
    loss = float(losses[0].float()) if losses else None
    return {
        "grads": grads,
        "weights": used,
        "perturbed": perturbed,
        "loss": loss,
        "modules": modules,
        "build_s": round(build_s, 3),
        "step_s": round(time.time() - t1, 3),
    }


def _build(ctx, module, seed: int, weights: dict | None, backend: str | None) -> tuple:
    """(the workload's trainer with the NEUTRAL settings, the names of the constants perturbed: none when
    ``weights`` are loaded instead)."""
    for key, value in NEUTRAL.items():
        if key in ctx.cfg:
            ctx.cfg[key] = value
    torch.manual_seed(seed)
    with _compile_backend(backend):
        trainer = spec_of(module).build(ctx)
    if weights is None:
        return trainer, perturb_constants(trainer.model, seed)
    trainer.model.load_state_dict(weights)
    return trainer, []


def _take_gradients(trainer, device, tf32: bool, mode: str, seed: int) -> tuple[dict, list]:
    """({parameter: its gradient at the first optimizer step, fp32 on the CPU}, [the step's loss]): one
    step of ``mode`` stopped at the trainer's gradient probe."""
    model = trainer.model
    grads: dict = {}
    losses: list = []

    def take(loss):
        losses.append(loss.detach())
        for pname, p in model.named_parameters():
            if p.requires_grad:
                grads[pname] = None if p.grad is None else p.grad.detach().float().cpu().clone()
        raise _Taken

    trainer.gradient_probe = take
    with _numerics(device, tf32):
        torch.manual_seed(seed)
        try:
            if mode == "throughput":
                trainer.throughput_step()
            else:
                trainer.train_epoch(1)
        except _Taken:
            pass
    return grads, losses


# The comparison of two such gradient maps and its verdict: runner.workloads.gradjudge.


# --- CUDA autocast's promoted ops, checked on a CPU -------------------------------------------
#
# CUDA autocast runs a few ops at the widest floating type of their inputs ("promote":
# scatter_add, index_put, addcmul, ...) and accepts among those inputs only fp32, fp64
# and autocast's own dtype: a float16 input under bf16 autocast stops the step with
# "Unexpected floating ScalarType in at::autocast::prioritize". Under CUDA autocast the
# cuDNN RNNs (nn.LSTM) always run in float16, whatever autocast's dtype, so a bf16 run
# meets such an input wherever an LSTM output (or its gradient) reaches one of these ops,
# in the forward or, under torch.compile (which traces the backward under the forward's
# autocast), in the backward. CPU autocast promotes other ops (cat, stack, index_copy), so
# a CPU run does not fail there; ``promote_capture_backend`` finds the cases on a CPU.

#: ops CUDA autocast promotes (its "promote" list; cat and stack promote by themselves)
CUDA_PROMOTE_OPS = (
    "addcdiv",
    "addcmul",
    "atan2",
    "bilinear",
    "cross",
    "dot",
    "vdot",
    "grid_sampler",
    "index_put",
    "tensordot",
    "scatter_add",
)


def promote_capture_backend():
    """A torch.compile backend (AOTAutograd, eager kernels) that records, in its ``hazards``
    list, every call of a CUDA-promoted op in the forward and backward graphs that has a
    bf16 or fp16 input: ``(graph, op, input dtypes)``. On a GPU such an input can be a
    cuDNN RNN's float16 output under bf16 autocast, which that op refuses."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    hazards: list = []
    low = (torch.bfloat16, torch.float16)

    def inspect(which):
        def compiler(gm, example_inputs):
            for node in gm.graph.nodes:
                if node.op != "call_function":
                    continue
                name = getattr(node.target, "_opname", None) or getattr(node.target, "__name__", "")
                if name.rstrip("_") not in CUDA_PROMOTE_OPS:
                    continue
                dtypes = sorted(
                    {
                        str(a.meta["val"].dtype)
                        for a in node.all_input_nodes
                        if isinstance(a.meta.get("val"), torch.Tensor) and a.meta["val"].is_floating_point()
                    }
                )
                if any(str(d) in dtypes for d in low):
                    hazards.append((which, str(node.target), dtypes))
            return make_boxed_func(gm.forward)

        return compiler

    backend = aot_autograd(fw_compiler=inspect("forward"), bw_compiler=inspect("backward"))
    backend.hazards = hazards
    return backend
