"""ncf: the reference's batch semantics, its HR@10 tie rule, its negative sampling."""

import pytest

torch = pytest.importorskip("torch")

from runner import workloads  # noqa: E402
from runner.workloads import ncf  # noqa: E402
from runner_helpers import mllog_events, runner, status  # noqa: E402


def reference_hits(scores: torch.Tensor, items: torch.Tensor, k: int = 10) -> torch.Tensor:
    """HR@k as NVIDIA's v0.5 val_epoch computes it, written out plainly.

    The positive sits in the last column; later duplicates of an item score -1;
    the hit is whether the first column holding the positive's item is among the
    top k of a top-k that keeps the lower column first among equal scores.
    """
    n, m = scores.shape
    s = scores.clone()
    for r in range(n):
        seen = set()
        for c in range(m):
            it = int(items[r, c])
            if it in seen:
                s[r, c] = -1
            seen.add(it)
    hits = []
    for r in range(n):
        first = next(c for c in range(m) if items[r, c] == items[r, -1])
        order = sorted(range(m), key=lambda c: (-float(s[r, c]), c))
        hits.append(first in order[:k])
    return torch.tensor(hits)


def ours(scores, items, k=10):
    """gpulab's layout: the positive in column 0, the negatives after it."""
    cand = torch.cat([items[:, -1:], items[:, :-1]], dim=1)
    sc = torch.cat([scores[:, -1:], scores[:, :-1]], dim=1)
    counts, before = ncf.ranking_masks(cand)
    return ncf.hits_at_k(sc[:, 0], sc[:, 1:], counts, before, k)


def test_hr_at_10_follows_the_reference_on_ties_and_duplicates():
    g = torch.Generator().manual_seed(5)
    n, negs = 400, 60
    items = torch.randint(0, 40, (n, negs + 1), generator=g)  # few items: duplicates, negatives equal to the positive
    # scores from a per-item value, coarse (bf16-like): many exact ties between distinct items
    value = (torch.rand(n, 40, generator=g) * 8).round() / 8
    scores = torch.gather(value, 1, items)
    assert bool(((scores[:, :-1] == scores[:, -1:]) & (items[:, :-1] != items[:, -1:])).any())
    expect = reference_hits(scores, items)
    got = ours(scores, items)
    assert torch.equal(got, expect)
    assert 0.1 < expect.float().mean() < 0.9  # the case is not trivial


def test_a_tie_with_a_negative_costs_the_positive_its_hit():
    pos = torch.tensor([0.5, 0.5])
    neg = torch.full((2, 20), 0.0)
    neg[0, :10] = 0.5  # ten negatives tie with the positive: rank 11, no hit
    neg[1, :9] = 0.5  # nine tie: rank 10, a hit
    ones = torch.ones_like(neg, dtype=torch.bool)
    assert ncf.hits_at_k(pos, neg, ones, ones).tolist() == [False, True]


def test_bf16_scores_would_inflate_hr_and_evaluation_ranks_in_fp32():
    """Why the evaluation runs without autocast: bf16 rounds close scores into ties."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2000, 100, generator=g) * 0.02 + 3.0  # close scores, as a trained model gives them
    counts = torch.ones(2000, 99, dtype=torch.bool)
    fp32 = ncf.hits_at_k(logits[:, 0], logits[:, 1:], counts, counts).float().mean()
    b = logits.bfloat16().float()
    credited = (((b[:, 1:] > b[:, :1]) & counts).sum(1) < 10).float().mean()  # ties credited to the positive
    assert credited > fp32 + 0.05
    cfg = workloads.load()["ncf"]["scales"]["tiny"]
    ctx = _ctx("tiny", precision="bf16")
    tr = ncf.build(ctx)
    # the evaluation gives the same HR@10 whatever the training precision: it never autocasts
    hr_bf16 = tr.evaluate(1)
    ctx.precision = "fp32"
    assert tr.evaluate(1) == hr_bf16
    assert cfg["eval_negatives"] == tr.test_cand.shape[1] - 1


def _ctx(scale, precision="fp32"):
    from runner.mllog import MLLog
    from runner.workloads import base

    entry = workloads.load()["ncf"]
    spec = {"workload": "ncf", "scale": scale, "mode": "ttt", "seed": 1}
    ctx = base.Context(
        spec=spec,
        entry=entry,
        log=MLLog(None),
        device=torch.device("cpu"),
        rank=0,
        world_size=1,
        local_rank=0,
        precision=precision,
    )
    return ctx


def test_training_negatives_are_never_an_item_of_the_user():
    tr = ncf.build(_ctx("tiny"))
    g = torch.Generator().manual_seed(3)
    users, items = tr.sample_negatives(g)
    assert users.numel() == tr.pos_u.numel() * tr.negatives
    pos = set(zip(tr.pos_u.tolist(), tr.pos_i.tolist()))
    assert not any((u, i) in pos for u, i in zip(users.tolist(), items.tolist()))
    # with replacement, over all items: each item is drawn, some pairs repeat
    assert len(set(items.tolist())) == tr.n_items


@pytest.mark.parametrize("scale", ["tiny", "small", "full"])
def test_the_catalogue_batch_is_global_at_every_scale(scale):
    cfg = workloads.load()["ncf"]["scales"][scale]
    assert cfg["batch_is_global"] is True
    if scale == "full":  # NVIDIA's v0.5 run_and_time.sh: -l 0.0045 -b 1048576 -b1 0.25 -b2 0.5 --eps 1e-8
        assert (cfg["batch_size"], cfg["lr"], cfg["beta1"], cfg["beta2"], cfg["eps"]) == (
            1048576,
            0.0045,
            0.25,
            0.5,
            1e-8,
        )
        assert (cfg["train_negatives"], cfg["eval_negatives"], cfg["target"]) == (4, 999, 0.635)
        assert (cfg["mf_dim"], cfg["layers"]) == (64, [256, 256, 128, 64])


def test_two_processes_split_the_global_batch(tmp_path):
    out = tmp_path / "run"
    r = runner(
        "run",
        "ncf",
        "--scale",
        "tiny",
        "--seed",
        "2",
        "--gpus",
        "0",
        "--cpu-procs",
        "2",
        "--max-epochs",
        "1",
        "--out",
        out,
        timeout=600,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert status(out)["world_size"] == 2
    ev = {e["key"]: e for e in mllog_events(out)}
    tiny = workloads.load()["ncf"]["scales"]["tiny"]
    assert ev["global_batch_size"]["value"] == tiny["batch_size"]  # 2 x 1024, not 2 x 2048
    assert ev["gpulab_batch_is_global"]["value"] is True
    assert ev["eval_hr_k"]["value"] == 10


def test_local_batch_is_the_floor_share_as_the_reference():
    tr = ncf.build(_ctx("tiny"))
    assert tr.batch == 2048
    assert tr.local_batch(1048576, 8) == 131072
    assert tr.local_batch(1048576, 3) == 349525
    with pytest.raises(ncf.WorkloadError, match="cannot be split over 4 processes"):
        tr.local_batch(3, 4)
