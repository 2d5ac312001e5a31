"""Mask R-CNN at full scale follows NVIDIA's v0.5 submission: anchors, proposals per batch,
bias learning rate and weight decay, the learning-rate schedule at any global batch, the MLLOG
keys, image sizes and batches. The reference's values are written out here with their source
(mlcommons/training_results_v0.5, v0.5.0/nvidia/submission/code/object_detection/pytorch/)."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from runner import workloads  # noqa: E402
from runner.workloads import maskrcnn as M  # noqa: E402
from runner.workloads import maskrcnn_data as data  # noqa: E402
from runner.workloads import maskrcnn_recipe as recipe  # noqa: E402
from runner_helpers import full_scale_trainer  # noqa: E402
from runner.workloads.maskrcnn_heads import Detector  # noqa: E402
from runner.workloads.maskrcnn_model import STRIDES, grid_anchors  # noqa: E402

# config_DGX1.sh, config_DGX2.sh, config_DGX1_multi.sh: global batch -> (BASE_LR, WARMUP_FACTOR, STEPS);
# WARMUP_ITERS 625 and WARMUP_METHOD mlperf_linear in all three
NVIDIA = {
    32: (0.04, 0.000064, [36000, 48000]),
    64: (0.08, 0.000128, [18000, 24000]),
    128: (0.16, 0.000256, [9000, 12000]),
}


def detectron_anchors(stride, size, ratios=(0.5, 1.0, 2.0)):
    """maskrcnn_benchmark/modeling/anchor_generator.py: generate_anchors(stride, (size,), ratios),
    written out: a (0, 0, stride-1, stride-1) window, ratio enumeration with np.round, then the
    scale enumeration by size / stride, as inclusive x1, y1, x2, y2."""

    def whctrs(a):
        w, h = a[2] - a[0] + 1, a[3] - a[1] + 1
        return w, h, a[0] + 0.5 * (w - 1), a[1] + 0.5 * (h - 1)

    def mk(ws, hs, xc, yc):
        return np.stack([xc - 0.5 * (ws - 1), yc - 0.5 * (hs - 1), xc + 0.5 * (ws - 1), yc + 0.5 * (hs - 1)], 1)

    w, h, xc, yc = whctrs(np.array([1, 1, stride, stride], float) - 1)
    ws = np.round(np.sqrt(w * h / np.array(ratios)))
    hs = np.round(ws * np.array(ratios))
    out = []
    for a in mk(ws, hs, xc, yc):
        w, h, xc, yc = whctrs(a)
        out.append(mk(np.array([w * size / stride]), np.array([h * size / stride]), xc, yc))
    return np.concatenate(out)


def test_anchors_equal_the_reference_formula_at_every_level():
    feat = [(200, 336), (100, 168), (50, 84), (25, 42), (13, 21)]  # an 800 x 1344 batch
    sizes = (32, 64, 128, 256, 512)
    got = grid_anchors(feat, sizes, (0.5, 1.0, 2.0), "cpu")
    for (h, w), size, stride, a in zip(feat, sizes, STRIDES, got):
        cell = detectron_anchors(stride, size)
        sx, sy = np.meshgrid(np.arange(w) * stride, np.arange(h) * stride)  # location-major, ratio-minor
        shifts = np.stack([sx.ravel(), sy.ravel(), sx.ravel(), sy.ravel()], 1)
        want = (shifts[:, None, :] + cell[None]).reshape(-1, 4)
        inclusive = a.double().numpy() - [0, 0, 1, 1]
        assert np.array_equal(inclusive, want), (stride, np.abs(inclusive - want).max())
    # a value known from Detectron: stride 16, size 128, ratio 1 -> (-56, -56, 71, 71)
    assert detectron_anchors(16, 128)[1].tolist() == [-56, -56, 71, 71]
    assert sum(len(a) for a in got) == 3 * sum(h * w for h, w in feat)


def full_trainer(world_size: int, batch: int):
    return full_scale_trainer("maskrcnn", M.build, world_size, batch)


@pytest.fixture(scope="module")
def trainers():
    return {gbs: full_trainer(gbs // 2, 2) for gbs in NVIDIA}


def test_the_schedule_is_nvidias_at_every_global_batch(trainers):
    for gbs, (base, factor, steps) in NVIDIA.items():
        t = trainers[gbs]
        hp = t.hyperparameters()
        assert hp["global_batch_size"] == gbs and hp["opt_base_learning_rate"] == pytest.approx(base, abs=1e-12)
        assert hp["opt_learning_rate_warmup_steps"] == 625
        assert hp["opt_learning_rate_warmup_factor"] == pytest.approx(factor, abs=1e-15)
        assert hp["opt_learning_rate_decay_steps"] == steps and hp["opt_learning_rate_decay_factor"] == 0.1


def reference_lr(last_epoch, base_lr, warmup_factor, milestones, warmup_iters=625, gamma=0.1):
    """utils/lr_scheduler.py WarmupMultiStepLR.get_lr for one group (mlperf_linear). Iteration i of
    train_one_epoch runs at last_epoch = i: scheduler.step() comes first in each iteration and the
    torch of the submission (1.0) leaves last_epoch at -1 after constructing the scheduler."""
    if last_epoch < warmup_iters:
        delta = (warmup_iters - last_epoch) * warmup_factor
        return (base_lr - delta) * gamma ** bisect_right(milestones, last_epoch)
    return base_lr * gamma ** bisect_right(milestones, last_epoch)


@pytest.mark.parametrize("gbs", sorted(NVIDIA))
def test_every_group_rate_equals_the_reference_at_chosen_steps(trainers, gbs):
    base, factor, steps = NVIDIA[gbs]
    t = trainers[gbs]
    plain, bias = t.optimizer.param_groups
    for step in (0, 1, 100, 312, 624, 625, 626, steps[0] - 1, steps[0], steps[1] - 1, steps[1], 90000):
        recipe.set_lr(t.optimizer, step, t.lr, t.warmup, t.boundaries, t.ctx.cfg)
        assert plain["lr"] == pytest.approx(reference_lr(step, base, factor, steps), rel=1e-9, abs=1e-15), step
        # SOLVER.BIAS_LR_FACTOR 2: the bias group's own base is 2 x base, its warm-up starts at base
        assert bias["lr"] == pytest.approx(reference_lr(step, 2 * base, factor, steps), rel=1e-9, abs=1e-15), step
    recipe.set_lr(t.optimizer, 0, t.lr, t.warmup, t.boundaries, t.ctx.cfg)
    assert plain["lr"] == 0.0 and bias["lr"] == pytest.approx(base)


def test_biases_get_twice_the_rate_and_no_weight_decay(trainers):
    t = trainers[32]
    named = dict(t.model.named_parameters())
    plain, bias = t.optimizer.param_groups
    ids = {id(p): n for n, p in named.items()}
    assert {ids[id(p)] for p in bias["params"]} == {n for n, p in named.items() if "bias" in n and p.requires_grad}
    assert all("bias" not in ids[id(p)] for p in plain["params"])
    assert plain["weight_decay"] == 1e-4 and bias["weight_decay"] == 0.0
    assert bias["base_lr"] == 2 * plain["base_lr"]
    # frozen: the stem and the first stage (FREEZE_CONV_BODY_AT 2); the norms hold no parameters
    frozen = {n for n, p in named.items() if not p.requires_grad}
    assert frozen == {n for n in named if n.startswith(("backbone.conv1.", "backbone.layer1."))}
    assert not any(".bn" in n or "downsample.1" in n for n in named)
    assert len(bias["params"]) == 4 + 4 + 3 + 4 + 4 + 2  # FPN 4+4, RPN 3, box head 4, mask convs 4, up + logits 2


def test_mllog_keys_carry_the_recipe(trainers):
    hp = trainers[32].hyperparameters()
    assert hp["opt_name"] == "sgd" and hp["opt_momentum"] == 0.9 and hp["opt_weight_decay"] == 1e-4
    assert hp["opt_bias_learning_rate_factor"] == 2 and hp["opt_weight_decay_bias"] == 0.0
    assert hp["opt_learning_rate_warmup_method"] == "mlperf_linear"
    assert hp["num_image_candidates"] == 2000  # FPN_POST_NMS_TOP_N_TRAIN at 2 images per GPU
    assert hp["rpn_pre_nms_top_n_train"] == 2000 and hp["rpn_post_nms_top_n_test"] == 1000
    assert (hp["min_image_size"], hp["max_image_size"]) == (800, 1333)
    assert full_trainer(8, 4).hyperparameters()["num_image_candidates"] == 4000  # config_DGX1.sh at 4 per GPU


def test_training_proposals_are_the_best_of_the_whole_batch():
    t = full_trainer(1, 2)
    det = t.det
    # 2 images, one level: 40 disjoint boxes each (NMS keeps them all); image 0 scores above image 1
    xs = torch.arange(40, dtype=torch.float32) * 20
    anchors = [torch.stack([xs, torch.zeros(40), xs + 10, torch.full((40,), 10.0)], 1)]
    logits = [torch.stack([torch.linspace(5, 4, 40), torch.linspace(3, 2, 40)])]
    deltas = [torch.zeros(2, 40, 4)]
    sizes = torch.tensor([[100.0, 1000.0], [100.0, 1000.0]])
    det.cfg = dict(det.cfg, pre_nms_top=40, rpn_post_nms_top_n_train=15, rpn_post_nms_top_n_test=15)
    train = det.proposals(anchors, logits, deltas, sizes, True)
    assert [len(p) for p in train] == [30, 0]  # 15 x 2 images, all from the confident image
    test = det.proposals(anchors, logits, deltas, sizes, False)
    assert [len(p) for p in test] == [15, 15]  # per image in evaluation
    assert torch.equal(train[0][:15], test[0])


def test_images_are_resized_as_the_reference_computes_the_size():
    # Resize(800, 1333).get_size: shorter side 800; when the longer would pass 1333, the size is
    # round(1333 * short / long) and the longer side int(size * long / short)
    assert data.reference_size(480, 640, 800, 1333) == (800, 1066)
    assert data.reference_size(427, 640, 800, 1333) == (800, 1199)
    assert data.reference_size(640, 480, 800, 1333) == (1066, 800)
    assert data.reference_size(200, 1000, 800, 1333) == (267, 1335)  # int(267 * 5): past 1333 as in the reference
    assert data.reference_size(800, 1000, 800, 1333) == (800, 1000)  # already right: unchanged


def test_boxes_are_scaled_on_inclusive_coordinates_as_the_reference():
    # BoxList.resize scales (x1, y1, x2 - 1, y2 - 1); here boxes are held with x2 = x + w
    b = np.array([[10.0, 20.0, 30.0, 60.0]], np.float32)
    assert data.scale_boxes(b, 2.0, 0.5).tolist() == [[20.0, 10.0, 59.0, 30.5]]


def test_batches_hold_one_orientation_and_every_process_takes_as_many():
    rng = np.random.default_rng(0)
    portrait = rng.uniform(size=1003) < 0.3
    per_rank = [data.grouped_batches(portrait, 4, seed=7, epoch=2, rank=r, world=3) for r in range(3)]
    assert len({len(b) for b in per_rank}) == 1 and len(per_rank[0]) > 70
    seen = [i for b in per_rank for batch in b for i in batch]
    assert len(seen) == len(set(seen)) and len(seen) > 1003 - 3 * 4 - 2 * 4
    assert all(len(batch) == 4 and len({bool(portrait[i]) for i in batch}) == 1 for b in per_rank for batch in b)
    assert data.grouped_batches(portrait, 4, 7, 3, 0, 3) != per_rank[0]  # a new order each epoch


def test_the_backbone_follows_msra_resnet_v1_and_frozen_affine_norms(trainers):
    trunk = trainers[32].model.backbone
    assert trunk.layer2[0].conv1.stride == (2, 2) and trunk.layer2[0].conv2.stride == (1, 1)
    assert trunk.layer1[0].bn1.eps == 0.0 and trunk.layer1[0].bn1.__class__.__name__ == "FrozenBatchNorm2d"
    assert isinstance(trainers[32].det, Detector)


def test_test_scales_stop_the_linear_rate_at_max_lr_and_full_scale_does_not():
    from runner.workloads import maskrcnn_recipe as R

    scales = workloads.load()["maskrcnn"]["scales"]
    tiny, small, full = scales["tiny"], scales["small"], scales["full"]
    assert R.base_lr(tiny, 8) == 0.02 and R.base_lr(tiny, 4) == 0.01  # one process (8), half a batch
    assert R.base_lr(tiny, 16) == 0.02 and R.base_lr(tiny, 64) == 0.02  # two and eight processes
    assert R.base_lr(small, 16) == 0.02 and R.base_lr(small, 32) == 0.02
    assert "max_lr" not in full and R.base_lr(full, 128) == 0.16  # the reference's linear rule
