"""SSD (runner/workloads/ssd.py): every scale's geometry, the small model's training step."""

import copy

import pytest
import torch

from runner.workloads import load
from runner.workloads import ssd as S
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
    boxes = torch.tensor([[[0.1, 0.1, 0.5, 0.6], [0.55, 0.2, 0.95, 0.7]],
                          [[0.3, 0.3, 0.6, 0.5], [0.0, 0.0, 0.0, 0.0]]])
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
