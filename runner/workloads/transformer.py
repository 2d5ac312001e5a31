"""Transformer (big): the MLPerf v0.5 attention translation benchmark (WMT17 En-De, BLEU).

The model of the reference: 6 encoder and 6 decoder layers, model width 1024,
feed-forward 4096, 16 heads, pre-layer-norm residual blocks with a final norm,
sinusoidal positions, one embedding matrix shared by source, target and the
output projection (scaled by sqrt(width)), dropout 0.1, label smoothing 0.1,
Adam (0.9, 0.98, 1e-9) with linear warm-up and inverse-square-root decay.
Attention runs through ``F.scaled_dot_product_attention`` (flash attention on
GPUs when there is no padding mask, as in throughput mode). Evaluation decodes
greedily (the reference uses a beam of 4).

Tiny and small scales: the same code, narrower (tiny: 2+2 layers, width 64,
4 heads) on the generated task of runner.workloads.translation.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from mlperf_logging.mllog import constants as C

from runner.workloads import translation as T


class MHA(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float, cross: bool):
        super().__init__()
        self.h = heads
        self.cross = cross
        if cross:
            self.q = nn.Linear(d, d)
            self.kv = nn.Linear(d, 2 * d)
        else:
            self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.p = dropout

    def _split(self, x):
        B, L, D = x.shape
        return x.view(B, L, self.h, D // self.h).transpose(1, 2)

    def forward(self, x, mem=None, mask=None, causal=False):
        if self.cross:
            q = self._split(self.q(x))
            k, v = (self._split(t) for t in self.kv(mem).chunk(2, dim=-1))
        else:
            q, k, v = (self._split(t) for t in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                           dropout_p=self.p if self.training else 0.0)
        B, H, L, Dh = y.shape
        return self.o(y.transpose(1, 2).reshape(B, L, H * Dh))


class Block(nn.Module):
    def __init__(self, d: int, ff: int, heads: int, dropout: float, decoder: bool):
        super().__init__()
        self.n1 = nn.LayerNorm(d)
        self.self_attn = MHA(d, heads, dropout, cross=False)
        self.decoder = decoder
        if decoder:
            self.n2 = nn.LayerNorm(d)
            self.cross_attn = MHA(d, heads, dropout, cross=True)
        self.n3 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.ReLU(inplace=True), nn.Dropout(dropout), nn.Linear(ff, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, self_mask=None, mem=None, mem_mask=None):
        x = x + self.drop(self.self_attn(self.n1(x), mask=self_mask, causal=self.decoder))
        if self.decoder:
            x = x + self.drop(self.cross_attn(self.n2(x), mem=mem, mask=mem_mask))
        return x + self.drop(self.ff(self.n3(x)))


def sinusoids(length: int, d: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(length, d)
    pe[:, 0::2] = torch.sin(pos * inv)
    pe[:, 1::2] = torch.cos(pos * inv)
    return pe


class Transformer(nn.Module):
    def __init__(self, vocab: int, d: int, ff: int, heads: int, layers: int, dropout: float, max_pos: int = 1024):
        super().__init__()
        self.d = d
        self.emb = nn.Embedding(vocab, d, padding_idx=T.PAD)
        nn.init.normal_(self.emb.weight, 0.0, d ** -0.5)
        with torch.no_grad():
            self.emb.weight[T.PAD].zero_()
        self.register_buffer("pe", sinusoids(max_pos, d), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.enc = nn.ModuleList(Block(d, ff, heads, dropout, decoder=False) for _ in range(layers))
        self.dec = nn.ModuleList(Block(d, ff, heads, dropout, decoder=True) for _ in range(layers))
        self.enc_norm = nn.LayerNorm(d)
        self.dec_norm = nn.LayerNorm(d)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def _embed(self, ids):
        return self.drop(self.emb(ids) * math.sqrt(self.d) + self.pe[: ids.shape[1]].to(self.emb.weight.dtype))

    @staticmethod
    def _pad_mask(src, pad: bool = True):
        """SDPA boolean mask (True = attend); None for a batch without padding (flash attention)."""
        return (src != T.PAD)[:, None, None, :] if pad else None

    def encode(self, src, mask):
        x = self._embed(src)
        for blk in self.enc:
            x = blk(x, self_mask=mask)
        return self.enc_norm(x)

    def decode(self, tgt_in, mem, mem_mask):
        y = self._embed(tgt_in)
        for blk in self.dec:
            y = blk(y, mem=mem, mem_mask=mem_mask)
        return self.dec_norm(y) @ self.emb.weight.t()

    def forward(self, src, tgt_in, pad: bool = True):
        mask = self._pad_mask(src, pad)
        return self.decode(tgt_in, self.encode(src, mask), mask)

    @torch.no_grad()
    def greedy(self, src, max_len: int):
        mask = self._pad_mask(src, bool((src == T.PAD).any()))
        mem = self.encode(src, mask)
        B = src.shape[0]
        ys = torch.full((B, 1), T.BOS, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            nxt = self.decode(ys, mem, mask)[:, -1].float().argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, T.PAD), nxt)
            ys = torch.cat([ys, nxt.unsqueeze(1)], dim=1)
            done |= nxt == T.EOS
            if bool(done.all()):
                break
        out = ys[:, 1:]
        if out.shape[1] < max_len:
            out = F.pad(out, (0, max_len - out.shape[1]), value=T.PAD)
        return out


def make_model(cfg: dict, vocab_size: int) -> nn.Module:
    return Transformer(vocab_size, int(cfg["d_model"]), int(cfg["d_ff"]), int(cfg["heads"]),
                       int(cfg["layers"]), float(cfg.get("dropout", 0.1)),
                       max_pos=max(1024, int(cfg.get("decode_max_len", 256)) + 2))


class Trainer(T.Trainer):
    def __init__(self, ctx):
        T.check_bucket_config(ctx.cfg, "transformer")
        super().__init__(ctx, make_model, ("wmt17_en_de", "wmt17"), adam_eps=float(ctx.cfg.get("eps", 1e-9)))

    def hyperparameters(self) -> dict:
        hp = self.common_hyperparameters()
        hp[C.MAX_SEQUENCE_LENGTH] = (int(self.cfg["max_len"]), {"method": "discard"})
        return hp


def build(ctx) -> Trainer:
    return Trainer(ctx)
