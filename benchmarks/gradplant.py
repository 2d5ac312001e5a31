"""Faults planted in the optimized model, to prove that the gradient check catches them.

Used by benchmarks/gradcheck.py (``--plants``) and nowhere in the runner. Each
fault is put into the model a workload's ``build(ctx)`` returns, after it is
built and before its first step (torch.compile traces on the first call, so
the fault is compiled with the rest), and only while the optimized pass is
built: the plain passes stay right.

- ``maxpool``: every ``nn.MaxPool2d`` becomes the removed offset max pool
  (benchmarks/maxpool_diag.py's copy of the custom autograd Function), the
  layer whose backward, compiled by Inductor on CUDA, sent no gradient to the
  stem (issue 20); expected: zero gradients upstream of it. Where the
  compiled backward is right, the plant proves nothing and its test says so.
- ``scaled``: the last parameter of two or more dimensions (the classifier's
  weight, say) gets twice its gradient (a hook after accumulation: a loss
  scale not undone, a doubled reduction); expected: scaled.
- ``detached``: the middle ``nn.Conv2d`` (or ``nn.Linear`` without one)
  reads its weight through ``.detach()``: the parameter is cut from the
  graph; expected: no gradient.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from pathlib import Path

#: the plant, and the judge's failure rule that must name its parameter
EXPECT = {"maxpool": "zero", "scaled": "scaled", "detached": "missing"}


def _old_pool():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import maxpool_diag

    return maxpool_diag.OldPool()


def _names(model) -> dict:
    return {id(p): n for n, p in model.named_parameters()}


def plant(kind: str, model) -> dict:
    """Put fault ``kind`` into ``model`` (in place); returns ``{"plant", "parameters": [names it
    should show in], "modules": [names]}``; ValueError when the model has nothing to plant it in."""
    import torch.nn as nn
    import torch.nn.functional as F

    names = _names(model)
    if kind == "maxpool":
        pools = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.MaxPool2d)]
        if not pools:
            raise ValueError("maxpool: the model has no nn.MaxPool2d")
        for full, _ in pools:
            parent, _, attr = full.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attr, _old_pool())
        return {"plant": kind, "modules": [n for n, _ in pools], "parameters": []}
    if kind == "scaled":
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2]
        if not params:
            raise ValueError("scaled: the model has no parameter of two or more dimensions")
        name, p = params[-1]

        def double(param):
            if param.grad is not None:
                param.grad.mul_(2)

        p.register_post_accumulate_grad_hook(double)
        return {"plant": kind, "modules": [], "parameters": [name]}
    if kind == "detached":
        layers = [(n, m) for n, m in model.named_modules() if type(m) is nn.Conv2d]
        layers = layers or [(n, m) for n, m in model.named_modules() if type(m) is nn.Linear]
        if not layers:
            raise ValueError("detached: the model has no nn.Conv2d or nn.Linear")
        full, m = layers[len(layers) // 2]
        if isinstance(m, nn.Conv2d):
            m.forward = types.MethodType(lambda self, x: self._conv_forward(x, self.weight.detach(), self.bias), m)
        else:
            m.forward = types.MethodType(lambda self, x: F.linear(x, self.weight.detach(), self.bias), m)
        return {"plant": kind, "modules": [full], "parameters": [names[id(m.weight)]]}
    raise ValueError(f"unknown plant {kind!r} (known: {', '.join(EXPECT)})")


@contextlib.contextmanager
def planted(workload: str, kind: str | None, info: dict):
    """While inside, building the workload's trainer for an optimized context plants ``kind``
    into its model; ``info`` receives what ``plant`` returned. The trainer is built through
    the module's ``SPEC`` (a ``WorkloadSpec`` of its trainer class: replaced by one of a
    subclass that plants after ``__init__``) or, for a module without one, its ``build``."""
    if kind is None:
        yield
        return
    from runner import workloads

    module = importlib.import_module(workloads.load()[workload]["module"])
    saved = {k: vars(module)[k] for k in ("SPEC", "build") if k in vars(module)}

    def after(ctx, trainer):
        if getattr(ctx, "optimized", True):
            info.update(plant(kind, trainer.model))
        return trainer

    if "SPEC" in saved:
        real_cls = saved["SPEC"].trainer

        def init(self, ctx, *args, **kwargs):
            real_cls.__init__(self, ctx, *args, **kwargs)
            after(ctx, self)

        spec = type(saved["SPEC"])(type(f"Planted{real_cls.__name__}", (real_cls,), {"__init__": init}))
        module.SPEC = spec
        if "build" in saved:
            module.build = spec.build
    elif "build" in saved:
        real = saved["build"]
        module.build = lambda ctx: after(ctx, real(ctx))
    else:
        raise ValueError(f"{workload}: its module {module.__name__} has neither SPEC nor build")
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(module, k, v)
