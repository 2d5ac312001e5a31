"""Beam search of the translation workloads, each as its MLPerf v0.5 reference decodes.

A model offers three calls on a decoding state whose rows are hypotheses:
``start(src) -> state`` (one row per sentence), ``step(state, words) ->
(logprobs [N,V] float32, attention [N,S] or None, state)`` for the last word
of each row, and ``select(state, rows) -> state`` (rows picked, repeated or
reordered). Both searches return, per sentence, the chosen tokens without
BOS and EOS.

``gnmt_search`` follows NVIDIA's v0.5 GNMT (rnn_translator/pytorch,
seq2seq/inference/beam_search.py): every live beam proposes its ``beam`` best
words; a beam that has emitted EOS proposes only itself (score unchanged);
the ``beam`` best of the ``beam * beam`` raw cumulative log probabilities go
on. A sentence ends when all its beams have emitted EOS: then each score is
divided by ``((const + len) / (const + 1)) ** factor`` (``len`` counts BOS and
EOS) and ``cov_penalty * sum_j log(min(1, A_j))`` is added, where ``A_j`` is
the attention on source position ``j`` summed over the steps (zero sums left
out). As in the reference, ``A`` is summed per beam slot: it is not reordered
when a beam takes over another's history. A sentence still open after
``max_len - 1`` words keeps its raw scores. The best score wins.

``fairseq_search`` follows NVIDIA's v0.5 Transformer (translation/pytorch,
fairseq/sequence_generator.py, ``stop_early``, ``normalize_scores``): each
step takes the ``2 * beam`` best extensions of the live beams (PAD and BOS never);
those among the first ``beam`` that end in EOS are finished, scored
``logprob / len ** len_penalty`` (``len`` counts EOS), until ``beam`` are
finished for the sentence; the first ``beam`` others go on. After
``max_len`` words every live beam is finished with EOS. The best finished
score wins (the first of equal ones).
"""

from __future__ import annotations

import math

import torch

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def _strip(row: list[int]) -> list[int]:
    out = []
    for t in row:
        if t == EOS:
            break
        out.append(t)
    return out


@torch.no_grad()
def gnmt_search(
    model, src, beam: int, max_len: int, len_norm_factor: float, len_norm_const: float, cov_penalty: float
) -> list[list[int]]:
    B, K, dev = src.shape[0], beam, src.device
    rep = torch.arange(B, device=dev).repeat_interleave(K)
    state = model.select(model.start(src), rep)
    N = B * K
    tokens = torch.full((N, max_len), PAD, dtype=torch.long, device=dev)
    tokens[:, 0] = BOS
    lengths = torch.ones(N, dtype=torch.long, device=dev)
    scores = torch.zeros(N, dtype=torch.float32, device=dev)
    accu = None
    words = torch.full((N,), BOS, dtype=torch.long, device=dev)
    active = torch.arange(N, device=dev)
    fill = torch.full((K,), -math.inf, device=dev)
    fill[0] = 0.0
    for idx in range(1, max_len):
        if active.numel() == 0:
            break
        A = active.numel() // K
        eos = words == EOS
        terminating = eos.view(A, K).all(dim=1)
        lengths[active[~eos]] += 1
        logp, attn, state = model.step(state, words)
        attn = attn.float().masked_fill(eos.unsqueeze(1), 0.0)
        if accu is None:
            accu = torch.zeros(N, attn.shape[1], device=dev)
        accu[active] += attn
        lp, w = logp.float().topk(K, dim=1)
        w = w.masked_fill(eos.unsqueeze(1), EOS)
        lp = torch.where(eos.unsqueeze(1), fill.expand_as(lp), lp)
        new = scores[active].view(A, K, 1) + lp.view(A, K, K)
        if idx == 1:
            new[:, 1:, :] = -math.inf
        best, index = new.view(A, K * K).topk(K, dim=1)
        src_rows = (index // K + torch.arange(A, device=dev).unsqueeze(1) * K).view(-1)
        scores[active] = best.view(-1)
        words = w.view(A, K * K).gather(1, index).view(-1)
        tokens[active] = tokens[active[src_rows]]
        tokens[active, idx] = words
        lengths[active] = lengths[active[src_rows]]
        state = model.select(state, src_rows)
        if bool(terminating.any()):
            done = active.view(A, K)[terminating].view(-1)
            norm = ((len_norm_const + lengths[done].float()) / (len_norm_const + 1.0)) ** len_norm_factor
            scores[done] /= norm
            pen = accu[done].clamp(0, 1).log()
            pen[pen == -math.inf] = 0
            scores[done] += cov_penalty * pen.sum(dim=-1)
            keep = (~terminating).repeat_interleave(K).nonzero().squeeze(1)
            active, words = active[keep], words[keep]
            state = model.select(state, keep)
    pick = scores.view(B, K).argmax(dim=1) + torch.arange(B, device=dev) * K
    return [_strip(row[1:]) for row in tokens[pick].tolist()]


@torch.no_grad()
def fairseq_search(model, src, beam: int, max_len: int, len_penalty: float) -> list[list[int]]:
    B, K, dev = src.shape[0], beam, src.device
    rep = torch.arange(B, device=dev).repeat_interleave(K)
    state = model.select(model.start(src), rep)
    finalized: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    sent = list(range(B))  # the sentence of each live group of K rows
    hist = torch.zeros((B * K, 0), dtype=torch.long, device=dev)
    scores = torch.zeros(B * K, device=dev)
    words = torch.full((B * K,), BOS, dtype=torch.long, device=dev)
    for step in range(max_len + 1):
        A = len(sent)
        logp, _, state = model.step(state, words)
        logp = logp.float()
        logp[:, PAD] = -math.inf
        logp[:, BOS] = -math.inf
        V = logp.shape[1]
        if step == max_len:  # finish every live beam with EOS, best first
            eos_scores = (scores + logp[:, EOS]).view(A, K)
            order = eos_scores.argsort(dim=1, descending=True, stable=True)
            for a in range(A):
                for j in order[a].tolist():
                    if len(finalized[sent[a]]) < K:
                        s = float(eos_scores[a, j]) / (step + 1) ** len_penalty
                        finalized[sent[a]].append((s, hist[a * K + j].tolist()))
            break
        if step == 0:
            cand = logp.view(A, K, V)[:, 0, :]
        else:
            cand = (logp + scores.unsqueeze(1)).view(A, K * V)
        cs, ci = cand.topk(2 * K, dim=1)
        cb, cw = ci // V, ci % V
        is_eos = cw == EOS
        done = []
        if step >= 1:  # EOS counts from the second word on, and only among the first K candidates
            for a, j in is_eos[:, :K].nonzero().tolist():
                fin = finalized[sent[a]]
                if len(fin) < K:
                    row = a * K + int(cb[a, j])
                    fin.append((float(cs[a, j]) / (step + 1) ** len_penalty, hist[row].tolist()))
            done = [a for a in range(A) if len(finalized[sent[a]]) == K]
        rank = is_eos.long() * (2 * K) + torch.arange(2 * K, device=dev)
        keep_pos = rank.topk(K, dim=1, largest=False).indices.sort(dim=1).values
        rows = (cb.gather(1, keep_pos) + torch.arange(A, device=dev).unsqueeze(1) * K).view(-1)
        words = cw.gather(1, keep_pos).view(-1)
        scores = cs.gather(1, keep_pos).view(-1)
        hist = torch.cat([hist[rows], words.unsqueeze(1)], dim=1)
        if done:
            live = [a for a in range(A) if a not in set(done)]
            if not live:
                break
            keep = torch.tensor([a * K + k for a in live for k in range(K)], device=dev)
            rows, words, scores, hist = rows[keep], words[keep], scores[keep], hist[keep]
            sent = [sent[a] for a in live]
        state = model.select(state, rows)
    out = []
    for fin in finalized:
        best = max(range(len(fin)), key=lambda i: (fin[i][0], -i))
        out.append(_strip(fin[best][1]))
    return out
