"""Transformer (big): the MLPerf v0.5 attention translation benchmark (WMT17 En-De, BLEU).

The model of the reference: 6 encoder and 6 decoder layers, model width 1024,
feed-forward 4096, 16 heads, pre-layer-norm residual blocks with a final norm,
sinusoidal positions, one embedding matrix shared by source, target and the
output projection (scaled by sqrt(width)), dropout 0.1, label smoothing 0.1,
Adam (0.9, 0.997, 1e-9) with fairseq's linear warm-up from 0 and
inverse-square-root decay, batches of at most 5120 tokens per process
(NVIDIA's v0.5 submission, translation/pytorch/run_training.sh and
config_DGX1.sh). Attention runs through ``F.scaled_dot_product_attention``
(flash attention on GPUs when there is no padding mask, as in throughput
mode). The source ends with EOS, as fairseq's. Evaluation: fairseq's beam
search of width 4, length penalty 1, at most 200 words
(runner.workloads.beam_search.fairseq_search), BLEU on lower-cased
Moses-tokenized text (runner.workloads.bleu).

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
from runner.workloads.beam_search import fairseq_search
from runner.workloads.trainer import WorkloadSpec


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
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None, dropout_p=self.p if self.training else 0.0
        )
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
        nn.init.normal_(self.emb.weight, 0.0, d**-0.5)
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

    def decode(self, tgt_in, mem, mem_mask, last_only: bool = False):
        y = self._embed(tgt_in)
        for blk in self.dec:
            y = blk(y, mem=mem, mem_mask=mem_mask)
        if last_only:
            y = y[:, -1:]
        return self.dec_norm(y) @ self.emb.weight.t()

    def forward(self, src, tgt_in, pad: bool = True):
        mask = self._pad_mask(src, pad)
        return self.decode(tgt_in, self.encode(src, mask), mask)

    # --- decoding (runner.workloads.beam_search) -----------------------------------------
    def start(self, src):
        mask = self._pad_mask(src, bool((src == T.PAD).any()))
        mem = self.encode(src, mask)
        return {"mem": mem, "mask": mask, "ys": src.new_zeros((src.shape[0], 0))}

    def step(self, state, words):
        ys = torch.cat([state["ys"], words.unsqueeze(1)], dim=1)
        logits = self.decode(ys, state["mem"], state["mask"], last_only=True)[:, -1]
        return torch.log_softmax(logits.float(), dim=-1), None, dict(state, ys=ys)

    @staticmethod
    def select(state, rows):
        mask = state["mask"]
        return {
            "mem": state["mem"].index_select(0, rows),
            "ys": state["ys"].index_select(0, rows),
            "mask": None if mask is None else mask.index_select(0, rows),
        }


def make_model(cfg: dict, vocab_size: int) -> nn.Module:
    return Transformer(
        vocab_size,
        int(cfg["d_model"]),
        int(cfg["d_ff"]),
        int(cfg["heads"]),
        int(cfg["layers"]),
        float(cfg.get("dropout", 0.1)),
        max_pos=max(1024, int((cfg.get("beam") or {}).get("max_len", 256)) + 2),
    )


class Trainer(T.Trainer):
    src_frame = (False, True)  # fairseq appends EOS to the source
    tgt_extra = 1
    bleu_scheme = "moses"

    def __init__(self, ctx):
        T.check_bucket_config(ctx.cfg, "transformer")
        self.beam = beam_config(ctx.cfg)
        super().__init__(ctx, make_model, ("wmt17_en_de", "wmt17"), adam_eps=float(ctx.cfg.get("eps", 1e-9)))

    def decode_eval(self, src):
        b = self.beam
        return fairseq_search(self.model, src, b["size"], b["max_len"], b["len_penalty"])

    def hyperparameters(self) -> dict:
        hp = self.common_hyperparameters()
        hp[C.MAX_SEQUENCE_LENGTH] = (int(self.cfg["max_len"]), {"method": "discard"})
        # the v0.5 reference's key, with its values
        hp["model_hp_sequence_beam_search"] = {
            "alpha": self.beam["len_penalty"],
            "beam_size": self.beam["size"],
            "extra_decode_length": self.beam["max_len"],
            "vocab_size": self.vocab_size,
        }
        if self.max_tokens:
            hp["gpulab_max_tokens_per_process"] = self.max_tokens
        return hp


def beam_config(cfg: dict) -> dict:
    b = cfg.get("beam") or {}
    try:
        out = {"size": int(b["size"]), "max_len": int(b["max_len"]), "len_penalty": float(b["len_penalty"])}
    except (KeyError, TypeError, ValueError):
        raise T.WorkloadError("workloads.yml: transformer: 'beam' needs size, max_len and len_penalty") from None
    if out["size"] < 1 or out["max_len"] < 1:
        raise T.WorkloadError("workloads.yml: transformer: beam size and max_len must be at least 1")
    return out


SPEC = WorkloadSpec(Trainer)
build = SPEC.build
