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
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark)
    torch.backends.cuda.matmul.allow_tf32 = optimized
    torch.backends.cudnn.allow_tf32 = optimized
    torch.backends.cudnn.benchmark = optimized
    try:
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cudnn.benchmark) = saved


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


def gradient_step(name: str, device, optimized: bool, *, scale: str = "small", seed: int = 0,
                  precision: str | None = None, batch_size: int | None = None, mode: str = "throughput",
                  weights: dict | None = None, compile: bool | None = None,
                  channels_last: bool | None = None, overrides: dict | None = None,
                  backend: str | None = None, tf32: bool | None = None) -> dict:
    """One training step of workload ``name``; see the module docstring.

    ``precision`` defaults to bf16 (optimized) and fp32 (plain); ``compile``
    and ``channels_last`` default to what the runner does on that device (a
    test may ask for both on the CPU); ``batch_size`` replaces the throughput
    batch; ``backend`` replaces torch.compile's (Inductor) with another, for
    instance ``aot_eager`` (Dynamo and AOTAutograd without code generation: a
    quick check on a CPU); ``tf32`` (default: ``optimized``) allows TF32 and
    cuDNN autotuning on a GPU (the noise-floor pass: the plain model with the
    optimized path's numerics). Returns ``{"grads": {parameter: fp32 CPU tensor or None},
    "weights": state dict (CPU), "perturbed": [names], "loss": float,
    "modules": [class names in the model], "build_s", "step_s"}``.
    """
    if mode not in MODES:
        raise WorkloadError(f"gradient_step: mode {mode!r}: use one of {', '.join(MODES)}")
    device = torch.device(device)
    precision = precision or ("bf16" if optimized else "fp32")
    t0 = time.time()
    ctx, module = bench_context(name, device, optimized, scale=scale, precision=precision,
                                batch_size=batch_size, seed=seed, overrides=overrides, mode=mode,
                                compile=compile, channels_last=channels_last)
    for key, value in NEUTRAL.items():
        if key in ctx.cfg:
            ctx.cfg[key] = value
    torch.manual_seed(seed)
    with _compile_backend(backend):
        trainer = spec_of(module).build(ctx)
    model = trainer.model
    perturbed = []
    if weights is None:
        perturbed = perturb_constants(model, seed)
    else:
        model.load_state_dict(weights)
    used = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    build_s = time.time() - t0

    grads: dict = {}
    losses: list = []

    def take(loss):
        losses.append(loss.detach())
        for pname, p in model.named_parameters():
            if p.requires_grad:
                grads[pname] = None if p.grad is None else p.grad.detach().float().cpu().clone()
        raise _Taken

    trainer.gradient_probe = take
    t1 = time.time()
    with _numerics(device, optimized if tf32 is None else tf32):
        torch.manual_seed(seed)
        try:
            if mode == "throughput":
                trainer.throughput_step()
            else:
                trainer.train_epoch(1)
        except _Taken:
            pass
    if not grads:
        raise WorkloadError(f"gradient_step: {name} ({mode}) never reached its optimizer step")
    modules = sorted({type(m).__name__ for m in model.modules()})
    loss = float(losses[0].float()) if losses else None
    return {"grads": grads, "weights": used, "perturbed": perturbed, "loss": loss, "modules": modules,
            "build_s": round(build_s, 3), "step_s": round(time.time() - t1, 3)}


# --- the comparison -------------------------------------------------------------------------
#
# Thresholds, per parameter, optimized gradient g' against the plain fp32 gradient g:
# cosine(g', g) and the norm ratio |g'| / |g|. A relative error e = |g' - g| / |g| gives
# cosine ~ 1 - e^2 / 2 and a norm ratio within 1 +- e.
# - bf16 autocast keeps 8 significant bits (rounding 2^-9 ~ 0.2% per value); rounded
#   activations, weights and upstream gradients through tens of layers leave errors of
#   a few percent of a parameter's gradient: measured on the H200 (torch 2.11) the lowest
#   cosine was 0.996 (maskrcnn), >= 0.99999 for gnmt, transformer and ncf. Cosine >= 0.99
#   allows e up to ~14%; the norm ratio must lie in [0.9, 1/0.9].
# - fp32 on the optimized path (TF32 convolutions and matmuls on a GPU, 10-bit mantissa;
#   reordered sums under Inductor): cosine >= 0.999 and the norm within 1%.
# A gradient that is zero (cosine 0), of the wrong sign (-1), missing (None where the
# plain path has one), not finite, or flowing through a wrong position (a max-pool
# gradient sent to the wrong element of its window: well below 0.9) fails either way.
THRESHOLDS = {"bf16": {"cosine": 0.99, "norm_ratio": (0.9, 1 / 0.9)},
              "fp16": {"cosine": 0.99, "norm_ratio": (0.9, 1 / 0.9)},
              "fp32": {"cosine": 0.999, "norm_ratio": (0.99, 1 / 0.99)}}
#: a parameter whose gradient norm is below this share of the largest one in both paths
#: counts as zero in both (reported, not compared: the check says nothing about it)
ZERO_SHARE = 1e-7

# The noise floor (runner/README "Gradient hook"). Some gradients are ill-conditioned:
# ssd's stem and early BN gradients are sums of many nearly cancelling terms, and bf16
# rounding anywhere upstream moves them by tens of percent (full scale: cosine 0.815 on
# the H200; two bf16 passes differing only in memory layout agree to 0.821). For those the
# fixed thresholds measure bf16, not the optimized path. So a parameter that misses them
# is measured against a third pass, the plain eager model (same weights, same batch)
# under the optimized path's precision and TF32 setting: its cosine f and norm ratio q
# against the same fp32 gradient. The parameter passes by the floor when
# - its cosine is above FLOOR_MIN_COSINE (0.5) and its gradient not zero, whatever f is;
# - cosine >= f - min(FLOOR_MARGIN, 1 - f): at most twice as far from 1 as the plain
#   pass (1 - cos ~ e^2 / 2: an error at most 1.41x the plain pass's) and never more than
#   FLOOR_MARGIN (0.1) below it. Two bf16 passes (NCHW and channels-last, eager) of ssd
#   small on the CPU differ per parameter by up to 1.66x in 1 - cos (0.05 in cosine, at
#   ~0.9, 16-element BN vectors); a fault that moves a gradient (zero, sign, wrong
#   max-pool position, a missing term) gives cosines far below the floor;
# - its norm ratio, divided by q, lies in [lo - (1 - f), hi + (1 - f)] (the fixed
#   bounds widened by the floor's own distance from 1: the component of a rounding error
#   along the gradient moves its norm; the two ssd passes above differ by up to 9.4% in
#   norm where their cosines are ~0.9). A scaled gradient (2x: a loss scale not undone)
#   still fails.
FLOOR_MARGIN = 0.1
FLOOR_MIN_COSINE = 0.5


def _norm(t) -> float:
    return 0.0 if t is None else float(t.double().norm())


def _finite(t) -> bool:
    return t is None or bool(torch.isfinite(t).all())


def _cosine(a, b, na: float, nb: float) -> float:
    return float((a.double() * b.double()).sum()) / (na * nb)


def floor_may_help(res: dict) -> bool:
    """Whether ``compare``'s result failed only on the fixed thresholds (then a noise-floor
    pass may pass it; a zero, missing or non-finite gradient fails whatever the floor)."""
    return (not res["passed"] and res.get("floor") is None
            and all(f.get("thresholds_only") for f in res["failures"]))


def compare(ref: dict, got: dict, precision: str = "bf16", floor: dict | None = None) -> dict:
    """Every parameter's gradient of the optimized path (``got``) against the plain one (``ref``).

    Both map parameter names to tensors (None: no gradient). ``floor``: the same from the
    plain model under the optimized path's precision (the noise floor; see above). Returns
    ``{"passed", "parameters", "compared", "zero_in_both": [names], "lowest": {name,
    cosine, norm_ratio, rule}, "failures": [{name, cosine, norm_ratio, why,
    thresholds_only}], "floor": None or {margin, min_cosine, passed_by_floor: [names]},
    "rows": [{name, cosine, norm_ratio, norm, rule ("fixed", "floor" or None: failed),
    floor_cosine, floor_norm_ratio (where the floor was needed)}]}``.
    """
    th = THRESHOLDS[precision]
    lo, hi = th["norm_ratio"]
    largest = max((_norm(g) for g in ref.values() if _finite(g)), default=0.0)
    small = largest * ZERO_SHARE
    rows, failures, zero, by_floor = [], [], [], []
    for name, a in ref.items():
        if name not in got:
            failures.append({"name": name, "cosine": None, "norm_ratio": None,
                             "why": "no such parameter in the optimized model"})
            continue
        b = got[name]
        if not (_finite(a) and _finite(b)):
            failures.append({"name": name, "cosine": None, "norm_ratio": None, "why": "gradient not finite"})
            continue
        na, nb = _norm(a), _norm(b)
        if na <= small and nb <= small:
            zero.append(name)
            continue
        cos = 0.0
        if na > 0 and nb > 0:
            if a.shape != b.shape:
                failures.append({"name": name, "cosine": None, "norm_ratio": None,
                                 "why": f"shape {tuple(b.shape)} against {tuple(a.shape)}"})
                continue
            cos = _cosine(a, b, na, nb)
        ratio = nb / na if na > 0 else float("inf")
        row = {"name": name, "cosine": round(cos, 9), "norm_ratio": round(ratio, 6) if na > 0 else None,
               "norm": na, "rule": "fixed"}
        rows.append(row)
        hard, missed = [], []
        if b is None:
            hard.append("no gradient in the optimized path")
        elif nb <= small:
            hard.append("zero gradient in the optimized path")
        if na <= small:
            hard.append("gradient where the plain path has none")
        if cos < th["cosine"]:
            missed.append(f"cosine {cos:.4f} < {th['cosine']}")
        if na > 0 and not lo <= ratio <= hi:
            missed.append(f"norm ratio {ratio:.4f} outside [{lo:.3f}, {hi:.3f}]")
        if missed and not hard and floor is not None:
            f = floor.get(name)
            nf = _norm(f)
            if f is not None and _finite(f) and nf > small and f.shape == a.shape:
                fc, fq = _cosine(a, f, na, nf), nf / na
                row.update(floor_cosine=round(fc, 9), floor_norm_ratio=round(fq, 6))
                need = fc - min(FLOOR_MARGIN, 1 - fc)
                flo, fhi = lo - (1 - fc), hi + (1 - fc)
                if cos > FLOOR_MIN_COSINE and cos >= need and flo <= ratio / fq <= fhi:
                    row["rule"] = "floor"
                    by_floor.append(name)
                    continue
                missed.append(f"floor: plain {precision} pass cosine {fc:.4f}, norm ratio {fq:.4f}: needs cosine"
                              f" > {FLOOR_MIN_COSINE} and >= {need:.4f}, ratio / {fq:.4f} in [{flo:.3f}, {fhi:.3f}]")
            else:
                missed.append("floor: no usable gradient in the plain pass")
        if hard or missed:
            row["rule"] = None
            failures.append({"name": name, "cosine": row["cosine"], "norm_ratio": row["norm_ratio"],
                             "why": "; ".join(hard + missed), "thresholds_only": not hard})
    for name in got:
        if name not in ref:
            failures.append({"name": name, "cosine": None, "norm_ratio": None,
                             "why": "parameter only in the optimized model"})
    if largest == 0.0:
        failures.append({"name": "*", "cosine": None, "norm_ratio": None,
                         "why": "no gradient at all in the plain path"})
    low = min(rows, key=lambda r: r["cosine"], default=None)
    return {"passed": not failures, "precision": precision, "thresholds": {"cosine": th["cosine"],
                                                                          "norm_ratio": [lo, hi]},
            "parameters": len(ref), "compared": len(rows), "zero_in_both": zero,
            "lowest": None if low is None else {k: low.get(k) for k in ("name", "cosine", "norm_ratio", "rule",
                                                                        "floor_cosine")},
            "floor": None if floor is None else {"margin": FLOOR_MARGIN, "min_cosine": FLOOR_MIN_COSINE,
                                                 "passed_by_floor": by_floor},
            "failures": failures, "rows": rows}


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
CUDA_PROMOTE_OPS = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
                    "index_put", "tensordot", "scatter_add")


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
                dtypes = sorted({str(a.meta["val"].dtype) for a in node.all_input_nodes
                                 if isinstance(a.meta.get("val"), torch.Tensor)
                                 and a.meta["val"].is_floating_point()})
                if any(str(d) in dtypes for d in low):
                    hazards.append((which, str(node.target), dtypes))
            return make_boxed_func(gm.forward)
        return compiler

    backend = aot_autograd(fw_compiler=inspect("forward"), bw_compiler=inspect("backward"))
    backend.hazards = hazards
    return backend
