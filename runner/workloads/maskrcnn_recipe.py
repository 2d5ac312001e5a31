"""Mask R-CNN's optimisation recipe: parameter groups, the learning-rate schedule, the MLLOG keys.

At full scale, NVIDIA's v0.5 submission (config_DGX1.sh, config_DGX2.sh,
config_DGX1_multi.sh; maskrcnn_benchmark/config/solver.py and
utils/lr_scheduler.py), with every number derived from the global batch so
that it holds at any GPU count:

- SGD, momentum 0.9; base learning rate ``lr_per_image`` x global batch
  (0.00125: 0.04 at 32 images, 0.08 at 64, 0.16 at 128);
- parameters whose name holds "bias": twice the learning rate and no weight
  decay (BIAS_LR_FACTOR 2, WEIGHT_DECAY_BIAS 0); all others weight decay 1e-4;
- warm-up "mlperf_linear" over ``warmup_steps`` (625) iterations: a group's
  rate is its own base minus ``(warmup - step) * base / warmup``, so weights
  rise from 0 and biases from base to 2 x base;
- x0.1 after ``decay_images`` training images (1,152,000 and 1,536,000:
  36,000/48,000 iterations at 32 images, 18,000/24,000 at 64, 9,000/12,000 at
  128), in iterations the images over the global batch, rounded.

Test scales may warm up linearly from ``warmup_factor`` x base (the
maskrcnn-benchmark default) and decay at ``decay_epochs``. Their base rate
stops at ``max_lr``, the rate of one process: their BatchNorm trains from
scratch on each process's few images, and the linear rule's 0.04 on two
processes (tiny) diverged (NaN in the second epoch on seed 3, on AVX2 kernels;
AVX-512 kernels happened to recover), while one process at 0.02 and two at
0.02 reach the target.
"""

from __future__ import annotations

import torch.nn as nn
from mlperf_logging.mllog import constants as C

from runner.workloads import schedules as S

GAMMA = 0.1


def param_groups(
    model: nn.Module, lr: float, weight_decay: float, bias_lr_factor: float = 2.0, weight_decay_bias: float = 0.0
) -> list[dict]:
    """Two groups as the reference's optimizer: parameters named "...bias" get ``bias_lr_factor`` x the
    rate and ``weight_decay_bias``; each group records its own base rate as ``base_lr``."""
    plain, bias = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (bias if "bias" in name else plain).append(p)
    return [
        {"params": plain, "lr": lr, "base_lr": lr, "weight_decay": weight_decay},
        {"params": bias, "lr": lr * bias_lr_factor, "base_lr": lr * bias_lr_factor, "weight_decay": weight_decay_bias},
    ]


def base_lr(cfg: dict, global_batch: int) -> float:
    """``lr_per_image`` x the global batch, at most ``max_lr`` where the scale sets one."""
    lr = cfg["lr_per_image"] * global_batch
    if cfg.get("max_lr") is not None:
        lr = min(lr, float(cfg["max_lr"]))
    return round(lr, 8)


def decay_steps(cfg: dict, global_batch: int, steps_per_epoch: int) -> list[int]:
    """The iterations at which the rate drops x0.1: from ``decay_images`` (the images over the
    global batch) or, on test scales, ``decay_epochs``."""
    if "decay_images" in cfg:
        return [int(round(n / global_batch)) for n in cfg["decay_images"]]
    return [int(e * steps_per_epoch) for e in cfg["decay_epochs"]]


def group_rates(opt, step: int, base: float, warmup: int, boundaries, cfg: dict) -> list[float]:
    """Every parameter group's rate at iteration ``step`` (from 0)."""
    S.check(cfg.get("lr_schedule"), ("multistep",), "maskrcnn")
    method = cfg.get("warmup_method", "linear")
    return [
        S.rate(
            "multistep",
            step,
            group_base=g["base_lr"],
            base=base,
            warmup=warmup,
            boundaries=boundaries,
            method=method,
            warmup_factor=cfg.get("warmup_factor", 1 / 3),
            gamma=GAMMA,
        )
        for g in opt.param_groups
    ]


def set_lr(opt, step: int, base: float, warmup: int, boundaries, cfg: dict) -> None:
    for g, lr in zip(opt.param_groups, group_rates(opt, step, base, warmup, boundaries, cfg)):
        g["lr"] = lr


def warmup_factor(cfg: dict, base: float) -> float:
    """The warm-up factor as the recipe states it: for mlperf_linear the rate added per iteration
    (SOLVER.WARMUP_FACTOR = base / warmup, 0.000064 at 0.04), else the starting fraction."""
    if cfg.get("warmup_method", "linear") == "mlperf_linear":
        return round(base / int(cfg["warmup_steps"]), 12)
    return float(cfg["warmup_factor"])


def hyperparameters(cfg: dict, batch: int, world_size: int, base: float, boundaries: list[int]) -> dict:
    """The MLLOG keys of the recipe (the 0.7.0 maskrcnn rules' keys and the rest of the recipe)."""
    return {
        C.GLOBAL_BATCH_SIZE: batch * world_size,
        C.OPT_NAME: "sgd",
        C.OPT_BASE_LR: base,
        C.OPT_WEIGHT_DECAY: cfg["weight_decay"],
        "opt_momentum": cfg["momentum"],
        "opt_bias_learning_rate_factor": cfg.get("bias_lr_factor", 2.0),
        "opt_weight_decay_bias": cfg.get("weight_decay_bias", 0.0),
        "opt_learning_rate_warmup_method": cfg.get("warmup_method", "linear"),
        "opt_learning_rate_warmup_steps": int(cfg["warmup_steps"]),
        "opt_learning_rate_warmup_factor": warmup_factor(cfg, base),
        "opt_learning_rate_decay_factor": GAMMA,
        "opt_learning_rate_decay_steps": list(boundaries),
        "num_image_candidates": int(cfg["rpn_post_nms_top_n_train"]) * batch,  # per process batch
        "rpn_pre_nms_top_n_train": cfg["pre_nms_top"],
        "rpn_post_nms_top_n_test": cfg["rpn_post_nms_top_n_test"],
        "min_image_size": cfg.get("min_size", cfg.get("image_size")),
        "max_image_size": cfg.get("max_size", cfg.get("image_size")),
        "model_layers": list(cfg["layers"]),
        "model_width": cfg["width"],
        "model_backbone_norm": cfg.get("backbone_norm", "bn"),
    }
