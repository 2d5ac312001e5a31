"""The ResNet stem's fast forms (space-to-depth convolution, offset max pooling) against the plain layers."""

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from runner.workloads import base  # noqa: E402
from runner.workloads import resnet50 as R  # noqa: E402
from runner.workloads import vision as V  # noqa: E402

SIZES = [(224, 224), (33, 30), (17, 18), (7, 9)]


def grads(out, wrt, g):
    return torch.autograd.grad((out * g).sum(), wrt)


@pytest.mark.parametrize("h, w", SIZES)
@pytest.mark.parametrize("pad_channels", [None, 16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_space_to_depth_conv_equals_the_7x7_stride_2_convolution(h, w, pad_channels, channels_last):
    torch.manual_seed(1)
    conv = V.SpaceToDepthConv7(3, 16, pad_channels=pad_channels).double()
    x = torch.randn(2, 3, h, w, dtype=torch.float64, requires_grad=True)
    if channels_last:
        x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    ref = F.conv2d(x, conv.weight, stride=2, padding=3)
    out = conv(x)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)
    g = torch.randn_like(ref)
    gx, gw = grads(out, (x, conv.weight), g)
    rx, rw = grads(ref, (x, conv.weight), g)
    torch.testing.assert_close(gw, rw, rtol=0, atol=1e-10)
    torch.testing.assert_close(gx, rx, rtol=0, atol=1e-10)


@pytest.mark.parametrize("h, w", SIZES + [(1, 2)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_offset_maxpool_equals_max_pool2d_with_ties(h, w, channels_last):
    g = torch.Generator().manual_seed(2)
    # rounded ReLU outputs: many equal values in a window, where the first maximum must take the gradient
    x = torch.relu(torch.randn(2, 5, h, w, generator=g)).mul(2).round()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = F.max_pool2d(a, 3, 2, 1), V.OffsetMaxPool()(b)
    assert torch.equal(ya, yb)
    assert yb.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    gy = torch.randn(ya.shape, generator=g)
    ya.backward(gy)
    yb.backward(gy)
    torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=1e-6)
    assert b.grad.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def test_offset_maxpool_propagates_nan_and_keeps_bf16():
    x = torch.zeros(1, 1, 6, 6, dtype=torch.bfloat16)
    x[0, 0, 2, 3] = float("nan")
    x[0, 0, 4, 4] = 3.0
    ref = F.max_pool2d(x, 3, 2, 1)
    out = V.OffsetMaxPool()(x)
    assert out.dtype == torch.bfloat16
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.equal(out.nan_to_num(-1), ref.nan_to_num(-1))


def test_stem_forms_compile_and_match_the_plain_stem():
    """torch.compile (Inductor on the CPU) traces both forms; values and weight gradients match eager plain layers."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
    fast = nn.Sequential(V.SpaceToDepthConv7(3, 8, pad_channels=16), nn.BatchNorm2d(8), nn.ReLU(), V.OffsetMaxPool())
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(4, 3, 40, 40).contiguous(memory_format=torch.channels_last)
    ya, yb = plain(x), torch.compile(fast)(x)
    torch.testing.assert_close(yb, ya, rtol=1e-4, atol=1e-5)
    ya.square().sum().backward()
    yb.square().sum().backward()
    torch.testing.assert_close(fast[0].weight.grad, plain[0].weight.grad, rtol=1e-3, atol=1e-3)


def test_resnet50_uses_the_fast_stem_only_when_compiled_on_the_optimized_path(monkeypatch):
    """Compiled throughput path: the fast stem; the benchmark's plain baseline and eager runs: the plain
    layers. The parameters keep torchvision's names and shapes either way (checkpoints load in both)."""
    calls = []
    monkeypatch.setattr(R, "compile_fn", lambda ctx, fn: calls.append(ctx.compile) or fn)
    real_init = base.Context.__init__

    def model(optimized, compile_, overrides=None):
        def init(self, *a, **kw):  # bench_step compiles on CUDA only; here the test decides
            real_init(self, *a, **kw)
            self.compile = compile_
        monkeypatch.setattr(base.Context, "__init__", init)
        return base.bench_step("resnet50", "cpu", optimized, scale="tiny", batch_size=2,
                               overrides=overrides)[0].__self__.model

    fast, eager, plain = model(True, True), model(True, False), model(False, False)
    assert calls == [True, False, False]
    assert isinstance(fast.trunk.conv1, V.SpaceToDepthConv7) and fast.trunk.conv1.pad_channels == 16
    assert isinstance(fast.trunk.maxpool, V.OffsetMaxPool)
    for m in (eager, plain):
        assert type(m.trunk.conv1) is nn.Conv2d and type(m.trunk.maxpool) is nn.MaxPool2d
    assert {k: v.shape for k, v in fast.state_dict().items()} == {k: v.shape for k, v in plain.state_dict().items()}
    off = model(True, True, {"space_to_depth_stem": False, "offset_maxpool": False})
    assert type(off.trunk.conv1) is nn.Conv2d and type(off.trunk.maxpool) is nn.MaxPool2d


def test_resnet_forward_is_the_same_with_either_stem():
    torch.manual_seed(0)
    a = R.ResNet((1, 1, 1, 1), 8, 10)
    b = R.ResNet((1, 1, 1, 1), 8, 10, space_to_depth_stem=True, stem_pad_channels=16, offset_maxpool=True)
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()
    x = torch.randn(3, 3, 32, 32)
    torch.testing.assert_close(b(x), a(x), rtol=1e-5, atol=1e-5)
