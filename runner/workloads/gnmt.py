"""GNMT: the MLPerf v0.5 recurrent translation benchmark (WMT16 En-De, uncased BLEU).

The model of the MLPerf reference: a 4-layer LSTM encoder (the first layer
bidirectional, residual connections from the third layer on) and a 4-layer
LSTM decoder whose first layer's output queries a normalized Bahdanau
attention over the encoder outputs; the attention context joins the input of
every further decoder layer (residual from the third layer on). Hidden size
1024 at full scale, embeddings shared between encoder and decoder, dropout
0.2 between LSTM layers (none on the embeddings or before the classifier),
zero initial decoder states, PyTorch's default initialisation, label
smoothing 0.1 on a loss summed over tokens and divided by the sentences of
the batch, gradient norm clipped at 5, Adam with the reference's
exponential warm-up and step decay. The LSTMs are ``nn.LSTM`` (cuDNN on GPUs); teacher-forced training
runs every layer over the whole sequence at once (the attention query is the
first decoder layer's output, which does not depend on the attention).
The first encoder layer's backward direction reads each sentence reversed
within its length, so that padding never reaches an output (the reference
reverses by length too). Evaluation: beam search of width 5 with the
reference's length normalization and coverage penalty
(runner.workloads.beam_search.gnmt_search), BLEU as ``sacrebleu -lc
--tokenize intl`` (runner.workloads.bleu).

Tiny and small scales: the same 4+4 layers with a smaller ``hidden`` (tiny 32)
on the generated task of runner.workloads.translation.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from mlperf_logging.mllog import constants as C

from runner.workloads import cpucaps
from runner.workloads import translation as T
from runner.workloads.beam_search import gnmt_search
from runner.workloads.trainer import WorkloadSpec


class BahdanauAttention(nn.Module):
    """Normalized Bahdanau attention (seq2seq/models/attention.py of the reference)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, hidden, bias=False)
        stdv = 1.0 / hidden**0.5
        self.v = nn.Parameter(torch.empty(hidden).uniform_(-stdv, stdv))
        self.g = nn.Parameter(torch.tensor(stdv))
        self.b = nn.Parameter(torch.zeros(hidden))

    def keys(self, enc):
        return self.k(enc)

    def forward(self, query, keys, values, pad_mask):
        """Context [B,T,H] and attention weights [B,T,S] (zero on padding)."""
        v = self.g * self.v / self.v.float().norm().to(self.v.dtype)
        s = torch.tanh(self.q(query).unsqueeze(2) + keys.unsqueeze(1) + self.b) @ v  # [B,T,S]
        s = s.masked_fill(pad_mask.unsqueeze(1), float("-inf"))
        w = torch.softmax(s.float(), dim=-1).to(values.dtype)
        return w @ values, w


def reverse_within(x, lengths):
    """Each row's first ``lengths[b]`` steps reversed, the padding after them kept in place.

    The gather runs in fp32 (exact: it only moves values; a no-op for fp32
    input). Its backward is a ``scatter_add``, an op that CUDA autocast
    promotes, and torch.compile traces the backward under autocast; under
    CUDA autocast the cuDNN LSTMs return float16 whatever autocast's dtype,
    and a float16 gradient reaching ``scatter_add`` under bf16 autocast stops
    the compile ("Unexpected floating ScalarType in at::autocast::prioritize").
    Through an fp32 gather that gradient is fp32, which the promotion accepts
    (runner.workloads.gradients.promote_capture_backend checks this on a CPU).
    """
    B, S = x.shape[:2]
    t = torch.arange(S, device=x.device).unsqueeze(0)
    L = lengths.unsqueeze(1)
    idx = torch.where(t < L, L - 1 - t, t)
    return x.float().gather(1, idx.unsqueeze(-1).expand(B, S, x.shape[-1])).to(x.dtype)


class GNMT(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int = 4, dropout: float = 0.2, init: str = "reference"):
        super().__init__()
        h = hidden
        self.h = h
        # PyTorch's default initialisation throughout, as the v0.5 reference (it sets none
        # but the attention's): embeddings N(0, 1), LSTM and Linear U(+-1/sqrt(fan))
        self.emb = nn.Embedding(vocab, h, padding_idx=T.PAD)
        self.drop = nn.Dropout(dropout)
        # the bidirectional first layer as two LSTMs: the backward one reads each
        # sentence reversed within its length, so that no output depends on padding
        self.enc0_fwd = nn.LSTM(h, h, batch_first=True)
        self.enc0_bwd = nn.LSTM(h, h, batch_first=True)
        self.enc1 = nn.LSTM(2 * h, h, batch_first=True)
        self.enc_rest = nn.ModuleList(nn.LSTM(h, h, batch_first=True) for _ in range(layers - 2))
        self.dec0 = nn.LSTM(h, h, batch_first=True)
        self.dec_rest = nn.ModuleList(nn.LSTM(2 * h, h, batch_first=True) for _ in range(layers - 1))
        self.attn = BahdanauAttention(h)
        self.out = nn.Linear(h, vocab)
        if init == "uniform":  # the test scales: embeddings, LSTMs and the attention vector U(-0.1, 0.1)
            nn.init.uniform_(self.emb.weight, -0.1, 0.1)
            nn.init.uniform_(self.attn.v, -0.1, 0.1)
            for lstm in [self.enc0_fwd, self.enc0_bwd, self.enc1, self.dec0, *self.enc_rest, *self.dec_rest]:
                for p in lstm.parameters():
                    nn.init.uniform_(p, -0.1, 0.1)
        elif init != "reference":
            raise T.WorkloadError(f"workloads.yml: gnmt: init {init!r}: use reference or uniform")

    def encode(self, src):
        lengths = (src != T.PAD).sum(dim=1)
        x = self.emb(src)
        fwd, _ = self.enc0_fwd(x)
        bwd, _ = self.enc0_bwd(reverse_within(x, lengths))
        x = torch.cat([fwd, reverse_within(bwd, lengths)], dim=-1)
        x, _ = self.enc1(self.drop(x))
        for lstm in self.enc_rest:
            y, _ = lstm(self.drop(x))
            x = x + y  # residual from the third layer on
        return x

    def decode(self, tgt_in, enc, keys, pad_mask, state=None):
        state = state or [None] * (1 + len(self.dec_rest))
        new = []
        x = self.emb(tgt_in)
        x, st = self.dec0(x, state[0])
        new.append(st)
        ctx, w = self.attn(x, keys, enc, pad_mask)
        for i, lstm in enumerate(self.dec_rest):
            y, st = lstm(torch.cat([self.drop(x), ctx], dim=-1), state[i + 1])
            new.append(st)
            x = x + y if i >= 1 else y  # residual from the third layer on
        return self.out(x), new, w

    def forward(self, src, tgt_in, pad: bool = True):
        enc = self.encode(src)
        logits, _, _ = self.decode(tgt_in, enc, self.attn.keys(enc), src == T.PAD)
        return logits

    # --- decoding (runner.workloads.beam_search) -----------------------------------------
    def start(self, src):
        enc = self.encode(src)
        return {"enc": enc, "keys": self.attn.keys(enc), "mask": src == T.PAD, "lstm": None}

    def step(self, state, words):
        logits, lstm, w = self.decode(words.unsqueeze(1), state["enc"], state["keys"], state["mask"], state["lstm"])
        logp = torch.log_softmax(logits[:, -1].float(), dim=-1)
        return logp, w[:, -1], dict(state, lstm=lstm)

    @staticmethod
    def select(state, rows):
        out = {k: state[k].index_select(0, rows) for k in ("enc", "keys", "mask")}
        out["lstm"] = (
            None
            if state["lstm"] is None
            else [(h.index_select(1, rows), c.index_select(1, rows)) for h, c in state["lstm"]]
        )
        return out


def make_model(cfg: dict, vocab_size: int) -> nn.Module:
    return GNMT(
        vocab_size,
        int(cfg["hidden"]),
        int(cfg.get("layers", 4)),
        float(cfg.get("dropout", 0.2)),
        cfg.get("init", "reference"),
    )


class Trainer(T.Trainer):
    src_frame = (True, True)  # the reference's source is BOS, the sentence, EOS
    tgt_extra = 2  # its length filter counts the target's BOS and EOS too
    bleu_scheme = "intl"
    fixed_sampler = False  # the reference's BucketingSampler

    def __init__(self, ctx):
        T.check_bucket_config(ctx.cfg, "gnmt")
        self.beam = beam_config(ctx.cfg)
        if ctx.precision == "bf16" and not ctx.cuda and cpucaps.bf16_lstm_missing():
            ctx.fall_back("fp32", cpucaps.bf16_lstm_missing())
        super().__init__(ctx, make_model, ("wmt16_de_en", "wmt16"), adam_eps=float(ctx.cfg.get("eps", 1e-8)))

    def decode_eval(self, src):
        b = self.beam
        return gnmt_search(
            self.model, src, b["size"], b["max_len"], b["len_norm_factor"], b["len_norm_const"], b["cov_penalty_factor"]
        )

    def hyperparameters(self) -> dict:
        cfg = self.cfg
        hp = self.common_hyperparameters()
        hp.update(
            {
                C.OPT_LR_ALT_DECAY_FUNC: True,
                C.OPT_LR_ALT_WARMUP_FUNC: True,
                C.OPT_LR_DECAY_FACTOR: float(cfg.get("decay_factor", 0.5)),
                C.OPT_LR_DECAY_INTERVAL: self.interval,
                C.OPT_LR_DECAY_STEPS: int(cfg.get("decay_steps", 4)),
                C.OPT_LR_REMAIN_STEPS: self.remain,
                C.MAX_SEQUENCE_LENGTH: (int(cfg["max_len"]), {"method": "discard"}),
                # the v0.5 reference's evaluation keys, with its values
                "eval_hp_beam_size": self.beam["size"],
                "eval_hp_max_sequence_length": self.beam["max_len"],
                "eval_hp_length_normalization_constant": self.beam["len_norm_const"],
                "eval_hp_length_normalization_factor": self.beam["len_norm_factor"],
                "eval_hp_coverage_penalty_factor": self.beam["cov_penalty_factor"],
            }
        )
        return hp


def beam_config(cfg: dict) -> dict:
    b = cfg.get("beam") or {}
    try:
        out = {
            "size": int(b["size"]),
            "max_len": int(b["max_len"]),
            "len_norm_factor": float(b["len_norm_factor"]),
            "len_norm_const": float(b["len_norm_const"]),
            "cov_penalty_factor": float(b["cov_penalty_factor"]),
        }
    except (KeyError, TypeError, ValueError):
        raise T.WorkloadError(
            "workloads.yml: gnmt: 'beam' needs size, max_len, len_norm_factor, len_norm_const and cov_penalty_factor"
        ) from None
    if out["size"] < 1 or out["max_len"] < 2:
        raise T.WorkloadError("workloads.yml: gnmt: beam size must be at least 1 and max_len at least 2")
    return out


SPEC = WorkloadSpec(Trainer)
build = SPEC.build
