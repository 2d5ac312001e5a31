"""The learning-rate schedules of the workloads, by name: a scale's ``lr_schedule`` in workloads.yml.

Each schedule is a function of the update's number and keyword parameters the workload
works out from its settings (rates, step counts); ``rate(name, step, **params)`` runs the
one a scale names, ``check(name, allowed, where)`` refuses a name its workload cannot use.
Every schedule follows one reference (its docstring says which); the tests under
tests/unit/runner pin each against its reference.

- ``constant``: the base rate throughout (NCF's Adam at a fixed rate);
- ``poly``: linear warm-up, then polynomial decay (resnet50's test scales);
- ``step``: linear warm-up from 0, then a factor after each boundary (resnet50's reference);
- ``warmup_step``: linear warm-up from a fraction, then a factor from each boundary on (ssd);
- ``multistep``: maskrcnn-benchmark's WarmupMultiStepLR, per parameter group;
- ``gnmt``: the GNMT reference's exponential warm-up and step decay (1-based updates);
- ``rsqrt``: fairseq's inverse square root (1-based updates).
"""

from __future__ import annotations

import math
from bisect import bisect_right

from runner.workloads.errors import WorkloadError


def constant_lr(step: int, base: float) -> float:
    return base


def poly_lr(step: int, total: int, warmup: int, base: float, end: float, power: float) -> float:
    """Linear warm-up to ``base``, then polynomial decay to ``end`` at ``total`` steps."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return end + (base - end) * (1.0 - t) ** power


def tf_step_lr(step: int, peak: float, warmup: int, boundaries, factor: float) -> float:
    """Linear warm-up from 0, then piecewise constant: ``peak * factor**k`` once ``step`` is past k boundaries.

    A boundary step itself still has the rate before it (the reference's
    ``tf.train.piecewise_constant`` changes value only after the boundary).
    """
    if step < warmup:
        return peak * step / warmup
    return peak * factor ** sum(1 for b in boundaries if step > b)


def warmup_step_lr(step: int, warmup: int, warmup_factor: float, base: float, boundaries, factor: float) -> float:
    """Linear warm-up from ``warmup_factor * base``, then ``factor`` at each boundary (in steps)."""
    if warmup > 0 and step < warmup:
        a = step / warmup
        return base * (warmup_factor * (1 - a) + a)
    return base * factor ** sum(1 for b in boundaries if step >= b)


def multistep_lr(
    step: int,
    group_base: float,
    base: float,
    warmup: int,
    boundaries,
    method: str,
    warmup_factor: float = 1.0 / 3,
    gamma: float = 0.1,
) -> float:
    """One group's rate at iteration ``step`` (from 0), as WarmupMultiStepLR gives it then."""
    decay = gamma ** bisect_right(boundaries, step)
    if step < warmup:
        if method == "mlperf_linear":
            return (group_base - (warmup - step) * (base / warmup)) * decay
        if method == "linear":
            alpha = step / warmup
            return group_base * (warmup_factor * (1 - alpha) + alpha) * decay
        raise ValueError(f"warmup_method {method!r}: expected mlperf_linear or linear")
    return group_base * decay


def gnmt_lr(update: int, base: float, warmup: int, remain: int, interval: int, steps: int, factor: float) -> float:
    """Rate of update ``update`` (1 = the first), as the GNMT reference's WarmupMultiStepLR.

    Exponential warm-up from ``base / 100`` reaching ``base`` at update
    ``warmup``; from update ``remain`` on, ``base * factor ** k`` with
    ``k = min((update - remain) // interval + 1, steps)``.
    """
    if warmup > 0 and update <= warmup:
        return base * math.exp(math.log(0.01) / warmup) ** (warmup - update)
    if interval > 0 and update >= remain:
        return base * factor ** min((update - remain) // interval + 1, steps)
    return base


def rsqrt_lr(update: int, base: float, warmup: int) -> float:
    """Rate of update ``update`` (1 = the first), as fairseq's inverse_sqrt with ``--warmup-init-lr 0``.

    The rate after ``u`` updates is ``base * u / warmup`` while ``u < warmup``,
    then ``base * sqrt(warmup / u)``; update ``u + 1`` runs with it.
    """
    u = update - 1
    if u < warmup:
        return base * u / warmup
    return base * math.sqrt(warmup / u)


SCHEDULES = {
    "constant": constant_lr,
    "poly": poly_lr,
    "step": tf_step_lr,
    "warmup_step": warmup_step_lr,
    "multistep": multistep_lr,
    "gnmt": gnmt_lr,
    "rsqrt": rsqrt_lr,
}


def check(name, allowed: tuple[str, ...], where: str) -> str:
    """``name`` when it is one of ``allowed`` (schedules the workload can feed), else WorkloadError."""
    if name not in allowed:
        raise WorkloadError(f"{where}: lr_schedule {name!r}: use one of {', '.join(allowed)}")
    return name


def rate(name: str, step: int, **params) -> float:
    """The rate of schedule ``name`` at ``step`` (see each schedule for how it counts)."""
    return SCHEDULES[name](step, **params)
