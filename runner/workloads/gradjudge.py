"""The verdict of a whole-model gradient comparison: the optimized path against the plain model.

``judge(ref, got, precision, noise=None)`` takes three maps of parameter name
to gradient (a tensor, or None for no gradient):

- ``ref``: the plain model (eager, fp32, NCHW, TF32 off): the reference;
- ``got``: the optimized path, in ``precision`` (bf16, fp16 or fp32);
- ``noise``: for bf16 and fp16, the plain eager model under the optimized
  path's precision and TF32 setting, from the same weights and batch: the
  distance the precision alone puts between a correct model and ``ref``.

It is pure (no GPU, no model): the GPU check (benchmarks/gradcheck.py) and
the CPU unit tests give it gradient maps.

Design. Rounding noise and real faults look different at two scales:

1. The whole gradient vector (every compared parameter, concatenated): the
   relative distance ``d = |got - ref| / |ref|``. bf16 rounding moves it by
   an amount that depends on the model's conditioning (measured on one H200,
   torch 2.11, plain bf16 pass: 0.0034 gnmt full, 0.078 resnet50 small, 0.33
   ssd full), so a fixed bound either fails ssd or lets anything pass for
   gnmt. The bound is the plain model's own bf16 distance, measured in the
   same case: ``d <= NOISE_FACTOR * d_noise + NOISE_ABS``. Two correct bf16
   paths of one function differ from fp32 by comparable amounts (measured:
   optimized / plain between 0.89 and 1.03 for all six workloads); a fault
   that adds an error of its own the size of the rounding noise fails.
   fp32 (TF32 off in every pass) is the strict structural check: rounding is
   2^-24 there, so ``d <= FP32_DISTANCE`` (measured at most 0.0036, ssd
   full, where cuDNN's algorithm choice reorders sums) and each parameter's
   own relative error is held to ``FP32_PARAM_ERROR`` (measured at most 0.008).
   A model can amplify fp32 rounding past that bound: resnet50 full (the
   reference initialisation, no zero-initialised residual batch norm; its plain
   bf16 pass is 1.3 from fp32) measured 0.021 on one H100, every parameter at
   cosine >= 0.9997 and scale 1 +- 0.004, the error growing from 2e-5 at the
   classifier to 0.01 in layer4 and 0.02 below, the stem no different. So
   with an fp32 ``noise`` pass (the plain model in fp32 with the optimized
   path's channels-last layout, TF32 off: the same function summed in another
   order) the bound is ``max(FP32_DISTANCE, NOISE_FACTOR * d_noise + NOISE_ABS)``:
   the fixed bound for well-conditioned models, the model's own fp32 spread
   where it is larger.
2. Each parameter alone, where noise cannot explain the finding whatever the
   conditioning: a missing gradient (a parameter cut from the graph), a
   gradient where the plain model has none, a shape mismatch, a non-finite
   value, a zero gradient (``|got| <= ZERO_SHARE * |ref|``, unless the
   precision zeroes it in the plain model too), and a consistently scaled
   gradient: the projection ``c = <got, ref> / |ref|^2`` (exactly the factor
   of a scaled gradient) with ``|c - 1| > max(SCALE_TOLERANCE, SCALE_NOISE *
   e_noise)``, ``e_noise`` the plain pass's own relative error on that
   parameter (|c - 1| can be at most the parameter's relative error, so an
   ill-conditioned parameter whose plain bf16 gradient is 40% off is allowed
   more; measured: the worst parameter of every workload used 0.22 of its
   allowance). Per-parameter cosines are reported, never judged on their own
   in bf16: a parameter of 16 values at cosine 0.88 is bf16 noise in ssd.
"""

from __future__ import annotations

import math

import torch

#: the whole-vector bound against the plain model's own bf16 distance
NOISE_FACTOR = 2.0
NOISE_ABS = 1e-3
#: fp32, TF32 off: the whole-vector and per-parameter relative errors allowed
FP32_DISTANCE = 0.02
FP32_PARAM_ERROR = 0.1
#: |c - 1| allowed for a parameter's projection scale before it counts as scaled
SCALE_TOLERANCE = {"bf16": 0.25, "fp16": 0.25, "fp32": 0.02}
SCALE_NOISE = 3.0
#: a gradient at most this share of the reference's norm counts as zero
ZERO_SHARE = 1e-3
#: a parameter whose gradient is below this share of the largest one in both paths is
#: "zero in both" (reported, not compared: the check says nothing about it)
NEGLIGIBLE = 1e-7
PRECISIONS = tuple(SCALE_TOLERANCE)


def _norm(t) -> float:
    return 0.0 if t is None else float(t.double().norm())


def _finite(t) -> bool:
    return t is None or bool(torch.isfinite(t).all())


def _dist(a, b) -> float:
    return float((b.double() - a.double()).norm())


def _fail(failures: list, name: str, rule: str, why: str) -> None:
    failures.append({"name": name, "rule": rule, "why": why})


def _distance(failures: list, sums: dict, rows: list, largest: float, precision: str, noise) -> dict:
    """The whole-model relative distance, its noise and its limit; a failure when it passes the limit."""
    strict = precision == "fp32"
    distance = {"optimized": None, "noise": None, "limit": None}
    if largest == 0.0:
        _fail(failures, "*", "empty", "no gradient at all in the plain model")
    elif sums["ref"] > 0:
        d = math.sqrt(sums["got"] / sums["ref"])
        distance["optimized"] = d
        if strict and (noise is None or any(r["noise_error"] is None for r in rows)):
            distance["limit"] = FP32_DISTANCE
        elif noise is None or any(r["noise_error"] is None for r in rows):
            _fail(
                failures,
                "*",
                "noise",
                f"no usable plain {precision} pass for every parameter: a {precision} path is judged against it",
            )
        else:
            distance["noise"] = math.sqrt(sums["noise"] / sums["ref"])
            distance["limit"] = NOISE_FACTOR * distance["noise"] + NOISE_ABS
            if strict:
                distance["limit"] = max(FP32_DISTANCE, distance["limit"])
        if distance["limit"] is not None and d > distance["limit"]:
            base = (
                ""
                if distance["noise"] is None
                else (f" ({NOISE_FACTOR:g} x the plain {precision} pass's {distance['noise']:.4g} + {NOISE_ABS:g})")
            )
            _fail(failures, "*", "distance", f"whole-model relative distance {d:.4g} > {distance['limit']:.4g}" + base)
    return distance


def judge(ref: dict, got: dict, precision: str = "bf16", noise: dict | None = None) -> dict:
    """The verdict on ``got`` against ``ref`` (see the module docstring). Returns ``{"passed",
    "precision", "parameters", "compared", "zero_in_both": [names], "distance": {"optimized",
    "noise", "limit"}, "failures": [{name, rule, why}], "rows": [{name, norm, norm_ratio, cosine,
    scale, error, noise_error}], "lowest": the row of the lowest cosine}``; a failure's rule is
    one of missing, extra, shape, non-finite, zero, scaled, error (fp32 per parameter),
    distance (whole vector), noise (no usable noise pass) and empty (no gradient at all)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    failures: list = []
    rows: list = []
    zero: list = []
    largest = max((_norm(g) for g in ref.values() if _finite(g)), default=0.0)
    tiny = largest * NEGLIGIBLE
    sums = {"ref": 0.0, "got": 0.0, "noise": 0.0}
    for name, a in ref.items():
        f = None if noise is None else noise.get(name)
        row, counted = _judge_parameter(name, a, got.get(name), f, name in got, tiny, precision, failures, zero)
        if row is not None:
            rows.append(row)
        if counted:
            na, err, e_noise = row["norm"], row["error"], row["noise_error"]
            sums["ref"] += na * na
            sums["got"] += (err * na) ** 2
            if e_noise is not None:
                sums["noise"] += (e_noise * na) ** 2
    for name in got:
        if name not in ref:
            _fail(failures, name, "extra", "parameter only in the optimized model")
    distance = _distance(failures, sums, rows, largest, precision, noise)
    low = min(rows, key=lambda r: r["cosine"], default=None)
    return {
        "passed": not failures,
        "precision": precision,
        "parameters": len(ref),
        "compared": len(rows),
        "zero_in_both": zero,
        "distance": distance,
        "failures": failures,
        "rows": rows,
        "lowest": low,
    }


def _judge_parameter(
    name: str, a, b, f, in_got: bool, tiny: float, precision: str, failures: list, zero: list
) -> tuple[dict | None, bool]:
    """(the row of one parameter's gradients ``a`` (plain), ``b`` (optimized) and ``f`` (the noise pass), or
    None where they cannot be compared; whether it counts in the whole-vector distance). A failure joins
    ``failures``, a gradient negligible in both ``zero``."""
    if not _finite(a):
        _fail(failures, name, "non-finite", "gradient not finite in the plain model")
        return None, False
    if not _finite(b):
        _fail(failures, name, "non-finite", "gradient not finite in the optimized path")
        return None, False
    na, nb = _norm(a), _norm(b)
    if not in_got:
        _fail(failures, name, "missing", "no such parameter in the optimized model")
        return None, False
    if na <= tiny and nb <= tiny:
        zero.append(name)
        return None, False
    if a is None or na == 0.0:
        _fail(failures, name, "extra", f"gradient (norm {nb:.3g}) where the plain model has none")
        return None, False
    if b is None:
        _fail(failures, name, "missing", "no gradient in the optimized path (cut from the graph)")
        return None, False
    if b.shape != a.shape:
        _fail(failures, name, "shape", f"shape {tuple(b.shape)} against {tuple(a.shape)}")
        return None, False
    dot = float((a.double() * b.double()).sum())
    err = _dist(a, b) / na
    e_noise = None
    if f is not None and _finite(f) and f.shape == a.shape:
        e_noise = _dist(a, f) / na
    row = {
        "name": name,
        "norm": na,
        "norm_ratio": nb / na,
        "cosine": dot / (na * nb) if nb > 0 else 0.0,
        "scale": dot / (na * na),
        "error": err,
        "noise_error": e_noise,
    }
    if nb <= ZERO_SHARE * na:
        if e_noise is not None and _norm(f) <= ZERO_SHARE * na:
            pass  # the precision zeroes it in the plain model too: noise, judged with the rest
        else:
            _fail(failures, name, "zero", f"zero gradient in the optimized path (norm {nb:.3g} against {na:.3g})")
            return row, False
    allowed = max(SCALE_TOLERANCE[precision], SCALE_NOISE * (e_noise or 0.0))
    if abs(row["scale"] - 1) > allowed:
        _fail(
            failures,
            name,
            "scaled",
            f"scaled by {row['scale']:.4f} (projection on the plain gradient; "
            f"allowed 1 +- {allowed:.3f}, plain {precision} pass error {_fmt(e_noise)})",
        )
        return row, False
    if precision == "fp32" and err > FP32_PARAM_ERROR:
        _fail(failures, name, "error", f"relative error {err:.4f} > {FP32_PARAM_ERROR} in fp32")
        return row, False
    return row, True


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4f}"
