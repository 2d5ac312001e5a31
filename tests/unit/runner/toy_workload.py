"""A seventh workload for the tests: a small MLP that classifies points drawn around class centres.

It is what adding a workload takes: this one module (a ``Trainer`` subclass and its ``SPEC``) and
one catalogue entry (toy_catalogue.yml beside it, joined to the built-in catalogue through
``GPULAB_RUNNER_CATALOGUE``). The shared driver does the rest: MLPerf logging, time to train,
throughput mode, the shared optimizer step and the run directory. The data is generated from a
fixed seed (the same data set for every run), sharded over the processes; the metric is the
fraction of evaluation points classified right.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from mlperf_logging.mllog import constants as C

from runner.workloads import schedules
from runner.workloads.trainer import Trainer, WorkloadSpec

DATA_SEED = 20260101


def points(cfg, n: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points of ``cfg["features"]`` dimensions and their class (deterministic per ``offset``)."""
    g = torch.Generator().manual_seed(DATA_SEED)
    centres = torch.randn(cfg["classes"], cfg["features"], generator=g) * cfg["spread"]
    g.manual_seed(DATA_SEED + offset)
    labels = torch.randint(0, cfg["classes"], (n,), generator=g)
    return centres[labels] + torch.randn(n, cfg["features"], generator=g), labels


class ToyTrainer(Trainer):
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        self.batch = int(cfg["batch_size"])
        if ctx.mode == "throughput":
            self.batch = ctx.throughput_batch_size(self.batch)
        self.model = nn.Sequential(
            nn.Linear(cfg["features"], cfg["hidden"]), nn.ReLU(), nn.Linear(cfg["hidden"], cfg["classes"])
        ).to(ctx.device)
        self.net = ctx.wrap(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
        self.scaler = ctx.grad_scaler()
        self.lr_schedule = schedules.check(cfg["lr_schedule"], ("constant",), "toy")
        if ctx.mode == "ttt":
            x, y = points(cfg, cfg["train_points"], 1)
            self.x, self.y = x.to(ctx.device), y.to(ctx.device)
            ex, ey = points(cfg, cfg["eval_points"], 2)
            self.ex, self.ey = ex.to(ctx.device), ey.to(ctx.device)
            self.train_samples, self.eval_samples = len(self.y), len(self.ey)

    def loss(self, x, y):
        return F.cross_entropy(self.net(x).float(), y)

    def schedule(self, update: int):
        return schedules.rate(self.lr_schedule, update, base=self.ctx.cfg["lr"])

    def hyperparameters(self) -> dict:
        return {
            C.GLOBAL_BATCH_SIZE: self.batch * self.ctx.world_size,
            C.OPT_NAME: "sgd",
            C.OPT_BASE_LR: self.ctx.cfg["lr"],
            "model_hidden": self.ctx.cfg["hidden"],
        }

    def train_epoch(self, epoch: int) -> None:
        ctx = self.ctx
        g = torch.Generator(device=ctx.device).manual_seed(ctx.seed * 1009 + epoch)
        order = torch.randperm(len(self.y), device=ctx.device, generator=g)[ctx.shard(len(self.y))]
        self.model.train()
        for s in range(0, len(order), self.batch):
            idx = order[s : s + self.batch]
            self.train_step(self.x[idx], self.y[idx])
            ctx.mark_step()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        part = self.ctx.shard(len(self.ey))
        right, seen = self.ctx.all_sum(
            [(self.model(self.ex[part]).argmax(1) == self.ey[part]).sum(), len(self.ey[part])]
        )
        return right / seen

    def throughput_batch(self) -> int:
        return self.batch

    def synthetic_batches(self, generator):
        cfg, dev = self.ctx.cfg, self.ctx.device
        x = torch.randn(4, self.batch, cfg["features"], device=dev, generator=generator)
        y = torch.randint(0, cfg["classes"], (4, self.batch), device=dev, generator=generator)
        return [(x[i], y[i]) for i in range(4)]


SPEC = WorkloadSpec(ToyTrainer)
