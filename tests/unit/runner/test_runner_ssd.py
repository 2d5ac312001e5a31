"""SSD (runner/workloads/ssd.py): every scale's geometry, the small model's training step."""

import copy
from pathlib import Path

import pytest
import torch

from runner.workloads import load
from runner.workloads import ssd as S
from runner.workloads import schedules
from runner.workloads.base import WorkloadError

SCALES = load()["ssd"]["scales"]


@pytest.mark.parametrize("scale", ["tiny", "small", "full"])
def test_feature_sizes_are_the_model_s_feature_maps(scale):
    cfg = SCALES[scale]
    model = S.SSD(cfg, cfg["classes"] + 1).eval()
    with torch.no_grad():
        got = [f.shape[-1] for f in model.features(torch.zeros(1, 3, cfg["image_size"], cfg["image_size"]))]
    assert got == S.feature_sizes(cfg)
    assert got[-1] == 1 and len(got) == len(cfg["aspect_ratios"]) == len(cfg["scales"]) - 1
    if scale == "full":
        assert got == [38, 19, 10, 5, 3, 1]


def test_a_map_too_small_for_an_extra_block_is_named_before_any_convolution():
    cfg = copy.deepcopy(SCALES["small"])
    cfg["extras"][-1] = [32, 64, 1, 0]  # 12, 6, 3, 2, then a 3x3 without padding on 2x2
    with pytest.raises(WorkloadError, match=r"extra block 4 gets a 2x2 map.*image_size 96"):
        S.feature_sizes(cfg)


def test_the_small_model_trains_one_step_with_finite_gradients_everywhere():
    cfg = SCALES["small"]
    torch.manual_seed(0)
    model = S.SSD(cfg, cfg["classes"] + 1).train()
    anchors = S.default_boxes(cfg["image_size"], S.feature_sizes(cfg), cfg["scales"], cfg["aspect_ratios"])
    boxes = torch.tensor([[[0.1, 0.1, 0.5, 0.6], [0.55, 0.2, 0.95, 0.7]], [[0.3, 0.3, 0.6, 0.5], [0.0, 0.0, 0.0, 0.0]]])
    labels = torch.tensor([[1, 4], [2, -1]])
    gloc, glab = S.match(anchors, boxes, labels)
    assert (glab > 0).sum() >= 3
    x = torch.randn(2, 3, cfg["image_size"], cfg["image_size"])
    ploc, pconf = model(x)
    assert ploc.shape == (2, anchors.shape[0], 4) and pconf.shape == (2, anchors.shape[0], cfg["classes"] + 1)
    loss = S.SSDLoss(model)(x, gloc, glab)
    loss.backward()
    assert torch.isfinite(loss) and loss > 0
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.backbone.conv1.weight.grad.abs().sum() > 0


# --- the recipe of the MLPerf v0.5 reference (full scale) ------------------------------------


def _full_boxes():
    cfg = SCALES["full"]
    return S.default_boxes(300, S.feature_sizes(cfg), cfg["scales"], cfg["aspect_ratios"], cfg["steps"])


def test_full_scale_has_the_reference_s_8732_default_boxes():
    cfg = SCALES["full"]
    # 38^2 x 4 + 19^2 x 6 + 10^2 x 6 + 5^2 x 6 + 3^2 x 4 + 1 x 4
    assert _full_boxes().shape == (8732, 4)
    assert [2 + 2 * len(a) for a in cfg["aspect_ratios"]] == [4, 6, 6, 6, 4, 4]


# (index, xyxy) worked out by hand from the reference's formula: level k's centres are
# (j + 0.5) * step_k / 300 with steps 8, 16, 32, 64, 100, 300, sizes s_k = scales[k] / 300,
# sqrt(s_k s_k+1), s_k sqrt(a) x s_k / sqrt(a) and its transpose; centre and size clamped
# to [0, 1], not the corners. Index = level offset + (i * side + j) * shapes + shape.
HAND = [
    (0, (1 / 75 - 0.035, 1 / 75 - 0.035, 1 / 75 + 0.035, 1 / 75 + 0.035)),  # 38x38, (0, 0), s=0.07
    (5773, (1 - 0.0512348, 1 - 0.0512348, 1.0512348, 1.0512348)),  # (37, 37): centre 37.5*8/300 = 1.0, sqrt(21*45)/300
    (6117, (0.9433654, 0.0034295, 1.0299680, 0.2632371)),  # 19x19, (2, 18), 0.15/sqrt3 x 0.15*sqrt3
    (8536, (0.835, 0.835, 1.165, 1.165)),  # 10x10, (9, 9): centre 9.5*32/300 = 1.0133 clamped to 1, s=0.33
    (8727, (0.5893815, 0.3454296, 1.0772852, 1.3212370)),  # 3x3, (2, 2), 0.69/sqrt2 x 0.69*sqrt2
    (8730, (0.0, 0.1924086, 1.0, 0.8075914)),  # 1x1: width 0.87*sqrt2 = 1.23 clamped to 1
]


@pytest.mark.parametrize("index,xyxy", HAND)
def test_full_scale_default_boxes_equal_the_reference_formula_worked_by_hand(index, xyxy):
    assert _full_boxes()[index].tolist() == pytest.approx(xyxy, abs=2e-6)


def test_full_scale_default_box_centres_and_sizes_stay_in_the_unit_square():
    b = _full_boxes().double()
    c, wh = (b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2]
    assert c.min() > 0 and c.max() == pytest.approx(1.0) and wh.max() == pytest.approx(1.0)
    assert b.min() < 0 and b.max() > 1  # the corners are not clamped
    # the 38x38 level spreads its centres over 37.5 cells: the last centre is 1.0, not 37.5/38
    last = b[(37 * 38 + 37) * 4]
    assert float((last[0] + last[2]) / 2) == pytest.approx(1.0)


def test_the_reference_learning_rate_and_decay_steps():
    cfg = SCALES["full"]
    # the reference's DGX-1 run: 8 x 152 images, lr 2.5e-3 per 32 -> 95 x 1e-3
    assert S.base_lr(cfg["lr_per_32"], 1216) == pytest.approx(0.095)
    assert S.base_lr(cfg["lr_per_32"], 32) == pytest.approx(0.002)  # round(2.5) = 2, as Python rounds
    assert S.base_lr(cfg["lr_per_32"], 8) == pytest.approx(0.001)  # at least 1e-3
    # x0.1 at 160k and 200k steps of 32 images: (160000 * 32) // 1216, (200000 * 32) // 1216
    assert S.decay_boundaries(cfg, 1216, 96) == [4210, 5263]
    assert S.decay_boundaries(SCALES["tiny"], 32, 24) == [15 * 24, 20 * 24]
    # warm-up linear from 0 over 300 steps
    assert cfg["warmup_factor"] == 0 and cfg["warmup_steps"] == 300
    assert schedules.warmup_step_lr(150, 300, 0.0, 0.095, [4210, 5263], 0.1) == pytest.approx(0.0475)
    assert schedules.warmup_step_lr(4209, 300, 0.0, 0.095, [4210, 5263], 0.1) == pytest.approx(0.095)
    assert schedules.warmup_step_lr(4210, 300, 0.0, 0.095, [4210, 5263], 0.1) == pytest.approx(0.0095)
    assert schedules.warmup_step_lr(5263, 300, 0.0, 0.095, [4210, 5263], 0.1) == pytest.approx(0.00095)


def test_extra_blocks_are_biased_convolutions_without_batch_norm():
    cfg = SCALES["full"]
    model = S.SSD(cfg, cfg["classes"] + 1)
    kinds = [type(m).__name__ for m in model.extras[0]]
    assert kinds == ["Conv2d", "ReLU", "Conv2d", "ReLU"]
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.extras.modules())
    assert all(m.bias is not None for m in model.extras.modules() if isinstance(m, torch.nn.Conv2d))
    assert [e[2].out_channels for e in model.extras] == [512, 512, 256, 256, 256]


def test_match_assigns_iou_above_one_half_and_every_object_s_best_box():
    anchors = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.5, 1.0], [0.5, 0.5, 1.0, 1.0], [0.6, 0.0, 1.0, 0.2]])
    boxes = torch.tensor([[[0.0, 0.0, 0.5, 0.75], [0.75, 0.75, 1.0, 1.0]]])
    labels = torch.tensor([[3, 2]])
    gloc, lab = S.match(anchors, boxes, labels)
    # IoU of object 1 with anchors 0, 1: 2/3 and 3/4 (> 0.5); object 2's best anchor (IoU 1/4) is forced
    assert lab.tolist() == [[3, 3, 2, 0]]
    exact = torch.tensor([[[0.0, 0.0, 0.5, 0.5]]])
    assert S.match(anchors[:1], torch.tensor([[[0.0, 0.0, 0.5, 1.0]]]), torch.tensor([[1]]))[1].tolist() == [[1]]
    # an IoU of exactly 0.5 is not a match unless it is the object's best box
    two = torch.cat([anchors[:1], torch.tensor([[0.0, 0.0, 0.25, 0.5]])])
    assert S.match(two, exact, torch.tensor([[1]]))[1].tolist() == [[1, 0]]


def test_the_crop_keeps_boxes_whose_centre_is_inside_and_respects_the_drawn_minimum_iou():
    from PIL import Image
    import numpy as np

    img = Image.new("RGB", (200, 100))
    boxes = np.array([[0.1, 0.1, 0.3, 0.4], [0.6, 0.5, 0.9, 0.9], [0.4, 0.2, 0.55, 0.8]], np.float32)
    labels = np.array([1, 2, 3])
    kinds = set()
    for seed in range(200):
        out, b, lab = S.ssd_crop(np.random.default_rng(seed), img, boxes.copy(), labels)
        if out.size == img.size:
            assert (b == boxes).all() and (lab == labels).all()
            kinds.add("whole")
            continue
        kinds.add("crop")
        w, h = out.size
        assert 60 <= w <= 200 and 30 <= h <= 100 and len(lab) >= 1
        assert b.min() >= 0 and b.max() <= 1 and (b[:, 2:] >= b[:, :2]).all()
    assert kinds == {"whole", "crop"}


def test_color_jitter_factors_act_as_named():
    torch.manual_seed(0)
    x = torch.rand(4, 3, 8, 8) * 200 + 20
    mid = torch.full((4, 4), 0.5)  # all factors 1, hue 0: unchanged
    assert torch.allclose(S.color_jitter(x, mid, 0.125, 0.5, 0.5, 0.05), x, atol=1e-3)
    u = mid.clone()
    u[:, 0] = 1.0  # brightness x1.125
    assert torch.allclose(S.color_jitter(x, u, 0.125, 0.5, 0.5, 0.05), (x * 1.125).clamp(0, 255), atol=1e-3)
    u = mid.clone()
    u[:, 2] = 0.0  # saturation x0.5: half way to grey
    g = (x * torch.tensor(S.GRAY).view(1, 3, 1, 1)).sum(1, keepdim=True)
    assert torch.allclose(S.color_jitter(x, u, 0.125, 0.5, 0.5, 0.05), (x + g) / 2, atol=1e-3)
    u = mid.clone()
    u[:, 3] = 1.0  # hue: the grey level (Y) stays, the colour turns
    y = S.color_jitter(x, u, 0.125, 0.5, 0.5, 0.05)
    grey = torch.full((1, 3, 4, 4), 120.0)
    assert torch.allclose(S.color_jitter(grey, u[:1], 0.125, 0.5, 0.5, 0.05), grey, atol=1e-3)
    assert not torch.allclose(y, x, atol=1.0)


def test_the_loss_takes_three_hard_negatives_per_positive_by_cross_entropy():
    import math

    # one image, 6 boxes, box 0 positive (class 1); boxes 1..5 background
    pconf = torch.tensor([[[0.0, 2.0], [0.0, 1.0], [0.0, 3.0], [0.0, -1.0], [0.0, 2.5], [0.0, 0.5]]])
    glab = torch.tensor([[1, 0, 0, 0, 0, 0]])
    ploc = torch.zeros(1, 6, 4)
    gloc = torch.zeros(1, 6, 4)
    gloc[0, 0] = torch.tensor([0.5, -2.0, 0.0, 0.25])
    loss, neg = S.ssd_loss(ploc, pconf, gloc, glab)
    assert neg.tolist() == [[False, True, True, False, True, False]]  # the 3 highest background CE: 2, 4, 1

    def ce(z, k):  # logits (0, z)
        return math.log(1 + math.exp(z)) - (z if k == 1 else 0.0)

    sl1 = 0.5 * 0.5**2 + (2.0 - 0.5) + 0.0 + 0.5 * 0.25**2
    want = sl1 + ce(2.0, 1) + ce(1.0, 0) + ce(3.0, 0) + ce(2.5, 0)
    assert loss.item() == pytest.approx(want, rel=1e-6)
    # an image without positives adds 0 to the mean
    loss2, _ = S.ssd_loss(
        torch.zeros(2, 6, 4),
        pconf.repeat(2, 1, 1),
        gloc.repeat(2, 1, 1),
        torch.stack([glab[0], torch.zeros(6, dtype=torch.long)]),
    )
    assert loss2.item() == pytest.approx(want / 2, rel=1e-6)


# --- benchmarks/ssd_bf16.py: the bf16 study of runner/README "ssd under bf16" -----------------


def test_the_bf16_study_runs_every_case_and_its_fp32_floor_is_exact(tmp_path, capsys):
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import ssd_bf16

    out = tmp_path / "bf16.json"
    assert ssd_bf16.main(["--scale", "tiny", "--batch", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    cases = res["cases"]
    assert list(cases) == [
        "fp32_repeat",
        "bf16",
        "bf16_fp32_negatives",
        "fp32_input_noise",
        "fp32_input_noise_fp32_negatives",
        "bf16_channels_last_vs_bf16",
    ]
    assert cases["fp32_repeat"]["lowest"]["cosine"] >= 0.999999 and cases["fp32_repeat"]["negatives_differ"] == 0
    assert cases["bf16_fp32_negatives"]["negatives_differ"] == 0 and cases["bf16"]["compared"] > 20
    assert cases["bf16"]["lowest"]["cosine"] < 0.999999  # bf16 does move the gradient
    from runner.workloads import cpucaps

    why = cpucaps.bf16_channels_last_crash()  # AVX-512 oneDNN: that pass would kill the process
    if why:
        assert cases["bf16_channels_last_vs_bf16"] == {"skipped": why}
    else:
        assert cases["bf16_channels_last_vs_bf16"]["compared"] == cases["bf16"]["compared"]
    assert "fp32_repeat" in capsys.readouterr().out
    assert ssd_bf16.main(["--batch", "0"]) == 2
    assert "--batch must be at least 1" in capsys.readouterr().err


def test_full_scale_evaluates_in_the_epochs_of_the_reference_s_evaluation_steps():
    import math

    # the reference evaluates after 120k, 160k, 180k, 200k, 220k and 240k steps of 32 images;
    # COCO 2017 train has 117,266 images with annotations
    want = [math.ceil(k * 1000 * 32 / 117266) for k in (120, 160, 180, 200, 220, 240)]
    assert SCALES["full"]["eval_epochs"] == want == [33, 44, 50, 55, 61, 66]


def test_coco_training_items_are_cropped_flipped_resized_with_crowd_boxes_kept(tmp_path):
    import json

    import numpy as np
    from PIL import Image

    from runner.workloads import detection as D

    (tmp_path / "annotations").mkdir()
    (tmp_path / "train2017").mkdir()
    images, anns = [], []
    for i in range(3):
        Image.new("RGB", (160 + 40 * i, 120), (30 * i, 90, 200)).save(tmp_path / "train2017" / f"{i}.jpg")
        images.append({"id": i + 1, "file_name": f"{i}.jpg", "width": 160 + 40 * i, "height": 120})
    anns = [
        {"id": 1, "image_id": 1, "category_id": 3, "bbox": [10, 20, 60, 50], "iscrowd": 0},
        {"id": 2, "image_id": 1, "category_id": 7, "bbox": [90, 30, 50, 80], "iscrowd": 1},
        {"id": 3, "image_id": 2, "category_id": 7, "bbox": [0, 0, 150, 100], "iscrowd": 1},
    ]
    doc = {"images": images, "annotations": anns, "categories": [{"id": 3, "name": "a"}, {"id": 7, "name": "b"}]}
    (tmp_path / "annotations" / "instances_train2017.json").write_text(json.dumps(doc))
    index = D.CocoIndex(tmp_path, "train")
    ids = [i for i in index.ids if index.all_anns[i]]
    assert ids == [1, 2]  # image 3 has no annotation; image 2's only box is a crowd box, trained
    seen = set()
    for epoch in range(12):
        ds = S.CocoTrain(index, ids, 48, 1, seed=3)
        ds.epoch = epoch
        for k in range(len(ds)):
            img, t = ds[k]
            assert img.shape == (48, 48, 3) and img.dtype == torch.uint8
            b, lab = t["boxes"], t["labels"]
            assert b.shape == (len(lab), 4) and len(lab) >= 1 and set(lab.tolist()) <= {1, 2}
            assert b.min() >= 0 and b.max() <= 48 + 1e-4 and (b[:, 2:] >= b[:, :2]).all()
            seen.add((k, len(lab), tuple(np.round(b[0], 1))))
    assert len(seen) > 4  # crops and flips vary with the epoch


def test_the_full_scale_trainer_logs_the_recipe_as_mllog_hyperparameters():
    from runner.workloads.base import bench_context

    ctx, mod = bench_context("ssd", "cpu", False, scale="full", precision="fp32", batch_size=152)
    tr = mod.build(ctx)
    hp = tr.hyperparameters()
    assert hp["global_batch_size"] == 152 and hp["opt_base_learning_rate"] == pytest.approx(0.012)  # round(11.875)
    assert hp["opt_weight_decay"] == 5e-4 and hp["opt_momentum"] == 0.9
    assert hp["opt_learning_rate_warmup_steps"] == 300 and hp["opt_learning_rate_warmup_factor"] == 0
    assert hp["opt_learning_rate_decay_boundary_steps"] == [5120000 // 152, 6400000 // 152]
    assert hp["num_default_boxes"] == 8732 and hp["max_samples"] == 1
    assert hp["color_jitter_hue"] == 0.05 and hp["color_jitter_saturation"] == 0.5
    groups = tr.optimizer.param_groups  # weight decay on every parameter, BN and biases included
    assert len(groups) == 1 and groups[0]["weight_decay"] == 5e-4
    assert sum(p.numel() for p in groups[0]["params"]) == sum(p.numel() for p in tr.model.parameters())
