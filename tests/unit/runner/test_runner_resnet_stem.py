"""The ResNet stem's fast form (the space-to-depth convolution) against the plain layers; the max pooling is
the plain ``nn.MaxPool2d`` on every path (the custom offset max pool, wrong when compiled on CUDA, is gone)."""

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


def test_compiled_fast_stem_matches_the_plain_stem_in_values_and_every_gradient():
    """torch.compile (Inductor on the CPU) of the trunk's own stem with the fast convolution: values and the
    gradients of the convolution, the batch norm and the input equal the eager plain layers'."""
    torch.manual_seed(0)
    plain = V.ResNetTrunk(V.BasicBlock, [1], 8)
    fast = V.ResNetTrunk(V.BasicBlock, [1], 8, space_to_depth_stem=True, stem_pad_channels=16)
    fast.load_state_dict(plain.state_dict())
    assert type(fast.maxpool) is nn.MaxPool2d and type(plain.maxpool) is nn.MaxPool2d

    def stem(t):
        return nn.Sequential(t.conv1, t.bn1, t.relu, t.maxpool)

    x = torch.randn(4, 3, 40, 38).contiguous(memory_format=torch.channels_last)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = stem(plain)(xa), torch.compile(stem(fast))(xb)
    torch.testing.assert_close(yb, ya, rtol=1e-4, atol=1e-5)
    g = torch.randn(ya.shape, generator=torch.Generator().manual_seed(3))
    (ya * g).sum().backward()
    (yb * g).sum().backward()
    for name, a, b in (
        ("conv1.weight", plain.conv1.weight, fast.conv1.weight),
        ("bn1.weight", plain.bn1.weight, fast.bn1.weight),
        ("bn1.bias", plain.bn1.bias, fast.bn1.bias),
        ("input", xa, xb),
    ):
        assert b.grad.abs().sum() > 0, name
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-4, msg=name)


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
        return base.bench_step("resnet50", "cpu", optimized, scale="tiny", batch_size=2, overrides=overrides)[
            0
        ].__self__.model

    fast, eager, plain = model(True, True), model(True, False), model(False, False)
    assert calls == [True, False, False]
    assert isinstance(fast.trunk.conv1, V.SpaceToDepthConv7) and fast.trunk.conv1.pad_channels == 16
    for m in (fast, eager, plain):
        assert type(m.trunk.maxpool) is nn.MaxPool2d
    for m in (eager, plain):
        assert type(m.trunk.conv1) is nn.Conv2d
    assert {k: v.shape for k, v in fast.state_dict().items()} == {k: v.shape for k, v in plain.state_dict().items()}
    off = model(True, True, {"space_to_depth_stem": False})
    assert type(off.trunk.conv1) is nn.Conv2d


def test_no_custom_autograd_function_is_left_on_the_vision_paths():
    """The offset max pool was a custom autograd Function that Inductor compiled wrong on CUDA; it is gone from
    the module and the catalogue, and no vision model holds a module whose forward calls a Function."""
    import inspect

    from runner import workloads
    from runner.workloads import detection, maskrcnn, ssd

    assert not hasattr(V, "OffsetMaxPool") and not hasattr(V, "_MaxPool3x3s2")
    for mod in (V, R, ssd, maskrcnn, detection):
        assert "autograd.Function" not in inspect.getsource(mod), mod.__name__
    for name, entry in workloads.load().items():
        for scale, cfg in entry["scales"].items():
            assert "offset_maxpool" not in cfg, (name, scale)


def test_resnet_forward_is_the_same_with_either_stem():
    torch.manual_seed(0)
    a = R.ResNet((1, 1, 1, 1), 8, 10)
    b = R.ResNet((1, 1, 1, 1), 8, 10, space_to_depth_stem=True, stem_pad_channels=16)
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()
    x = torch.randn(3, 3, 32, 32)
    torch.testing.assert_close(b(x), a(x), rtol=1e-5, atol=1e-5)
