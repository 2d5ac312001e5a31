"""The trainer contract every workload keeps, the one optimizer step they share, and the spec
object a workload module publishes.

A workload module defines ``SPEC = WorkloadSpec(MyTrainer)`` (and, for callers that build a
trainer by hand, ``build = SPEC.build``). ``MyTrainer`` subclasses ``Trainer`` and gives

- in ``__init__(ctx)``: ``self.model`` (the module whose parameters train), ``self.optimizer``,
  ``self.scaler`` (``ctx.grad_scaler()``), and in ttt mode ``train_samples`` and ``eval_samples``;
- ``loss(*batch)``: the training loss of one batch (called under the run's autocast);
- ``schedule(update)``: the learning rate of update ``update`` (0 = the first) as one number
  (every parameter group, times its ``lr_scale``) or one number per group; None keeps the
  optimizer's own;
- ``hyperparameters()``, ``train_epoch(epoch)``, ``evaluate(epoch)``: the ttt driver's calls
  (runner.workloads.base); ``train_epoch`` runs each batch through ``train_step(*batch)``;
- ``throughput_batch()`` (samples per step and process) and ``synthetic_batches(generator)``:
  the on-device batches throughput mode cycles through, made once from a generator on the
  run's device seeded with seed + rank.

Optional: ``grad_clip`` (the gradients' largest norm, 0: none), ``reduce_gradients()`` (after the
backward pass, before the update: a workload that averages its own gradients over processes).

The shared step (``train_step``): forward and loss under autocast, ``zero_grad``, the scaled
backward pass, ``reduce_gradients``, unscaling and clipping where ``grad_clip`` asks,
``gradient_probe`` (None in runs; the gradient check sets it: runner/workloads/gradients.py),
the learning rate of this update, the optimizer step through the scaler, the scaler's update,
and the rate of the next update (so that the optimizer always shows the rate its next step
uses).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable

import torch

from runner.workloads.compiling import decide
from runner.workloads.errors import WorkloadError


def set_lr(optimizer, lr) -> None:
    """Set every parameter group's rate: ``lr`` times the group's ``lr_scale`` (default 1), or
    ``lr[i]`` for group ``i`` when ``lr`` is a list. A rate held in a tensor is filled in place."""
    groups = optimizer.param_groups
    rates = list(lr) if isinstance(lr, (list, tuple)) else [lr * g.get("lr_scale", 1.0) for g in groups]
    if len(rates) != len(groups):
        raise WorkloadError(f"{len(rates)} learning rates for {len(groups)} parameter groups")
    for g, r in zip(groups, rates):
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].fill_(r)
        else:
            g["lr"] = r


class Trainer(abc.ABC):
    """The contract between a workload and the drivers (see the module docstring)."""

    ctx = None
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    train_samples: int = 0
    eval_samples: int = 0
    #: the largest norm of all gradients together (0: no clipping)
    grad_clip: float = 0.0
    #: updates taken so far
    updates: int = 0
    #: called as ``probe(loss)`` with the gradients in place, before the update (the gradient
    #: check's hook; raising from it ends the step there)
    gradient_probe: Callable | None = None
    _synthetic: list | None = None
    _next_synthetic: int = 0

    # --- what each workload gives ---------------------------------------------------------
    @abc.abstractmethod
    def loss(self, *batch) -> torch.Tensor:
        """The training loss of one batch (under autocast)."""

    @abc.abstractmethod
    def hyperparameters(self) -> dict:
        """MLLOG keys logged during init (a value, or ``(value, metadata)``)."""

    @abc.abstractmethod
    def train_epoch(self, epoch: int) -> None:
        """One pass over this rank's share of the training data."""

    @abc.abstractmethod
    def evaluate(self, epoch: int):
        """The quality metric (a number or a mapping), the same on every rank."""

    @abc.abstractmethod
    def throughput_batch(self) -> int:
        """Samples (of the workload's sample unit) per throughput step and process."""

    @abc.abstractmethod
    def synthetic_batches(self, generator: torch.Generator) -> list[tuple]:
        """The on-device batches throughput mode cycles through (made once)."""

    def schedule(self, update: int):
        """The learning rate of update ``update`` (0 = the first); None: the optimizer's own."""
        return None

    def reduce_gradients(self) -> None:
        """After the backward pass: a workload that averages its own gradients does it here."""
        return None

    # --- the shared step ------------------------------------------------------------------
    def apply_schedule(self) -> None:
        """The rate of the next update onto the optimizer."""
        lr = self.schedule(self.updates)
        if lr is not None:
            set_lr(self.optimizer, lr)

    def train_step(self, *batch) -> torch.Tensor:
        """One training step of ``batch``; returns the loss (not synchronized)."""
        with self.ctx.autocast():
            loss = self.loss(*batch)
        self.optimizer_step(loss)
        return loss

    def optimizer_step(self, loss: torch.Tensor) -> None:
        opt, scaler = self.optimizer, self.scaler
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        self.reduce_gradients()
        if self.grad_clip or self.gradient_probe is not None:
            scaler.unscale_(opt)
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.grad_clip))
        if self.gradient_probe is not None:
            self.gradient_probe(loss)
        self.apply_schedule()
        scaler.step(opt)
        scaler.update()
        self.updates += 1
        self.apply_schedule()

    def throughput_step(self) -> None:
        """One training step on the next synthetic batch (throughput mode)."""
        if self._synthetic is None:
            ctx = self.ctx
            g = torch.Generator(device=ctx.device)
            g.manual_seed(ctx.seed + ctx.rank)
            self._synthetic = list(self.synthetic_batches(g))
            self.model.train()
        batch = self._synthetic[self._next_synthetic % len(self._synthetic)]
        self._next_synthetic += 1
        self.train_step(*batch)


@dataclass(frozen=True)
class WorkloadSpec:
    """What a workload module publishes as ``SPEC``: its trainer class and the modes in which the
    parts it hands to ``compile_fn`` compile (the driver decides the rest: compiling.decide)."""

    trainer: type
    compile_modes: tuple = ("ttt", "throughput")

    def __post_init__(self):
        if not (isinstance(self.trainer, type) and issubclass(self.trainer, Trainer)):
            raise WorkloadError(f"WorkloadSpec: {self.trainer!r} is not a runner.workloads.trainer.Trainer")

    def build(self, ctx) -> Trainer:
        decide(ctx, self.compile_modes)
        return self.trainer(ctx)


def spec_of(module) -> WorkloadSpec:
    """The ``SPEC`` of a workload module (WorkloadError when it has none)."""
    spec = vars(module).get("SPEC")
    if not isinstance(spec, WorkloadSpec):
        raise WorkloadError(f"workload module {module.__name__} publishes no SPEC (a WorkloadSpec)")
    return spec
