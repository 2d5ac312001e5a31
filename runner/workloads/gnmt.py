"""GNMT: the MLPerf v0.5 recurrent translation benchmark (WMT16 En-De, uncased BLEU).

The model of the MLPerf reference: a 4-layer LSTM encoder (the first layer
bidirectional, residual connections from the third layer on) and a 4-layer
LSTM decoder whose first layer's output queries a normalized Bahdanau
attention over the encoder outputs; the attention context joins the input of
every further decoder layer (residual from the third layer on). Hidden size
1024 at full scale, embeddings shared between encoder and decoder, dropout
0.2, zero initial decoder states, label smoothing 0.1, Adam with warm-up and
step decay. The LSTMs are ``nn.LSTM`` (cuDNN on GPUs); teacher-forced training
runs every layer over the whole sequence at once (the attention query is the
first decoder layer's output, which does not depend on the attention).
Evaluation decodes greedily (the reference uses a beam of 5).

Tiny and small scales: the same 4+4 layers with a smaller ``hidden`` (tiny 32)
on the generated task of runner.workloads.translation.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from mlperf_logging.mllog import constants as C

from runner.workloads import translation as T


class BahdanauAttention(nn.Module):
    """Normalized Bahdanau attention (as the GNMT reference)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, hidden, bias=False)
        self.v = nn.Parameter(torch.empty(hidden).uniform_(-0.1, 0.1))
        self.g = nn.Parameter(torch.tensor(1.0 / hidden ** 0.5))
        self.b = nn.Parameter(torch.zeros(hidden))

    def keys(self, enc):
        return self.k(enc)

    def forward(self, query, keys, values, pad_mask):
        # query [B,T,H], keys/values [B,S,H], pad_mask [B,S] True at padding
        v = self.g * self.v / self.v.norm()
        s = torch.tanh(self.q(query).unsqueeze(2) + keys.unsqueeze(1) + self.b) @ v  # [B,T,S]
        s = s.masked_fill(pad_mask.unsqueeze(1), float("-inf"))
        w = torch.softmax(s.float(), dim=-1).to(values.dtype)
        return w @ values


class GNMT(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int = 4, dropout: float = 0.2):
        super().__init__()
        h = hidden
        self.h = h
        self.emb = nn.Embedding(vocab, h, padding_idx=T.PAD)
        nn.init.uniform_(self.emb.weight, -0.1, 0.1)
        self.drop = nn.Dropout(dropout)
        self.enc0 = nn.LSTM(h, h, batch_first=True, bidirectional=True)
        self.enc1 = nn.LSTM(2 * h, h, batch_first=True)
        self.enc_rest = nn.ModuleList(nn.LSTM(h, h, batch_first=True) for _ in range(layers - 2))
        self.dec0 = nn.LSTM(h, h, batch_first=True)
        self.dec_rest = nn.ModuleList(nn.LSTM(2 * h, h, batch_first=True) for _ in range(layers - 1))
        self.attn = BahdanauAttention(h)
        self.out = nn.Linear(h, vocab)
        for lstm in [self.enc0, self.enc1, self.dec0, *self.enc_rest, *self.dec_rest]:
            for p in lstm.parameters():
                nn.init.uniform_(p, -0.1, 0.1)

    def encode(self, src):
        x = self.drop(self.emb(src))
        x, _ = self.enc0(x)
        x, _ = self.enc1(self.drop(x))
        for lstm in self.enc_rest:
            y, _ = lstm(self.drop(x))
            x = x + y  # residual from the third layer on
        return x

    def decode(self, tgt_in, enc, keys, pad_mask, state=None):
        state = state or [None] * (1 + len(self.dec_rest))
        new = []
        x = self.drop(self.emb(tgt_in))
        x, st = self.dec0(x, state[0])
        new.append(st)
        ctx = self.attn(x, keys, enc, pad_mask)
        for i, lstm in enumerate(self.dec_rest):
            y, st = lstm(torch.cat([self.drop(x), ctx], dim=-1), state[i + 1])
            new.append(st)
            x = x + y if i >= 1 else y  # residual from the third layer on
        return self.out(self.drop(x)), new

    def forward(self, src, tgt_in, pad: bool = True):
        enc = self.encode(src)
        logits, _ = self.decode(tgt_in, enc, self.attn.keys(enc), src == T.PAD)
        return logits

    @torch.no_grad()
    def greedy(self, src, max_len: int):
        enc = self.encode(src)
        keys = self.attn.keys(enc)
        mask = src == T.PAD
        B = src.shape[0]
        tok = torch.full((B, 1), T.BOS, dtype=torch.long, device=src.device)
        out = torch.full((B, max_len), T.PAD, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        state = None
        for t in range(max_len):
            logits, state = self.decode(tok, enc, keys, mask, state)
            nxt = logits[:, -1].float().argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, T.PAD), nxt)
            out[:, t] = nxt
            done |= nxt == T.EOS
            if bool(done.all()):
                break
            tok = nxt.unsqueeze(1)
        return out


def make_model(cfg: dict, vocab_size: int) -> nn.Module:
    return GNMT(vocab_size, int(cfg["hidden"]), int(cfg.get("layers", 4)), float(cfg.get("dropout", 0.2)))


class Trainer(T.Trainer):
    def __init__(self, ctx):
        T.check_bucket_config(ctx.cfg, "gnmt")
        super().__init__(ctx, make_model, ("wmt16_de_en", "wmt16"), adam_eps=float(ctx.cfg.get("eps", 1e-8)))

    def hyperparameters(self) -> dict:
        cfg = self.cfg
        hp = self.common_hyperparameters()
        hp.update({
            C.OPT_LR_ALT_DECAY_FUNC: True,
            C.OPT_LR_ALT_WARMUP_FUNC: True,
            C.OPT_LR_DECAY_FACTOR: float(cfg.get("decay_factor", 0.5)),
            C.OPT_LR_DECAY_INTERVAL: int(cfg.get("decay_interval", 0) or 0),
            C.OPT_LR_DECAY_STEPS: int(cfg.get("decay_steps", 4)),
            C.OPT_LR_REMAIN_STEPS: int(cfg.get("remain_steps", 0) or 0),
            C.MAX_SEQUENCE_LENGTH: (int(cfg["max_len"]), {"method": "discard"}),
        })
        return hp


def build(ctx) -> Trainer:
    return Trainer(ctx)
