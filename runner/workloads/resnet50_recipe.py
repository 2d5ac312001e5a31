"""resnet50's optimizer, learning-rate schedule and MLLOG hyperparameters.

``full`` scale follows the MLPerf v0.5 submission the reference study used
(Google's ResNet-50 v1.5 on 8 V100, tf_cnn_benchmarks): SGD with Nesterov
momentum 0.9; peak rate ``lr_per_256 * global batch / 256`` (0.06 per 256
images: 0.48 at the submission's 2048); linear warm-up from 0 over
``int(5 * steps per epoch)`` steps, then the rate times 1, 0.1, 0.01, 0.001,
0.0001 after epochs 30, 60, 80, 90 (steps ``int(epoch * steps per epoch)``,
with steps per epoch the training images over the global batch, unrounded);
L2 weight decay 1e-4 on every parameter but the batch-norm scales and
shifts; no label smoothing. The rate of step ``s`` (0-based) is the one its
update uses, as the reference's ``global_step`` before the increment.

``tiny`` and ``small`` are test scales: they keep a polynomial decay (power 2
to ``end_lr``) over their few epochs, logged with the 0.7.0 ``sgd_*`` keys
(``lr_schedule: poly`` in workloads.yml), and say so in ``gpulab_lr_schedule``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from mlperf_logging.mllog import constants as C

from runner.workloads import schedules as S
from runner.workloads import vision as V

SCHEDULES = ("step", "poly")


def steps_per_epoch(train_images: int, global_batch: int) -> float:
    """The reference's epoch in steps: images over the global batch, not rounded."""
    return train_images / global_batch


def warmup_steps(spe: float, warmup_epochs: float) -> int:
    return int(spe * warmup_epochs)


def boundary_steps(spe: float, boundary_epochs) -> list[int]:
    return [int(spe * e) for e in boundary_epochs]


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on every parameter but the batch-norm ones (the reference filters names holding 'batchnorm')."""
    bn = {
        id(p)
        for m in model.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        for p in m.parameters(recurse=False)
    }
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if id(p) in bn else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Recipe:
    """The schedule and optimizer of one run: ``lr(step)`` and ``optimizer(model, fused)``."""

    def __init__(self, cfg: dict, global_batch: int, train_images: int):
        self.cfg = cfg
        self.schedule = S.check(cfg.get("lr_schedule", "step"), SCHEDULES, "resnet50")
        self.global_batch = global_batch
        self.per_epoch = steps_per_epoch(train_images, global_batch)
        # the peak rate on the mean gradient of the global batch, rounded to 0.001 (the 0.7.0 checker's rule:
        # a no-op whenever the global batch is a multiple of 64 at 0.06 per 256)
        self.peak = V.round_lr(cfg["lr_per_256"] * global_batch / 256, 0.001)
        self.warmup = warmup_steps(self.per_epoch, cfg["warmup_epochs"])
        if self.schedule == "step":
            self.boundary_epochs = list(cfg["decay_boundary_epochs"])
            self.boundaries = boundary_steps(self.per_epoch, self.boundary_epochs)
            self.factor = cfg["decay_factor"]
            self.params = {
                "peak": self.peak,
                "warmup": self.warmup,
                "boundaries": self.boundaries,
                "factor": self.factor,
            }
        else:
            self.end_lr = cfg.get("end_lr", 0.0001)
            self.total = max(1, int(self.per_epoch)) * cfg.get("decay_epochs", cfg["max_epochs"])
            self.params = {
                "total": self.total,
                "warmup": self.warmup,
                "base": self.peak,
                "end": self.end_lr,
                "power": 2,
            }

    def lr(self, step: int) -> float:
        return S.rate(self.schedule, step, **self.params)

    def optimizer(self, model: nn.Module, fused: dict) -> torch.optim.Optimizer:
        cfg = self.cfg
        return torch.optim.SGD(
            decay_groups(model, cfg["weight_decay"]),
            lr=self.peak,
            momentum=cfg["momentum"],
            nesterov=bool(cfg.get("nesterov", False)),
            **fused,
        )

    def hyperparameters(self, bn_span: int) -> dict:
        """The MLLOG keys: the reference's (v0.5 names where 0.7.0 has none) at full, 0.7.0's poly keys otherwise."""
        cfg = self.cfg
        hp = {
            C.GLOBAL_BATCH_SIZE: self.global_batch,
            C.OPT_NAME: "sgd",
            C.OPT_BASE_LR: self.peak,
            "sgd_opt_base_learning_rate": self.peak,
            "sgd_opt_momentum": cfg["momentum"],
            "sgd_opt_nesterov": bool(cfg.get("nesterov", False)),
            "sgd_opt_weight_decay": cfg["weight_decay"],
            "model_exclude_bn_from_l2": True,
            "opt_learning_rate_warmup_epochs": cfg["warmup_epochs"],
            C.OPT_LR_WARMUP_STEPS: self.warmup,
            "model_bn_span": bn_span,
            "label_smoothing": cfg.get("label_smoothing", 0.0),
            "gpulab_lr_schedule": self.schedule,
        }
        if self.schedule == "step":
            hp[C.OPT_LR_DECAY_BOUNDARY_EPOCHS] = self.boundary_epochs
            hp[C.OPT_LR_DECAY_BOUNDARY_STEPS] = self.boundaries
            hp[C.OPT_LR_DECAY_FACTOR] = self.factor
        else:
            hp["sgd_opt_end_learning_rate"] = self.end_lr
            hp["sgd_opt_learning_rate_decay_poly_power"] = 2
            hp["sgd_opt_learning_rate_decay_steps"] = max(1, self.total - self.warmup)
        return hp
