"""What the two translation workloads (gnmt, transformer) share: the trainer.

- Data and batches: runner.workloads.translation_data. GNMT draws its batches
  as its reference's bucketing sampler (a fixed number of sentences, sorted by
  length within shards of 80 global batches); the Transformer makes fixed
  batches of at most ``max_tokens`` tokens, as fairseq's ``--max-tokens``, and
  shuffles their order each epoch (``max_tokens`` unset: at most
  ``batch_size`` sentences per batch).
- Loss: label-smoothed cross entropy summed over the target tokens, divided
  by the batch's tokens (``loss_per: token``) or sentences (``loss_per:
  sentence``, GNMT's reference); Adam; the learning-rate schedules of the two
  references (``lr_schedule`` gnmt or rsqrt: runner.workloads.schedules). Where the catalogue gives
  ``schedule_at`` (the global batch and training-set size its step counts are
  meant for), the step counts are rescaled to this run's global batch and data
  set, so that they cover the same share of the data at any GPU count;
  ``lr_scaling`` (none, linear, sqrt) says how the base rate follows the
  global batch.
- Evaluation: the whole evaluation source, beam search as each reference
  (runner.workloads.beam_search; the model's ``decode_eval``), BLEU as each
  reference computes it (runner.workloads.bleu) over the outputs of all
  ranks, logged as a fraction in [0, 1] as the MLPerf 0.7.0 rules expect.
- Throughput mode: synthetic on-device batches of ``throughput.seq_len``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from mlperf_logging.mllog import constants as C

from runner.workloads import bleu
from runner.workloads import schedules as S
from runner.workloads.base import WorkloadError, compile_fn
from runner.workloads.compiling import build_device
from runner.workloads.trainer import Trainer as TrainerContract
from runner.workloads.translation_data import (
    BOS,
    N_SPECIAL,
    PAD,
    bucket_length,
    bucketed_shards,
    frame_source,
    generate,
    keep_pairs,
    load_prepared,
    pad_batch,
    token_batches,
)

# read as translation.<name> by gnmt, transformer and the tests (one line: a noqa on it stays put under `ruff format`)
from runner.workloads.translation_data import DATA_SEED, EOS, UNK, WordVocab  # noqa: F401

LR_SCALINGS = ("none", "linear", "sqrt")


def scaled_steps(n: int, cfg: dict, global_batch: int, train_samples: int) -> int:
    """A step count of the catalogue for this run: as is, or rescaled from ``schedule_at``."""
    at = cfg.get("schedule_at")
    if not at or n == 0:
        return int(n)
    return max(1, round(n * at["global_batch"] / global_batch * train_samples / at["train_samples"]))


def scaled_lr(cfg: dict, global_batch: int) -> float:
    rule = cfg.get("lr_scaling", "none")
    if rule not in LR_SCALINGS:
        raise WorkloadError(f"workloads.yml: lr_scaling {rule!r}: use one of {', '.join(LR_SCALINGS)}")
    at = cfg.get("schedule_at")
    if rule == "none" or not at:
        return float(cfg["lr"])
    ratio = global_batch / at["global_batch"]
    return float(cfg["lr"]) * (ratio if rule == "linear" else math.sqrt(ratio))


def smoothed_loss(logits, target, smoothing: float):
    """Label-smoothed cross entropy summed over non-pad tokens, and their count."""
    logits = logits.float().reshape(-1, logits.shape[-1])
    target = target.reshape(-1)
    loss = F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum", label_smoothing=smoothing)
    return loss, (target != PAD).sum()


# ----------------------------------------------------------------------------------------
# The trainer
# ----------------------------------------------------------------------------------------


class Trainer(TrainerContract):
    """Drives a seq2seq model (``make_model(cfg, vocab_size)``) through runner.workloads.base.

    The model provides ``forward(src, tgt_in, pad) -> logits [B,T,V]`` and the
    decoding calls of runner.workloads.beam_search; the subclass provides
    ``decode_eval(src) -> token lists`` and sets ``src_frame`` (BOS, EOS around
    the source), ``tgt_extra`` (what the length filter adds to a target),
    ``bleu_scheme`` and ``fixed_sampler`` (False: GNMT's bucketing sampler).
    """

    src_frame = (False, True)
    tgt_extra = 1
    bleu_scheme = "moses"
    fixed_sampler = True

    def __init__(self, ctx, make_model, datasets: tuple[str, ...], adam_eps: float):
        self.ctx = ctx
        cfg = ctx.cfg
        dev = ctx.device
        self.cfg = cfg
        self.buckets = list(cfg["buckets"])
        self.max_len = int(cfg["max_len"])
        self.smoothing = float(cfg.get("label_smoothing", 0.1))
        self.loss_per = cfg.get("loss_per", "token")
        if self.loss_per not in ("token", "sentence"):
            raise WorkloadError(f"workloads.yml: loss_per {self.loss_per!r}: use token or sentence")
        self.batch = int(cfg["batch_size"])
        self.max_tokens = int(cfg.get("max_tokens") or 0)
        self.adam_eps = adam_eps
        world = ctx.world_size
        self.global_batch = (self.max_tokens or self.batch) * world
        if ctx.mode == "throughput":
            self.data = None
            vocab_size = int(cfg["vocab_size"])
            train_samples = int((cfg.get("schedule_at") or {}).get("train_samples", 1))
        else:
            self.data = (
                generate(cfg)
                if cfg["data"] == "generated"
                else load_prepared(ctx.data, ctx.entry["benchmark"], datasets)
            )
            vocab_size = self.data["vocab_size"]
            src, tgt = self.data["train"]
            self.keep = np.asarray(keep_pairs(src, tgt, self.max_len, self.src_frame, self.tgt_extra), np.int64)
            self.train_samples = train_samples = len(self.keep)
            self.eval_samples = len(self.data["eval"][0])
            if self.fixed_sampler:  # fairseq: fixed batches (of max_tokens, else of batch_size sentences)
                self.fixed_batches = token_batches(
                    src, tgt, self.keep.tolist(), self.max_tokens or 1 << 62, self.batch, self.buckets, self.src_frame
                )
                self.steps_per_epoch = len(self.fixed_batches) // world
            else:
                self.fixed_batches = None
                self.lengths = np.asarray([len(src[i]) + len(tgt[i]) for i in self.keep], np.int64)
                self.steps_per_epoch = len(self.keep) // (self.batch * world)
            if self.steps_per_epoch == 0:
                raise WorkloadError(
                    f"{len(self.keep)} training pairs cannot feed {world} processes a batch of {self.batch}"
                )
        self.vocab_size = vocab_size
        torch.manual_seed(ctx.seed)
        with build_device(ctx):
            self.model = make_model(cfg, vocab_size).to(dev)
        self.ddp = ctx.wrap(self.model)
        self.fwd = self._forward_loss
        if ctx.compile:  # off where the scale says compile: false (compiling.decide)
            import torch._dynamo as dynamo

            # one graph per (source, target) bucket pair and padding flag: static shapes
            n = len(self.buckets)
            dynamo.config.recompile_limit = max(dynamo.config.recompile_limit, 2 * n * n + 2)
            # the loss joins the graph: log-softmax and label smoothing fuse with the projection
            self.fwd = compile_fn(ctx, self._forward_loss)
        self.lr = scaled_lr(cfg, self.global_batch)
        self.lr_schedule = S.check(cfg.get("lr_schedule"), ("gnmt", "rsqrt"), ctx.name)
        self.warmup = scaled_steps(int(cfg["warmup_steps"]), cfg, self.global_batch, train_samples)
        gnmt = self.lr_schedule == "gnmt"  # its decay settings are gnmt's (workloads.yml declares them there)
        self.remain = scaled_steps(
            int(cfg.get("remain_steps", 0) or 0) if gnmt else 0, cfg, self.global_batch, train_samples
        )
        self.interval = scaled_steps(
            int(cfg.get("decay_interval", 0) or 0) if gnmt else 0, cfg, self.global_batch, train_samples
        )
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=self.lr, betas=tuple(cfg["betas"]), eps=adam_eps, **ctx.fused()
        )
        self.scaler = ctx.grad_scaler()
        self.grad_clip = float(cfg.get("grad_clip") or 0)
        self.apply_schedule()

    # --- schedule -------------------------------------------------------------------------
    def lr_at(self, update: int) -> float:
        """The rate of update ``update`` (1 = the first) of this run."""
        cfg = self.cfg
        if self.lr_schedule == "rsqrt":
            return S.rsqrt_lr(update, self.lr, self.warmup)
        return S.gnmt_lr(
            update,
            self.lr,
            self.warmup,
            self.remain,
            self.interval,
            int(cfg.get("decay_steps", 4)),
            float(cfg.get("decay_factor", 0.5)),
        )

    def schedule(self, update: int) -> float:
        return self.lr_at(update + 1)

    # --- one step -------------------------------------------------------------------------
    def _forward_loss(self, src, tgt_in, tgt_out, pad: bool):
        logits = self.ddp(src, tgt_in, pad)
        return smoothed_loss(logits, tgt_out, self.smoothing)

    def loss(self, src, tgt_in, tgt_out, pad: bool = True):
        loss, ntok = self.fwd(src, tgt_in, tgt_out, pad)
        # this rank's tokens or sentences; DDP averages over ranks
        denom = ntok.clamp(min=1) if self.loss_per == "token" else src.shape[0]
        return loss / denom

    def epoch_batches(self, epoch: int) -> list:
        """This rank's batches of one epoch (lists of training-pair indices)."""
        ctx = self.ctx
        seed = ctx.seed * 7919 + epoch  # the same on every rank; ranks take disjoint batches
        if self.fixed_batches is not None:
            g = torch.Generator()
            g.manual_seed(seed)
            order = torch.randperm(len(self.fixed_batches), generator=g).tolist()
            return [self.fixed_batches[b] for b in order[ctx.rank :: ctx.world_size][: self.steps_per_epoch]]
        shards = bucketed_shards(self.lengths, self.batch, ctx.world_size, ctx.rank, seed)
        return [self.keep[p].tolist() for p in shards]

    def train_epoch(self, epoch: int) -> None:
        ctx, dev = self.ctx, self.ctx.device
        src, tgt = self.data["train"]
        self.model.train()
        for part in self.epoch_batches(epoch):
            S, TI, TO = pad_batch(src, tgt, part, self.buckets, self.src_frame)
            self.train_step(
                torch.from_numpy(S).to(dev, non_blocking=True),
                torch.from_numpy(TI).to(dev, non_blocking=True),
                torch.from_numpy(TO).to(dev, non_blocking=True),
                bool((S == PAD).any()),
            )
            ctx.mark_step()

    @torch.no_grad()
    def translate(self, sources: list[np.ndarray]) -> list[list[int]]:
        """Beam-search outputs (token ids, no BOS/EOS) of whole source sentences, in their order."""
        ctx, dev = self.ctx, self.ctx.device
        self.model.eval()
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        out: list = [None] * len(sources)
        eb = int(self.cfg.get("eval_batch_size", self.batch))
        for s in range(0, len(order), eb):
            part = order[s : s + eb]
            framed = [frame_source(sources[i], self.src_frame) for i in part]
            S = np.full((len(part), bucket_length(max(len(f) for f in framed), self.buckets)), PAD, np.int64)
            for j, f in enumerate(framed):
                S[j, : len(f)] = f  # the whole sentence: nothing is cut
            with ctx.autocast():
                hyps = self.decode_eval(torch.from_numpy(S).to(dev))
            for j, i in enumerate(part):
                out[i] = hyps[j]
        return out

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        ctx = self.ctx
        src, _ = self.data["eval"]
        mine = list(range(ctx.rank, len(src), ctx.world_size))
        vocab = self.data["vocab"]
        texts = {i: vocab.decode(h) for i, h in zip(mine, self.translate([src[i] for i in mine]))}
        parts = ctx.gather(texts)
        score = None
        if ctx.is_main:
            merged = {}
            for p in parts:
                merged.update(p)
            hyps = [merged[i] for i in range(len(src))]
            score = round(bleu.corpus_bleu(hyps, self.data["refs"], self.bleu_scheme), 6)
        return ctx.broadcast(score)

    # --- throughput mode: synthetic on-device batches ---------------------------------------
    def throughput_batch(self) -> int:
        """Target tokens per step (the sample unit of the translation workloads)."""
        tp = self.cfg.get("throughput", {})
        self.tp_len = int(tp.get("seq_len", self.buckets[-1]))
        self.tp_batch = self.ctx.throughput_batch_size(self.batch)
        return self.tp_batch * self.tp_len

    def synthetic_batches(self, g):
        self.throughput_batch()
        dev = self.ctx.device
        B, L = self.tp_batch, self.tp_len
        src = torch.randint(N_SPECIAL, self.vocab_size, (2, B, L), device=dev, generator=g)
        tgt = torch.randint(N_SPECIAL, self.vocab_size, (2, B, L), device=dev, generator=g)
        tin = torch.cat([torch.full_like(tgt[:, :, :1], BOS), tgt[:, :, :-1]], dim=2)
        return [(src[j], tin[j], tgt[j], False) for j in range(2)]

    # --- MLLOG --------------------------------------------------------------------------------
    def common_hyperparameters(self) -> dict:
        cfg = self.cfg
        hp = {
            C.GLOBAL_BATCH_SIZE: self.global_batch,
            "gpulab_batch_unit": "tokens" if self.max_tokens else "sentences",
            C.OPT_NAME: C.ADAM,
            C.OPT_BASE_LR: self.lr,
            "opt_adam_beta_1": cfg["betas"][0],
            "opt_adam_beta_2": cfg["betas"][1],
            C.OPT_ADAM_EPSILON: self.adam_eps,
            C.OPT_LR_WARMUP_STEPS: self.warmup,
            "gpulab_lr_scaling": cfg.get("lr_scaling", "none"),
            "gpulab_loss_per": self.loss_per,
            "gpulab_bleu": {
                "intl": "sacrebleu tokenize=intl lowercase",
                "moses": "sacremoses -a -l de, sacrebleu tokenize=none lowercase",
            }[self.bleu_scheme],
            "model_hp_loss_smoothing": self.smoothing,
        }
        if cfg.get("schedule_at"):
            hp["gpulab_schedule_at"] = dict(cfg["schedule_at"])
        return hp


def check_bucket_config(cfg: dict, name: str) -> None:
    b = cfg.get("buckets")
    if not (isinstance(b, list) and b and all(isinstance(x, int) and x > 0 for x in b) and b == sorted(b)):
        raise WorkloadError(f"workloads.yml: {name}: 'buckets' must be a sorted list of positive lengths")
