"""Mask R-CNN's multilevel RoIAlign (row gathers) against maskrcnn-benchmark's RoIAlign kernel.

The reference here is the CUDA kernel MLPerf v0.5 trains with
(v0.5.0/nvidia/submission/code/object_detection/pytorch/maskrcnn_benchmark/csrc/cuda/ROIAlign_cuda.cu
in mlcommons/training_results_v0.5) written out sample by sample: the box from ``x1 * scale``
to its inclusive end ``x2 * scale`` (``x2`` = continuous x2 - 1), at least one cell wide,
``sampling x sampling`` samples per bin at ``start + bin * (p + (i + 0.5) / sampling)``,
bilinear_interpolate's border rules, each box on its FPN level.
"""

import math

import pytest

torch = pytest.importorskip("torch")

from runner.workloads import detection as D  # noqa: E402

STRIDES = [4, 8, 16, 32]


def kernel_axis(v, size):
    """bilinear_interpolate along one axis: (low, high, weight low, weight high)."""
    if v < -1.0 or v > size:
        return 0, 0, 0.0, 0.0
    v = max(v, 0.0)
    low = int(v)
    if low >= size - 1:
        return size - 1, size - 1, 1.0, 0.0
    frac = v - low
    return low, low + 1, 1.0 - frac, frac


def kernel_reference(feats, rois, out_size, sampling):
    """(N, K, C, out, out), one box at a time, as the kernel computes it (differentiable in feats)."""
    kmin = int(round(math.log2(STRIDES[0])))
    lv = D.fpn_levels(rois, kmin, kmin + len(feats) - 1) - kmin
    n, k = rois.shape[:2]
    out = []
    for i in range(n):
        per = []
        for j in range(k):
            f = feats[int(lv[i, j])][i]
            scale = 1.0 / STRIDES[int(lv[i, j])]
            x1, y1, x2, y2 = [float(v) for v in rois[i, j]]
            sx, sy = x1 * scale, y1 * scale
            bw, bh = max((x2 - 1) * scale - sx, 1.0), max((y2 - 1) * scale - sy, 1.0)
            pos = [(p + (g + 0.5) / sampling) / out_size for p in range(out_size) for g in range(sampling)]
            ya = [kernel_axis(sy + bh * q, f.shape[1]) for q in pos]
            xa = [kernel_axis(sx + bw * q, f.shape[2]) for q in pos]
            val = 0
            for a, b in ((0, 2), (1, 3)):
                yi = torch.tensor([e[a] for e in ya])
                wy = torch.tensor([e[b] for e in ya])
                for c, d in ((0, 2), (1, 3)):
                    xi = torch.tensor([e[c] for e in xa])
                    wx = torch.tensor([e[d] for e in xa])
                    val = val + f[:, yi][:, :, xi] * (wy[:, None] * wx[None, :])
            per.append(val.view(-1, out_size, sampling, out_size, sampling).mean((2, 4)))
        out.append(torch.stack(per))
    return torch.stack(out)


def boxes(n, k, h, w, g):
    """Boxes of every FPN level, some reaching past the image edge (zero padding there)."""
    side = torch.exp(torch.empty(n, k, 1).uniform_(math.log(6), math.log(700), generator=g))
    aspect = torch.exp(torch.empty(n, k, 1).uniform_(-0.7, 0.7, generator=g))
    wh = torch.cat([side * aspect, side / aspect], -1)
    c = torch.rand(n, k, 2, generator=g) * torch.tensor([w * 4.0 + 40, h * 4.0 + 40]) - 20
    return torch.cat([c - wh / 2, c + wh / 2], -1)


@pytest.mark.parametrize("out_size, sampling", [(7, 2), (14, 2), (5, 1)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_gathers_match_the_reference_kernel_values_and_gradients(out_size, sampling, channels_last):
    g = torch.Generator().manual_seed(3)
    n, c, h, w = 2, 6, 48, 80
    feats = [torch.randn(n, c, h // (s // 4), w // (s // 4), generator=g) for s in STRIDES]
    if channels_last:
        feats = [f.contiguous(memory_format=torch.channels_last) for f in feats]
    feats = [f.requires_grad_() for f in feats]
    rois = boxes(n, 24, h, w, g)
    lv = D.fpn_levels(rois, 2, 5)
    assert set(lv.flatten().tolist()) == {2, 3, 4, 5}  # the test reaches every level

    ref = kernel_reference(feats, rois, out_size, sampling)
    out = D.multilevel_roi_align(feats, rois, out_size, STRIDES, sampling)
    assert out.shape == (n, 24, c, out_size, out_size)
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
    # a box under a cell wide from x = 299.75 cells: widened to one cell, its single sample sits at
    # 300.25: 0.75 of column 300
    rois = torch.tensor([[[1199.0, 40.0, 1203.0, 56.0]]])
    assert D.fpn_levels(rois, 2, 5).item() == 2
    out = D.multilevel_roi_align(feats, rois, 1, STRIDES, 1)
    assert out.dtype == torch.bfloat16
    assert out.float().item() == 0.75
    # the single-map RoIAlign (mask targets, half-pixel aligned) samples at float32 positions too
    x0 = (300.25 + 0.5) * 4 - 2
    aligned = torch.tensor([[[x0, 40.0, x0 + 4.0, 56.0]]])
    assert D.roi_align(spike.to(torch.bfloat16), aligned, 1, 0.25, 1).float().item() == 0.75
