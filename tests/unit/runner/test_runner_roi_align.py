"""Mask R-CNN's multilevel RoIAlign (row gathers) against RoIAlign by grid_sample on each level."""

import math

import pytest

torch = pytest.importorskip("torch")

from runner.workloads import detection as D  # noqa: E402

STRIDES = [4, 8, 16, 32]


def per_level_reference(feats, rois, out_size, sampling):
    """Every level sampled with grid_sample, each box's own level kept (what the gathers replace)."""
    kmin = int(round(math.log2(STRIDES[0])))
    lv = D.fpn_levels(rois, kmin, kmin + len(feats) - 1)
    out = 0
    for i, (f, st) in enumerate(zip(feats, STRIDES)):
        o = D.roi_align(f, rois, out_size, 1.0 / st, sampling)
        out = out + o * (lv == kmin + i).to(o.dtype)[..., None, None, None]
    return out


def boxes(n, k, h, w, g):
    """Boxes of every FPN level, some reaching past the image edge (zero padding there)."""
    side = torch.exp(torch.empty(n, k, 1).uniform_(math.log(6), math.log(700), generator=g))
    aspect = torch.exp(torch.empty(n, k, 1).uniform_(-0.7, 0.7, generator=g))
    wh = torch.cat([side * aspect, side / aspect], -1)
    c = torch.rand(n, k, 2, generator=g) * torch.tensor([w * 4.0 + 40, h * 4.0 + 40]) - 20
    return torch.cat([c - wh / 2, c + wh / 2], -1)


@pytest.mark.parametrize("out_size, sampling", [(7, 2), (14, 2), (5, 1)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_gathers_match_grid_sample_values_and_gradients(out_size, sampling, channels_last):
    g = torch.Generator().manual_seed(3)
    n, c, h, w = 2, 6, 48, 80
    feats = [torch.randn(n, c, h // (s // 4), w // (s // 4), generator=g) for s in STRIDES]
    if channels_last:
        feats = [f.contiguous(memory_format=torch.channels_last) for f in feats]
    feats = [f.requires_grad_() for f in feats]
    rois = boxes(n, 60, h, w, g)
    lv = D.fpn_levels(rois, 2, 5)
    assert set(lv.flatten().tolist()) == {2, 3, 4, 5}  # the test reaches every level

    ref = per_level_reference(feats, rois, out_size, sampling)
    out = D.multilevel_roi_align(feats, rois, out_size, STRIDES, sampling)
    assert out.shape == (n, 60, c, out_size, out_size)
    assert torch.allclose(out, ref, atol=5e-5), (out - ref).abs().max()

    upstream = torch.randn(out.shape, generator=g)
    g_ref = torch.autograd.grad((ref * upstream).sum(), feats)
    g_out = torch.autograd.grad((out * upstream).sum(), feats)
    for level, (a, b) in enumerate(zip(g_out, g_ref)):
        assert b.abs().sum() > 0, level  # every level receives gradient
        assert torch.allclose(a, b, atol=1e-4), (level, (a - b).abs().max())


def test_coordinates_stay_float32_for_bf16_maps():
    """Sample positions are float32 even on bf16 maps (bf16 holds 300.25 as 300)."""
    n, c, h, w = 1, 1, 40, 400
    spike = torch.zeros(n, c, h, w)
    spike[..., 300] = 1.0  # one bright column on the stride-4 map
    feats = [spike.to(torch.bfloat16)] + [torch.zeros(n, c, h // m, w // m, dtype=torch.bfloat16) for m in (2, 4, 8)]
    # a 1-pixel-wide box whose single sample sits at cell x = 300.25: 0.75 of column 300
    x0 = (300.25 + 0.5) * 4 - 2
    rois = torch.tensor([[[x0, 40.0, x0 + 4.0, 56.0]]])
    assert D.fpn_levels(rois, 2, 5).item() == 2
    out = D.multilevel_roi_align(feats, rois, 1, STRIDES, 1)
    assert out.dtype == torch.bfloat16
    assert out.float().item() == 0.75
    # the single-map RoIAlign (mask targets) samples at float32 positions too
    assert D.roi_align(spike.to(torch.bfloat16), rois, 1, 0.25, 1).float().item() == 0.75
