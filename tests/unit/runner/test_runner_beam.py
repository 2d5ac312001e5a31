"""Beam search and learning-rate schedules of gnmt and transformer against their v0.5 references."""

import itertools
import math

import pytest

torch = pytest.importorskip("torch")

from runner import workloads  # noqa: E402
from runner.workloads import beam_search as B  # noqa: E402
from runner.workloads import gnmt, transformer  # noqa: E402
from runner.workloads import schedules  # noqa: E402
from runner.workloads import translation as T  # noqa: E402

EN, DE = [4, 5, 6], [7, 8, 9]
LEX = {4: 8, 5: 9, 6: 7}


def _pairs():
    out = []
    for n in (1, 2, 3):
        for words in itertools.product(EN, repeat=n):
            out.append((list(words), [LEX[w] for w in words]))
    return out


def _frame(words, frame):
    return ([T.BOS] if frame[0] else []) + words + ([T.EOS] if frame[1] else [])


def _train(model, frame, steps=200):
    """A small trained model: word-by-word translation of 1-3 words, all 39 sentences, full batch."""
    pairs = _pairs()
    S = torch.zeros(len(pairs), 5, dtype=torch.long)
    TI = torch.zeros(len(pairs), 4, dtype=torch.long)
    TO = torch.zeros(len(pairs), 4, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        f = _frame(s, frame)
        S[i, : len(f)] = torch.tensor(f)
        TI[i, : len(t) + 1] = torch.tensor([T.BOS] + t)
        TO[i, : len(t) + 1] = torch.tensor(t + [T.EOS])
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    model.train()
    for _ in range(steps):
        loss, ntok = T.smoothed_loss(model(S, TI), TO, 0.0)
        opt.zero_grad()
        (loss / ntok).backward()
        opt.step()
    model.eval()
    return pairs


def _logprob(model, src, seqs):
    """log p(seq, EOS | src) of each sequence, by teacher forcing."""
    n = max(len(s) for s in seqs) + 1
    TI = torch.zeros(len(seqs), n, dtype=torch.long)
    TO = torch.zeros(len(seqs), n, dtype=torch.long)
    for i, s in enumerate(seqs):
        TI[i, : len(s) + 1] = torch.tensor([T.BOS] + list(s))
        TO[i, : len(s) + 1] = torch.tensor(list(s) + [T.EOS])
    with torch.no_grad():
        lp = torch.log_softmax(model(src.expand(len(seqs), -1), TI).float(), dim=-1)
    lens = torch.tensor([len(s) + 1 for s in seqs])
    real = torch.arange(n).unsqueeze(0) < lens.unsqueeze(1)  # PAD may be a chosen word: mask by length
    tok = lp.gather(2, TO.unsqueeze(2)).squeeze(2) * real
    return tok.sum(dim=1)


def _exhaustive(model, src, tokens, min_len, max_words, score):
    seqs = [s for n in range(min_len, max_words + 1) for s in itertools.product(tokens, repeat=n)]
    lp = _logprob(model, src, seqs)
    best = max(range(len(seqs)), key=lambda i: score(float(lp[i]), len(seqs[i])))
    return list(seqs[best])


def _src(words, frame):
    return torch.tensor([_frame(words, frame)])


def test_gnmt_beam_search_finds_the_exhaustive_optimum_of_the_references_score():
    torch.manual_seed(0)
    model = gnmt.GNMT(10, 12, layers=2, dropout=0.0, init="uniform")
    pairs = _train(model, (True, True), steps=400)
    every = [t for t in range(10) if t != T.EOS]  # the reference bans no token
    # ((5 + len) / 6) ** 0.6 with len counting BOS and EOS; coverage penalty off for a per-hypothesis score
    score = lambda lp, n: lp / ((5.0 + n + 2) / 6.0) ** 0.6  # noqa: E731
    right = 0
    for words, target in pairs:
        src = _src(words, (True, True))
        got = B.gnmt_search(model, src, beam=5, max_len=5, len_norm_factor=0.6, len_norm_const=5.0, cov_penalty=0.0)[0]
        assert got == _exhaustive(model, src, every, 0, 3, score), words
        right += got == target
    assert right >= 30  # the model did learn the task


def test_transformer_beam_search_finds_the_exhaustive_optimum_of_fairseqs_score():
    torch.manual_seed(0)
    model = transformer.Transformer(10, 16, 32, 2, 1, 0.0, max_pos=64)
    pairs = _train(model, (False, True))
    allowed = [t for t in range(10) if t not in (T.PAD, T.BOS, T.EOS)]
    score = lambda lp, n: lp / (n + 1) ** 1.0  # noqa: E731  fairseq: lenpen 1, length counts EOS
    right = 0
    for words, target in pairs:
        src = _src(words, (False, True))
        got = B.fairseq_search(model, src, beam=4, max_len=3, len_penalty=1.0)[0]
        assert got == _exhaustive(model, src, allowed, 1, 3, score), words
        right += got == target
    assert right >= 30


class _Fixed:
    """A 'model' whose next-word log probabilities depend only on the step: hand-checkable searches."""

    def __init__(self, table, attn=None):
        self.table, self.attn = table, attn

    def start(self, src):
        return {"t": torch.zeros(src.shape[0], dtype=torch.long)}

    def step(self, state, words):
        t = state["t"]
        lp = torch.stack([self.table[min(int(i), len(self.table) - 1)] for i in t])
        attn = self.attn(t) if self.attn else torch.full((len(t), 2), 0.5)
        return lp, attn, {"t": t + 1}

    @staticmethod
    def select(state, rows):
        return {"t": state["t"].index_select(0, rows)}


def _lp(probs):
    v = torch.full((10,), 1e-9)
    for k, p in probs.items():
        v[k] = p
    return (v / v.sum()).log()


def test_gnmt_length_normalization_prefers_the_longer_output_as_the_reference():
    # step 1: EOS 0.4, word 7 0.6; step 2: EOS 1.0. Raw: [EOS] log .4 = -0.92 beats [7] log .6 = -0.51? no:
    # [7, EOS] = log 0.6 = -0.511, [EOS] = log 0.4 = -0.916; normalised by ((5+L)/6)^0.6, L = 3 and 2
    table = [_lp({T.EOS: 0.4, 7: 0.6}), _lp({T.EOS: 1.0})]
    out = B.gnmt_search(
        _Fixed(table),
        torch.zeros(1, 2, dtype=torch.long),
        beam=2,
        max_len=5,
        len_norm_factor=0.6,
        len_norm_const=5.0,
        cov_penalty=0.0,
    )
    assert out == [[7]]
    # with a length penalty that punishes length hard enough the short one wins
    out = B.gnmt_search(
        _Fixed(table),
        torch.zeros(1, 2, dtype=torch.long),
        beam=2,
        max_len=5,
        len_norm_factor=-8.0,
        len_norm_const=5.0,
        cov_penalty=0.0,
    )
    assert math.log(0.6) / ((5 + 3) / 6) ** -8 < math.log(0.4) / ((5 + 2) / 6) ** -8
    assert out == [[]]


def test_fairseq_stops_once_beam_outputs_are_finished():
    # step 0: word 7 (0.5), word 8 (0.5); from step 1 on EOS 0.9: both finish at step 1, length 2
    table = [_lp({7: 0.5, 8: 0.5}), _lp({T.EOS: 0.9, 9: 0.1})]
    out = B.fairseq_search(_Fixed(table), torch.zeros(1, 2, dtype=torch.long), beam=2, max_len=10, len_penalty=1.0)
    assert out in ([[7]], [[8]])
    # stop early: EOS among the first `beam` candidates finishes a hypothesis; two finished end the search
    table = [_lp({7: 0.99, T.EOS: 0.01})]
    out = B.fairseq_search(_Fixed(table), torch.zeros(1, 2, dtype=torch.long), beam=2, max_len=4, len_penalty=1.0)
    assert out == [[7, 7]]  # [7] EOS: log(.99 * .01) / 2 = -2.31; [7, 7] EOS: log(.99^2 * .01) / 3 = -1.54
    # with one beam EOS is never among the first candidates: the max length forces it
    out = B.fairseq_search(_Fixed(table), torch.zeros(1, 2, dtype=torch.long), beam=1, max_len=4, len_penalty=1.0)
    assert out == [[7, 7, 7, 7]]


# --- learning-rate schedules at chosen steps, against the references' formulas -----------------


def test_gnmt_schedule_is_the_references_warmup_multistep_at_8_gpus():
    full = workloads.load()["gnmt"]["scales"]["full"]
    base = full["lr"]
    # NVIDIA's config_DGX1.sh: 8 GPUs x 128, WARMUP_ITERS 200, REMAIN_STEPS 6000, DECAY_STEPS 500
    assert T.scaled_steps(full["warmup_steps"], full, 1024, 3498161) == 200
    assert T.scaled_steps(full["remain_steps"], full, 1024, 3498161) == 6000
    assert T.scaled_steps(full["decay_interval"], full, 1024, 3498161) == 500

    def lr(n):
        return schedules.gnmt_lr(n, base, 200, 6000, 500, 4, 0.5)

    assert lr(1) == pytest.approx(base * 0.01 ** (199 / 200))  # seq2seq/train/lr_scheduler.py
    assert lr(100) == pytest.approx(base * 0.1)
    assert lr(200) == pytest.approx(base) and lr(5999) == base
    assert lr(6000) == base / 2 and lr(6499) == base / 2 and lr(6500) == base / 4
    assert lr(7500) == base / 16 and lr(50000) == base / 16


def test_gnmt_schedule_covers_the_same_share_of_the_data_at_any_gpu_count():
    full = workloads.load()["gnmt"]["scales"]["full"]
    for gpus, expect in ((1, (1600, 48000, 4000)), (2, (800, 24000, 2000)), (4, (400, 12000, 1000))):
        gb = 128 * gpus
        got = tuple(
            T.scaled_steps(full[k], full, gb, 3498161) for k in ("warmup_steps", "remain_steps", "decay_interval")
        )
        assert got == expect
        assert T.scaled_lr(full, gb) == 0.00125  # lr_scaling: none
    # a data set of another size moves the points in proportion
    assert T.scaled_steps(6000, full, 1024, 2 * 3498161) == 12000


def test_transformer_schedule_is_fairseqs_inverse_sqrt_from_zero():
    full = workloads.load()["transformer"]["scales"]["full"]
    base, warm = full["lr"], full["warmup_steps"]
    assert (base, warm, tuple(full["betas"]), full["eps"]) == (6.4e-4, 3000, (0.9, 0.997), 1e-9)
    assert schedules.rsqrt_lr(1, base, warm) == 0.0  # --warmup-init-lr 0: the first update runs at 0
    assert schedules.rsqrt_lr(1501, base, warm) == pytest.approx(base / 2)
    assert schedules.rsqrt_lr(3001, base, warm) == pytest.approx(base)
    assert schedules.rsqrt_lr(12001, base, warm) == pytest.approx(base / 2)


def test_the_trainer_runs_each_update_at_the_schedules_rate():
    from runner.mllog import MLLog
    from runner.workloads import base

    entry = workloads.load()["gnmt"]
    spec = {"workload": "gnmt", "scale": "tiny", "mode": "throughput", "seed": 1}
    ctx = base.Context(
        spec=spec,
        entry=entry,
        log=MLLog(None),
        device=torch.device("cpu"),
        rank=0,
        world_size=1,
        local_rank=0,
        precision="fp32",
    )
    tr = gnmt.build(ctx)
    seen = []
    for _ in range(12):
        seen.append(tr.optimizer.param_groups[0]["lr"])
        tr.throughput_step()
    assert seen == pytest.approx([tr.lr_at(n) for n in range(1, 13)])
    assert seen[0] == pytest.approx(tr.lr * 0.01 ** (9 / 10)) and seen[9] == pytest.approx(tr.lr)
