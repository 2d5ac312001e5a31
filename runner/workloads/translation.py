"""What the two translation workloads (gnmt, transformer) share.

- Data. Token ids with ``PAD, UNK, BOS, EOS = 0, 1, 2, 3`` (the layout of the
  prepared WMT data, runner.datasets.bpe). Full scale reads the prepared WMT
  En-De arrays (``<data>/wmt16_de_en`` for GNMT, ``<data>/wmt17_en_de`` for the
  Transformer): ``vocab.json`` and ``<split>.<lang>.ids.npy`` /
  ``<split>.<lang>.offsets.npy`` for split train/eval, lang en/de (sentence i
  is ``ids[off[i]:off[i+1]]``, no BOS/EOS stored). Tiny and small scales
  generate a deterministic translation task with a real word vocabulary: an
  "English" and a "German" lexicon of pronounceable words, a fixed bilingual
  dictionary, and sentences whose translation is the word-by-word dictionary
  translation with each pair of neighbouring words swapped (so that the model
  must learn both the lexicon and an alignment that is not the identity).
- Batches bucketed by length: every batch is padded to one of a few fixed
  lengths, so that compiled graphs see a handful of static shapes.
- Uncased corpus BLEU (runner.workloads.translation.bleu), computed from
  per-sentence n-gram statistics summed over all ranks, logged as a fraction
  in [0, 1] as the MLPerf 0.7.0 rules expect (target 0.25 = 25.0 BLEU).
- The trainer: label-smoothed cross entropy, Adam, the warm-up/decay schedule,
  greedy decoding for evaluation, synthetic batches for throughput mode.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from mlperf_logging.mllog import constants as C

from runner.workloads.base import WorkloadError, compile_fn

PAD, UNK, BOS, EOS = 0, 1, 2, 3
N_SPECIAL = 4
DATA_SEED = 20181201  # generated data is a fixed data set, the same for every run

# ----------------------------------------------------------------------------------------
# BLEU (uncased, 13a tokenization, corpus level, no smoothing)
# ----------------------------------------------------------------------------------------

_13A = [
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]


def tokenize_13a(line: str) -> list[str]:
    """mteval-v13a tokenization (as SacreBLEU's default), lower-cased."""
    s = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in s:
        s = s.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    s = " " + s + " "
    for rx, sub in _13A:
        s = rx.sub(sub, s)
    return s.lower().split()


def bleu_stats(hyp: list[str], ref: list[str], max_n: int = 4) -> list[int]:
    """``[hyp_len, ref_len, match_1..match_n, total_1..total_n]`` of one tokenized sentence."""
    out = [len(hyp), len(ref)]
    matches, totals = [], []
    for n in range(1, max_n + 1):
        h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
        r = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
        matches.append(sum(min(c, r[g]) for g, c in h.items()))
        totals.append(max(len(hyp) - n + 1, 0))
    return out + matches + totals


def bleu_from_stats(stats, max_n: int = 4) -> float:
    """Corpus BLEU as a fraction in [0, 1] from summed ``bleu_stats``."""
    c, r = stats[0], stats[1]
    m, t = stats[2:2 + max_n], stats[2 + max_n:2 + 2 * max_n]
    if c == 0 or any(x == 0 for x in m) or any(x == 0 for x in t):
        return 0.0
    log_p = sum(math.log(mi / ti) for mi, ti in zip(m, t)) / max_n
    bp = 1.0 if c > r else math.exp(1.0 - r / c)
    return bp * math.exp(log_p)


def corpus_bleu(hyps: list[str], refs: list[str]) -> float:
    total = [0] * 10
    for h, r in zip(hyps, refs):
        total = [a + b for a, b in zip(total, bleu_stats(tokenize_13a(h), tokenize_13a(r)))]
    return bleu_from_stats(total)


# ----------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------

class WordVocab:
    """The generated task's vocabulary: specials, then English words, then German words."""

    def __init__(self, en: list[str], de: list[str]):
        self.words = ["<pad>", "<unk>", "<s>", "</s>"] + en + de
        self.n_en = len(en)

    def __len__(self):
        return len(self.words)

    def decode(self, ids) -> str:
        return " ".join(self.words[i] for i in ids if i >= N_SPECIAL)


def _lexicon(rng, n: int, onsets: str, vowels: str, codas: str) -> list[str]:
    seen, out = set(), []
    while len(out) < n:
        k = int(rng.integers(1, 4))
        w = "".join(rng.choice(list(onsets)) + rng.choice(list(vowels)) for _ in range(k))
        w += rng.choice(list(codas))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def generate(cfg: dict) -> dict:
    """The generated translation task (deterministic): train and eval pairs and the vocabulary."""
    rng = np.random.default_rng(DATA_SEED)
    n = int(cfg["words"])
    en = _lexicon(rng, n, "bcdfglmnprstvw", "aeiou", ["", "n", "s", "t", "r"])
    de = _lexicon(rng, n, "bdfghklmnrstwz", "aeiouä", ["", "en", "er", "t", "ch"])
    vocab = WordVocab(en, de)
    # the dictionary: English word i -> German word perm[i]
    perm = rng.permutation(n)
    zipf = 1.0 / np.arange(1, n + 1) ** float(cfg.get("zipf", 0.8))
    zipf /= zipf.sum()
    lo, hi = cfg["sentence_len"]

    def pairs(count):
        src, tgt = [], []
        for _ in range(count):
            ln = int(rng.integers(lo, hi + 1))
            words = rng.choice(n, size=ln, p=zipf)
            out = perm[words]
            if cfg.get("swap_pairs", True):
                out = out.copy()
                for i in range(0, ln - 1, 2):
                    out[i], out[i + 1] = out[i + 1], out[i]
            src.append((words + N_SPECIAL).astype(np.int64))
            tgt.append((out + N_SPECIAL + n).astype(np.int64))
        return src, tgt

    tr_s, tr_t = pairs(int(cfg["train_pairs"]))
    ev_s, ev_t = pairs(int(cfg["eval_pairs"]))
    return {"vocab": vocab, "vocab_size": len(vocab), "train": (tr_s, tr_t), "eval": (ev_s, ev_t),
            "refs": [vocab.decode(t) for t in ev_t]}


def _split(root: Path, split: str, lang: str) -> list[np.ndarray]:
    ids = np.load(root / f"{split}.{lang}.ids.npy", mmap_mode="r")
    off = np.load(root / f"{split}.{lang}.offsets.npy")
    return [np.asarray(ids[off[i]:off[i + 1]], dtype=np.int64) for i in range(len(off) - 1)]


def _from_reader(wmt, src_lang: str, tgt_lang: str) -> dict:
    """Through runner.datasets.readers (the datasets package, with its manifest check)."""
    def sents(split, lang):
        ss = wmt.split(split, lang)
        return [np.asarray(ss[i], dtype=np.int64) for i in range(len(ss))]

    bpe = wmt.bpe

    class _Dec:
        def decode(self, ids):
            return bpe.decode([int(i) for i in ids if int(i) >= N_SPECIAL])

    dec = _Dec()
    tr = (sents("train", src_lang), sents("train", tgt_lang))
    ev = (sents("eval", src_lang), sents("eval", tgt_lang))
    return {"vocab": dec, "vocab_size": int(wmt.vocab_size), "train": tr, "eval": ev,
            "refs": [dec.decode(t) for t in ev[1]]}


def load_prepared(root: str, benchmark: str, folders: tuple[str, ...],
                  src_lang: str = "en", tgt_lang: str = "de") -> dict:
    """The prepared WMT data of ``benchmark`` under the data root ``root``.

    Through ``runner.datasets.readers.wmt`` where the datasets package is
    installed (it checks the dataset against its manifest first); otherwise
    the arrays are read directly from the first of ``folders`` under ``root``
    (or ``root`` itself) that holds them.
    """
    try:
        from runner.datasets import readers
    except ImportError:
        readers = None
    if readers is not None and hasattr(readers, "wmt"):
        try:
            return _from_reader(readers.wmt(benchmark, root), src_lang, tgt_lang)
        except Exception as exc:  # NotPrepared and friends: one line naming what is missing
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WorkloadError(msg) from exc
    need = ["vocab.json"] + [f"{s}.{lg}.{k}.npy" for s in ("train", "eval") for lg in (src_lang, tgt_lang)
                             for k in ("ids", "offsets")]
    cands = [Path(root) / f for f in folders] + [Path(root)]
    d = next((c for c in cands if (c / "vocab.json").is_file()), cands[0])
    missing = [f for f in need if not (d / f).is_file()]
    if missing:
        raise WorkloadError(f"{d}: not a prepared WMT dataset (missing {', '.join(missing[:3])}); "
                            "prepare it with the datasets playbook")
    try:
        from runner.datasets.bpe import BPE
    except ImportError as exc:
        raise WorkloadError("the WMT vocabulary reader (runner.datasets.bpe) is not installed with this runner") from exc
    bpe = BPE.load(d / "vocab.json")
    tr = (_split(d, "train", src_lang), _split(d, "train", tgt_lang))
    ev = (_split(d, "eval", src_lang), _split(d, "eval", tgt_lang))

    class _Dec:
        def decode(self, ids):
            return bpe.decode([int(i) for i in ids if int(i) >= N_SPECIAL])

    dec = _Dec()
    return {"vocab": dec, "vocab_size": len(bpe.vocab), "train": tr, "eval": ev,
            "refs": [dec.decode(t) for t in ev[1]]}


def bucket_length(n: int, buckets: list[int]) -> int:
    for b in buckets:
        if n <= b:
            return b
    return buckets[-1]


def make_batches(src, tgt, batch: int, buckets: list[int], max_len: int):
    """Padded batches ``(src [B,S], tgt_in [B,T], tgt_out [B,T])`` grouped by bucket (numpy)."""
    keep = [i for i in range(len(src)) if 0 < len(src[i]) <= max_len and 0 < len(tgt[i]) + 1 <= max_len]
    by = {}
    for i in keep:
        key = (bucket_length(len(src[i]), buckets), bucket_length(len(tgt[i]) + 1, buckets))
        by.setdefault(key, []).append(i)
    out = []
    for (sl, tl), idx in sorted(by.items()):
        for s in range(0, len(idx), batch):
            part = idx[s:s + batch]
            S = np.full((len(part), sl), PAD, np.int64)
            TI = np.full((len(part), tl), PAD, np.int64)
            TO = np.full((len(part), tl), PAD, np.int64)
            for j, i in enumerate(part):
                S[j, :len(src[i])] = src[i]
                t = tgt[i]
                TI[j, 0] = BOS
                TI[j, 1:len(t) + 1] = t
                TO[j, :len(t)] = t
                TO[j, len(t)] = EOS
            out.append((S, TI, TO))
    return out, len(keep)


def smoothed_loss(logits, target, smoothing: float):
    """Label-smoothed cross entropy summed over non-pad tokens, and their count."""
    logits = logits.float().reshape(-1, logits.shape[-1])
    target = target.reshape(-1)
    loss = F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum", label_smoothing=smoothing)
    return loss, (target != PAD).sum()


# ----------------------------------------------------------------------------------------
# The trainer
# ----------------------------------------------------------------------------------------

class Trainer:
    """Drives a seq2seq model (``module.make_model(cfg, vocab_size)``) through runner.workloads.base.

    The model provides ``forward(src, tgt_in) -> logits [B,T,V]`` and
    ``greedy(src, max_len) -> ids [B,L]`` (ending at EOS, PAD after).
    """

    def __init__(self, ctx, make_model, datasets: tuple[str, ...], adam_eps: float):
        self.ctx = ctx
        cfg = ctx.cfg
        dev = ctx.device
        self.cfg = cfg
        self.buckets = list(cfg["buckets"])
        self.max_len = int(cfg["max_len"])
        self.smoothing = float(cfg.get("label_smoothing", 0.1))
        self.batch = int(cfg["batch_size"])
        self.adam_eps = adam_eps
        if ctx.mode == "throughput":
            self.data = None
            vocab_size = int(cfg["vocab_size"])
        else:
            self.data = (generate(cfg) if cfg["data"] == "generated"
                         else load_prepared(ctx.data, ctx.entry["benchmark"], datasets))
            vocab_size = self.data["vocab_size"]
            self.train_batches, self.train_samples = make_batches(
                *self.data["train"], self.batch, self.buckets, self.max_len)
            self.eval_samples = len(self.data["eval"][0])
            # every rank takes the same number of batches per epoch (DDP steps in lock-step)
            self.steps_per_epoch = len(self.train_batches) // ctx.world_size
            if self.steps_per_epoch == 0:
                raise WorkloadError(f"{len(self.train_batches)} training batches cannot feed "
                                    f"{ctx.world_size} processes")
        self.vocab_size = vocab_size
        torch.manual_seed(ctx.seed)
        self.model = make_model(cfg, vocab_size).to(dev)
        self.ddp = ctx.wrap(self.model)
        self.fwd = self._forward_loss
        if ctx.compile and cfg.get("compile", True):
            import torch._dynamo as dynamo

            # one graph per (source, target) bucket pair and padding flag: static shapes
            n = len(self.buckets)
            dynamo.config.recompile_limit = max(dynamo.config.recompile_limit, 2 * n * n + 2)
            # the loss joins the graph: log-softmax and label smoothing fuse with the projection
            self.fwd = compile_fn(ctx, self._forward_loss)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg["lr"], betas=tuple(cfg["betas"]),
                                    eps=adam_eps, **ctx.fused())
        self.scaler = ctx.grad_scaler()
        self.step_no = 0
        self.sched = self._schedule()
        self.lr_t = None
        self._set_lr()

    # --- schedule -------------------------------------------------------------------------
    def _schedule(self):
        cfg = self.cfg
        warm = int(cfg["warmup_steps"])
        base = float(cfg["lr"])
        if cfg.get("schedule") == "rsqrt":  # Transformer: linear warm-up, then 1/sqrt(step)
            def f(step):
                s = step + 1
                return base * min(s / max(warm, 1), math.sqrt(max(warm, 1) / s))
            return f
        # GNMT: warm-up, constant until remain_steps, then decay by a factor every interval
        total = int(cfg.get("decay_total_steps", 0) or 0)
        remain = int(cfg.get("remain_steps", 0) or 0)
        interval = int(cfg.get("decay_interval", 0) or 0)
        factor = float(cfg.get("decay_factor", 0.5))
        steps = int(cfg.get("decay_steps", 4))

        def g(step):
            if step < warm:
                return base * math.exp(math.log(0.01) * (warm - step) / warm)
            if total and interval and step >= remain:
                k = min(steps, 1 + (step - remain) // interval)
                return base * factor ** k
            return base
        return g

    def _set_lr(self):
        lr = self.sched(self.step_no)
        for g in self.opt.param_groups:
            if isinstance(g["lr"], torch.Tensor):
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr

    # --- one step -------------------------------------------------------------------------
    def _forward_loss(self, src, tgt_in, tgt_out, pad: bool):
        logits = self.ddp(src, tgt_in, pad)
        return smoothed_loss(logits, tgt_out, self.smoothing)

    def _step(self, src, tgt_in, tgt_out, pad: bool = True):
        ctx = self.ctx
        with ctx.autocast():
            loss, ntok = self.fwd(src, tgt_in, tgt_out, pad)
        self.opt.zero_grad(set_to_none=True)
        # mean over this rank's tokens; DDP averages over ranks
        self.scaler.scale(loss / ntok.clamp(min=1)).backward()
        self.scaler.unscale_(self.opt)
        if self.cfg.get("grad_clip"):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.cfg["grad_clip"]))
        self.scaler.step(self.opt)
        self.scaler.update()
        self.step_no += 1
        self._set_lr()

    def train_epoch(self, epoch: int) -> None:
        ctx, dev = self.ctx, self.ctx.device
        g = torch.Generator()
        g.manual_seed(ctx.seed * 7919 + epoch)  # same order on every rank; ranks take disjoint batches
        order = torch.randperm(len(self.train_batches), generator=g).tolist()
        mine = order[ctx.rank::ctx.world_size][: self.steps_per_epoch]
        self.model.train()
        for b in mine:
            S, TI, TO = self.train_batches[b]
            self._step(torch.from_numpy(S).to(dev, non_blocking=True),
                       torch.from_numpy(TI).to(dev, non_blocking=True),
                       torch.from_numpy(TO).to(dev, non_blocking=True), pad=bool((S == PAD).any()))
            ctx.mark_step()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        ctx, dev = self.ctx, self.ctx.device
        self.model.eval()
        src, tgt = self.data["eval"]
        refs = self.data["refs"]
        vocab = self.data["vocab"]
        n = len(src)
        idx = list(range(ctx.rank, n, ctx.world_size))
        idx.sort(key=lambda i: len(src[i]))
        stats = [0] * 10
        eb = int(self.cfg.get("eval_batch_size", self.batch))
        for s in range(0, len(idx), eb):
            part = idx[s:s + eb]
            sl = bucket_length(max(len(src[i]) for i in part), self.buckets)
            S = np.full((len(part), sl), PAD, np.int64)
            for j, i in enumerate(part):
                S[j, :min(len(src[i]), sl)] = src[i][:sl]
            limit = min(int(sl * 1.5) + 10, int(self.cfg.get("decode_max_len", 256)))
            with ctx.autocast():
                out = self.model.greedy(torch.from_numpy(S).to(dev), limit).cpu().numpy()
            for j, i in enumerate(part):
                row = out[j].tolist()
                if EOS in row:
                    row = row[: row.index(EOS)]
                hyp = vocab.decode(row)
                st = bleu_stats(tokenize_13a(hyp), tokenize_13a(refs[i]))
                stats = [a + b for a, b in zip(stats, st)]
        total = ctx.all_sum(stats)
        return round(bleu_from_stats([int(x) for x in total]), 6)

    # --- throughput mode: synthetic on-device batches ---------------------------------------
    def throughput_batch(self) -> int:
        """Target tokens per step (the sample unit of the translation workloads)."""
        tp = self.cfg.get("throughput", {})
        self.tp_len = int(tp.get("seq_len", self.buckets[-1]))
        self.tp_batch = self.ctx.throughput_batch_size(self.batch)
        return self.tp_batch * self.tp_len

    def throughput_step(self) -> None:
        if not hasattr(self, "_pool"):
            if not hasattr(self, "tp_len"):
                self.throughput_batch()
            dev = self.ctx.device
            g = torch.Generator(device=dev)
            g.manual_seed(self.ctx.seed + self.ctx.rank)
            B, L = self.tp_batch, self.tp_len
            src = torch.randint(N_SPECIAL, self.vocab_size, (2, B, L), device=dev, generator=g)
            tgt = torch.randint(N_SPECIAL, self.vocab_size, (2, B, L), device=dev, generator=g)
            tin = torch.cat([torch.full_like(tgt[:, :, :1], BOS), tgt[:, :, :-1]], dim=2)
            self._pool = (src, tin, tgt)
            self._k = 0
            self.model.train()
        s, ti, to = self._pool
        j = self._k % 2
        self._k += 1
        self._step(s[j], ti[j], to[j], pad=False)

    # --- MLLOG --------------------------------------------------------------------------------
    def common_hyperparameters(self) -> dict:
        cfg, ctx = self.cfg, self.ctx
        return {
            C.GLOBAL_BATCH_SIZE: self.batch * ctx.world_size,
            C.OPT_NAME: C.ADAM,
            C.OPT_BASE_LR: cfg["lr"],
            "opt_adam_beta_1": cfg["betas"][0],
            "opt_adam_beta_2": cfg["betas"][1],
            C.OPT_ADAM_EPSILON: self.adam_eps,
            C.OPT_LR_WARMUP_STEPS: int(cfg["warmup_steps"]),
        }


def check_bucket_config(cfg: dict, name: str) -> None:
    b = cfg.get("buckets")
    if not (isinstance(b, list) and b and all(isinstance(x, int) and x > 0 for x in b) and b == sorted(b)):
        raise WorkloadError(f"workloads.yml: {name}: 'buckets' must be a sorted list of positive lengths")
