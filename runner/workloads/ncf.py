"""NCF: the NeuMF recommender of MLPerf v0.5 (GMF + MLP, HR@10).

Full scale reads MovieLens-20M as prepared by the datasets playbook (users with
at least 20 ratings, one held-out item per user, 999 sampled negatives). Tiny
and small scales generate implicit feedback from a hidden low-rank preference
model: each user interacts with items drawn by preference, one interaction per
user is held out, and the model must rank it among sampled negatives. The
untrained model scores about 10/(negatives+1); HR@10 well above that needs
real learning of the user-item structure.

As in NVIDIA's v0.5 submission (recommendation/pytorch/ncf.py): the batch of
the catalogue is the global one when ``batch_is_global`` is set (each of N
processes trains on ``batch_size // N`` samples per step), every epoch draws
``train_negatives`` fresh negatives per positive with replacement, rejecting
items the user has a training interaction with, and the loss is the mean
binary cross entropy. HR@10 ranks as the reference's top-k does: with the
positive after the negatives, a negative item that ties with the positive
ranks above it, duplicates count once (see ranking_masks). The scores for ranking are computed in fp32, without
autocast, so that bf16 rounding creates no ties.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mlperf_logging.mllog import constants as C

from runner.workloads import schedules as S
from runner.workloads.base import WorkloadError, compile_fn
from runner.workloads.trainer import Trainer as TrainerContract
from runner.workloads.trainer import WorkloadSpec

DATA_SEED = 20190501  # generated data is a fixed data set, the same for every run


class NeuMF(nn.Module):
    def __init__(self, n_users: int, n_items: int, mf_dim: int, layers: list[int]):
        super().__init__()
        self.mf_user = nn.Embedding(n_users, mf_dim)
        self.mf_item = nn.Embedding(n_items, mf_dim)
        self.mlp_user = nn.Embedding(n_users, layers[0] // 2)
        self.mlp_item = nn.Embedding(n_items, layers[0] // 2)
        mlp = []
        for a, b in zip(layers[:-1], layers[1:]):
            mlp += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        self.mlp = nn.Sequential(*mlp)
        self.final = nn.Linear(mf_dim + layers[-1], 1)
        for emb in (self.mf_user, self.mf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, 0.0, 0.01)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.kaiming_uniform_(self.final.weight, a=1, nonlinearity="sigmoid")  # LeCun uniform
        nn.init.zeros_(self.final.bias)

    def forward(self, user, item):
        mf = self.mf_user(user) * self.mf_item(item)
        mlp = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(item)], dim=-1))
        return self.final(torch.cat([mf, mlp], dim=-1)).squeeze(-1)


def generate(cfg: dict) -> dict:
    """Implicit feedback from a hidden preference model (deterministic)."""
    rng = np.random.default_rng(DATA_SEED)
    nu, ni, d = cfg["users"], cfg["items"], cfg["latent_dim"]
    lo, hi = cfg["items_per_user"]
    u = rng.standard_normal((nu, d))
    v = rng.standard_normal((ni, d))
    pop = rng.standard_normal(ni) * cfg.get("popularity", 0.5)
    logits = (u @ v.T) * (cfg.get("sharpness", 2.0) / math.sqrt(d)) + pop
    gumbel = -np.log(-np.log(rng.uniform(1e-12, 1.0, size=logits.shape)))
    order = np.argsort(-(logits + gumbel), axis=1)
    counts = rng.integers(lo, hi + 1, size=nu)
    train_u, train_i, test_i, test_neg = [], [], [], []
    neg_n = cfg["eval_negatives"]
    for user in range(nu):
        items = order[user, : counts[user]]
        held = rng.integers(0, len(items))
        test_i.append(items[held])
        rest = np.delete(items, held)
        train_u.append(np.full(len(rest), user))
        train_i.append(rest)
        others = order[user, counts[user] :]
        test_neg.append(rng.choice(others, size=neg_n, replace=False))
    return {
        "users": nu,
        "items": ni,
        "train_users": np.concatenate(train_u).astype(np.int64),
        "train_items": np.concatenate(train_i).astype(np.int64),
        "test_users": np.arange(nu, dtype=np.int64),
        "test_items": np.asarray(test_i, dtype=np.int64),
        "test_negatives": np.stack(test_neg).astype(np.int64),
    }


def load_prepared(root: str) -> dict:
    """MovieLens-20M in the prepared NCF form (from the datasets playbook)."""
    try:
        from runner.datasets import readers  # provided by the datasets package
    except ImportError as exc:
        raise WorkloadError(
            "the prepared MovieLens-20M reader (runner.datasets) is not installed with this runner"
        ) from exc
    return readers.ncf(root)


def duplicate_mask(items: torch.Tensor) -> torch.Tensor:
    """True where a row of ``items`` repeats an item seen earlier in that row."""
    srt, order = torch.sort(items, dim=1, stable=True)
    dup_sorted = torch.zeros_like(srt, dtype=torch.bool)
    dup_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
    dup = torch.empty_like(dup_sorted)
    dup.scatter_(1, order, dup_sorted)
    return dup


def ranking_masks(cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counts, before)`` for candidates ``[positive, negatives...]`` (one row per user).

    The reference lays a row out as ``[negatives..., positive]``, scores later
    duplicates of an item -1 and ranks with a top-k that puts the lower column
    first among equal scores; the positive stands at the first column holding
    its item. ``counts``: the negatives that compete with the positive (first
    occurrences of items other than the positive's). ``before``: the negatives
    that come before the positive in that layout, so that they win a tie.
    """
    pos, negs = cand[:, :1], cand[:, 1:]
    same = negs == pos
    counts = ~same & ~duplicate_mask(negs)
    col = torch.arange(negs.shape[1], device=cand.device).expand_as(negs)
    first = torch.where(same, col, torch.full_like(col, negs.shape[1])).min(dim=1, keepdim=True).values
    return counts, col < first


def hits_at_k(
    pos_scores: torch.Tensor, neg_scores: torch.Tensor, counts: torch.Tensor, before: torch.Tensor, k: int = 10
) -> torch.Tensor:
    """Per user: whether the positive is in the reference's top ``k`` (see ranking_masks)."""
    p = pos_scores.unsqueeze(1)
    ahead = (neg_scores > p) | ((neg_scores == p) & before)
    return (ahead & counts).sum(dim=1) < k


class Trainer(TrainerContract):
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        dev = ctx.device
        self.negatives = int(cfg.get("train_negatives", 4))
        self.batch_is_global = bool(cfg.get("batch_is_global", False))
        batch = int(cfg["batch_size"])
        if ctx.mode == "throughput":
            batch = ctx.throughput_batch_size(batch)
        self.batch = self.local_batch(batch, ctx.world_size)
        if ctx.mode == "throughput":
            n_users, n_items = cfg["users"], cfg["items"]
        else:
            data = generate(cfg) if cfg["data"] == "generated" else load_prepared(ctx.data)
            n_users, n_items = data["users"], data["items"]
            self.pos_u = torch.as_tensor(data["train_users"], device=dev)
            self.pos_i = torch.as_tensor(data["train_items"], device=dev)
            # sorted user*items+item keys of the training interactions: negatives are drawn outside them
            self.pos_keys = torch.sort(self.pos_u * n_items + self.pos_i)[0]
            self.test_u = torch.as_tensor(data["test_users"], device=dev)
            self.test_cand = torch.cat(
                [torch.as_tensor(data["test_items"]).unsqueeze(1), torch.as_tensor(data["test_negatives"])], dim=1
            ).to(dev)
            self.neg_counts, self.neg_before = ranking_masks(self.test_cand)
        self.n_items = n_items
        self.model = NeuMF(n_users, n_items, cfg["mf_dim"], cfg["layers"]).to(dev)
        self.ddp = ctx.wrap(self.model)
        # compiled in throughput mode only (SPEC): ttt's last batch of an epoch is smaller
        self.step_fn = compile_fn(ctx, self.ddp, dynamic=None)
        S.check(cfg.get("lr_schedule"), ("constant",), "ncf")  # Adam at the base rate throughout
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"], **ctx.fused()
        )
        self.scaler = ctx.grad_scaler()
        if ctx.mode == "ttt":
            self.train_samples = int(self.pos_u.numel()) * (1 + self.negatives)
            self.eval_samples = int(self.test_u.numel())

    def local_batch(self, batch: int, world_size: int) -> int:
        """Samples per process and step: the global batch split over the processes where it is global."""
        if not self.batch_is_global:
            return batch
        if batch < world_size:
            raise WorkloadError(f"the global batch {batch} cannot be split over {world_size} processes")
        return batch // world_size  # as the reference: floor division

    def hyperparameters(self) -> dict:
        cfg, ctx = self.ctx.cfg, self.ctx
        return {
            C.GLOBAL_BATCH_SIZE: self.batch * ctx.world_size,
            "gpulab_batch_is_global": self.batch_is_global,
            C.OPT_NAME: C.ADAM,
            C.OPT_BASE_LR: cfg["lr"],
            "opt_adam_beta_1": cfg["beta1"],
            "opt_adam_beta_2": cfg["beta2"],
            C.OPT_ADAM_EPSILON: cfg["eps"],
            "model_mf_dim": cfg["mf_dim"],
            "model_layers": cfg["layers"],
            "train_negatives": self.negatives,
            "eval_negatives": int(self.test_cand.shape[1] - 1) if ctx.mode == "ttt" else cfg["eval_negatives"],
            "eval_hr_k": 10,
        }

    def sample_negatives(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``train_negatives`` items per positive, with replacement, never a training item of the user."""
        users = self.pos_u.repeat(self.negatives)
        items = torch.randint(0, self.n_items, (users.numel(),), device=users.device, generator=g)
        todo = torch.arange(users.numel(), device=users.device)
        for _ in range(1000):  # each round keeps what misses the user's items; the rest is drawn again
            keys = users[todo] * self.n_items + items[todo]
            pos = torch.searchsorted(self.pos_keys, keys).clamp(max=self.pos_keys.numel() - 1)
            clash = self.pos_keys[pos] == keys
            if not bool(clash.any()):
                break
            todo = todo[clash]
            items[todo] = torch.randint(0, self.n_items, (todo.numel(),), device=users.device, generator=g)
        else:
            raise WorkloadError(
                "negative sampling did not finish: some user has a training interaction with (almost) every item"
            )
        return users, items

    def loss(self, u, i, y):
        return F.binary_cross_entropy_with_logits(self.step_fn(u, i).float(), y)

    def train_epoch(self, epoch: int) -> None:
        ctx, dev = self.ctx, self.ctx.device
        g = torch.Generator(device=dev)
        g.manual_seed(ctx.seed * 7919 + epoch)  # same on every rank: ranks take disjoint slices
        n_pos = self.pos_u.numel()
        neg_u, neg_i = self.sample_negatives(g)
        users = torch.cat([self.pos_u, neg_u])
        items = torch.cat([self.pos_i, neg_i])
        labels = torch.cat([torch.ones(n_pos, device=dev), torch.zeros(n_pos * self.negatives, device=dev)])
        perm = torch.randperm(users.numel(), device=dev, generator=g)
        mine = perm[ctx.shard(perm.numel())]
        self.model.train()
        for s in range(0, mine.numel(), self.batch):
            idx = mine[s : s + self.batch]
            self.train_step(users[idx], items[idx], labels[idx])
            ctx.mark_step()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        ctx = self.ctx
        self.model.eval()
        sl = ctx.shard(self.test_u.numel()) if ctx.distributed else slice(None)
        rest = None
        if ctx.distributed and ctx.rank == ctx.world_size - 1:
            rest = slice(sl.stop, None)  # the last rank also takes the remainder
        hits = 0
        for part in (sl, rest):
            if part is None:
                continue
            u = self.test_u[part]
            cand = self.test_cand[part]
            counts, before = self.neg_counts[part], self.neg_before[part]
            for s in range(0, u.numel(), 4096):
                uu, cc = u[s : s + 4096], cand[s : s + 4096]
                # fp32 logits, no autocast: bf16 would round distinct scores into ties
                scores = self.model(uu.unsqueeze(1).expand_as(cc).reshape(-1), cc.reshape(-1))
                scores = scores.float().view(cc.shape)
                hits += int(hits_at_k(scores[:, 0], scores[:, 1:], counts[s : s + 4096], before[s : s + 4096]).sum())
        (total_hits,) = ctx.all_sum([hits])
        return total_hits / self.test_u.numel()

    # --- throughput mode: synthetic on-device batches ---------------------------------
    def throughput_batch(self) -> int:
        return self.batch

    def synthetic_batches(self, g):
        dev, cfg, k = self.ctx.device, self.ctx.cfg, 4
        u = torch.randint(0, cfg["users"], (k, self.batch), device=dev, generator=g)
        i = torch.randint(0, cfg["items"], (k, self.batch), device=dev, generator=g)
        y = (torch.rand((k, self.batch), device=dev, generator=g) < 0.2).float()
        return [(u[j], i[j], y[j]) for j in range(k)]


SPEC = WorkloadSpec(Trainer, compile_modes=("throughput",))
build = SPEC.build
