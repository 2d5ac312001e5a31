"""NCF: the NeuMF recommender of MLPerf v0.5 (GMF + MLP, HR@10).

Full scale reads MovieLens-20M as prepared by the datasets playbook (users with
at least 20 ratings, one held-out item per user, 999 sampled negatives). Tiny
and small scales generate implicit feedback from a hidden low-rank preference
model: each user interacts with items drawn by preference, one interaction per
user is held out, and the model must rank it among sampled negatives. The
untrained model scores about 10/(negatives+1); HR@10 well above that needs
real learning of the user-item structure.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mlperf_logging.mllog import constants as C

from runner.workloads.base import WorkloadError

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
        others = order[user, counts[user]:]
        test_neg.append(rng.choice(others, size=neg_n, replace=False))
    return {
        "users": nu, "items": ni,
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
            "the prepared MovieLens-20M reader (runner.datasets) is not installed with this runner") from exc
    return readers.ncf(root)


class Trainer:
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        dev = ctx.device
        self.negatives = cfg.get("train_negatives", 4)
        self.batch = cfg["batch_size"]
        if ctx.mode == "throughput":
            self.batch = ctx.throughput_batch_size(self.batch)
            n_users, n_items = cfg["users"], cfg["items"]
        else:
            data = generate(cfg) if cfg["data"] == "generated" else load_prepared(ctx.data)
            n_users, n_items = data["users"], data["items"]
            self.pos_u = torch.as_tensor(data["train_users"], device=dev)
            self.pos_i = torch.as_tensor(data["train_items"], device=dev)
            self.test_u = torch.as_tensor(data["test_users"], device=dev)
            self.test_cand = torch.cat([torch.as_tensor(data["test_items"]).unsqueeze(1),
                                        torch.as_tensor(data["test_negatives"])], dim=1).to(dev)
        self.n_items = n_items
        self.model = NeuMF(n_users, n_items, cfg["mf_dim"], cfg["layers"]).to(dev)
        self.ddp = ctx.wrap(self.model)
        self.step_fn = self.ddp
        if ctx.compile and ctx.mode == "throughput":
            self.step_fn = torch.compile(self.ddp)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg["lr"],
                                    betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"], **ctx.fused())
        self.scaler = ctx.grad_scaler()
        if ctx.mode == "ttt":
            self.train_samples = int(self.pos_u.numel()) * (1 + self.negatives)
            self.eval_samples = int(self.test_u.numel())

    def hyperparameters(self) -> dict:
        cfg, ctx = self.ctx.cfg, self.ctx
        return {
            C.GLOBAL_BATCH_SIZE: self.batch * ctx.world_size,
            C.OPT_NAME: C.ADAM,
            C.OPT_BASE_LR: cfg["lr"],
            "opt_adam_beta_1": cfg["beta1"],
            "opt_adam_beta_2": cfg["beta2"],
            C.OPT_ADAM_EPSILON: cfg["eps"],
            "model_mf_dim": cfg["mf_dim"],
            "model_layers": cfg["layers"],
            "train_negatives": self.negatives,
            "eval_negatives": int(self.test_cand.shape[1] - 1) if ctx.mode == "ttt" else cfg["eval_negatives"],
        }

    def _step(self, u, i, y):
        with self.ctx.autocast():
            logits = self.step_fn(u, i)
            loss = F.binary_cross_entropy_with_logits(logits.float(), y)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss

    def train_epoch(self, epoch: int) -> None:
        ctx, dev = self.ctx, self.ctx.device
        g = torch.Generator(device=dev)
        g.manual_seed(ctx.seed * 7919 + epoch)  # same on every rank: ranks take disjoint slices
        n_pos = self.pos_u.numel()
        neg_u = self.pos_u.repeat(self.negatives)
        neg_i = torch.randint(0, self.n_items, (n_pos * self.negatives,), device=dev, generator=g)
        users = torch.cat([self.pos_u, neg_u])
        items = torch.cat([self.pos_i, neg_i])
        labels = torch.cat([torch.ones(n_pos, device=dev), torch.zeros(n_pos * self.negatives, device=dev)])
        perm = torch.randperm(users.numel(), device=dev, generator=g)
        mine = perm[ctx.shard(perm.numel())]
        self.model.train()
        for s in range(0, mine.numel(), self.batch):
            idx = mine[s: s + self.batch]
            self._step(users[idx], items[idx], labels[idx])
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
            for s in range(0, u.numel(), 4096):
                uu, cc = u[s: s + 4096], cand[s: s + 4096]
                with ctx.autocast():
                    scores = self.model(uu.unsqueeze(1).expand_as(cc).reshape(-1), cc.reshape(-1))
                scores = scores.float().view(cc.shape)
                better = (scores[:, 1:] > scores[:, :1]).sum(dim=1)  # negatives ranked above the positive
                hits += int((better < 10).sum())
        total_hits, = ctx.all_sum([hits])
        return total_hits / self.test_u.numel()

    # --- throughput mode: synthetic on-device batches ---------------------------------
    def throughput_batch(self) -> int:
        return self.batch

    def throughput_step(self) -> None:
        if not hasattr(self, "_pool"):
            dev, cfg = self.ctx.device, self.ctx.cfg
            g = torch.Generator(device=dev)
            g.manual_seed(self.ctx.seed + self.ctx.rank)
            k = 4
            self._pool = (torch.randint(0, cfg["users"], (k, self.batch), device=dev, generator=g),
                          torch.randint(0, cfg["items"], (k, self.batch), device=dev, generator=g),
                          (torch.rand((k, self.batch), device=dev, generator=g) < 0.2).float())
            self._k = 0
            self.model.train()
        u, i, y = self._pool
        j = self._k % u.shape[0]
        self._k += 1
        self._step(u[j], i[j], y[j])


def build(ctx) -> Trainer:
    return Trainer(ctx)
