"""The ResNet stem of the GPU speed path computes what the plain stem computes."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from runner.workloads import vision as V  # noqa: E402


@pytest.mark.parametrize("h, w", [(112, 112), (7, 9), (8, 8), (1, 2)])
def test_max_pool_slices_equal_the_window_in_values_and_gradients(h, w):
    g = torch.Generator().manual_seed(h * 100 + w)
    y = torch.randn(2, 3, h, w, generator=g, requires_grad=True)
    a, b = V.max_pool_3x3_s2_slices(y), F.max_pool2d(y, 3, 2, 1)
    assert a.shape == b.shape and torch.equal(a, b)
    up = torch.randn(a.shape, generator=g)
    ga, = torch.autograd.grad((a * up).sum(), y)
    gb, = torch.autograd.grad((b * up).sum(), y)
    assert torch.equal(ga, gb)  # no ties in random data: every gradient lands where the window's does


@pytest.mark.parametrize("channels_last", [False, True])
def test_padded_stem_gives_the_same_outputs_and_weight_gradients(channels_last):
    torch.manual_seed(0)
    plain = V.ResNetTrunk(V.Bottleneck, (1, 1, 1, 1), 8)
    fast = V.ResNetTrunk(V.Bottleneck, (1, 1, 1, 1), 8)
    fast.load_state_dict(plain.state_dict())
    fast.set_stem(pad_channels=8, maxpool_slices=True)
    x = torch.randn(2, 3, 64, 64)
    if channels_last:
        plain, fast = plain.to(memory_format=torch.channels_last), fast.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    a, b = plain(x), fast(x)
    assert torch.allclose(a, b, atol=1e-5)
    ga = torch.autograd.grad(a.square().sum(), plain.conv1.weight)[0]
    gb = torch.autograd.grad(b.square().sum(), fast.conv1.weight)[0]
    assert gb.shape == (8, 3, 7, 7)  # the parameter keeps its checkpoint shape; only the step pads it
    assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-4)
    assert set(plain.state_dict()) == set(fast.state_dict())
