"""What the vision workloads (resnet50, ssd, maskrcnn) share.

ResNet building blocks (v1.5 bottleneck and the basic block of ResNet-34),
an exact, faster form of the stem's convolution (SpaceToDepthConv7;
``stem_options`` picks it from the scale's settings),
the speed path (channels-last, torch.compile with a fallback to eager),
JPEG decoding without torchvision, and the check of
a prepared dataset through ``runner.datasets`` when that package is installed.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torch.nn as nn
from mlperf_logging.mllog import constants as C

from runner.workloads.base import WorkloadError

IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


# --- ResNet blocks -------------------------------------------------------------------


def conv3x3(cin, cout, stride=1, dilation=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=dilation, dilation=dilation, bias=False)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""

    expansion = 4

    def __init__(self, cin, width, stride=1, norm=nn.BatchNorm2d, zero_init=True):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = norm(width)
        self.conv2 = conv3x3(width, width, stride)
        self.bn2 = norm(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = norm(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), norm(cout))
        if zero_init and isinstance(self.bn3, nn.BatchNorm2d):
            nn.init.zeros_(self.bn3.weight)

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + idt)


class BasicBlock(nn.Module):
    """The two-convolution block of ResNet-18/34."""

    expansion = 1

    def __init__(self, cin, width, stride=1, norm=nn.BatchNorm2d, zero_init=False):
        super().__init__()
        self.conv1 = conv3x3(cin, width, stride)
        self.bn1 = norm(width)
        self.conv2 = conv3x3(width, width)
        self.bn2 = norm(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, width, 1, stride=stride, bias=False), norm(width))
        if zero_init and isinstance(self.bn2, nn.BatchNorm2d):
            nn.init.zeros_(self.bn2.weight)

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


def make_stage(block, cin, width, blocks, stride, norm=nn.BatchNorm2d, zero_init=True):
    layers = [block(cin, width, stride, norm=norm, zero_init=zero_init)]
    cout = width * block.expansion
    for _ in range(1, blocks):
        layers.append(block(cout, width, 1, norm=norm, zero_init=zero_init))
    return nn.Sequential(*layers), cout


def halved(size: int) -> int:
    """Output size of a stride-2 layer that pads to keep ``ceil(size / 2)`` (the stem's 7x7/2 and 3x3/2)."""
    return (size - 1) // 2 + 1


def _is_channels_last(x: torch.Tensor) -> bool:
    return x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


class SpaceToDepthConv7(nn.Conv2d):
    """The ResNet stem convolution (7x7, stride 2, padding 3, no bias), computed
    as a 4x4 stride-1 convolution over the 2x2 space-to-depth of the input.

    Same parameter (``weight`` [out, in, 7, 7]), same result: the 7x7 kernel is
    zero-padded to 8x8 and each 2x2 phase of it becomes an input channel, so the
    convolution sees 4x the channels (12 for RGB) instead of 3, which the GPU's
    convolution kernels handle at a far higher rate. ``pad_channels`` rounds
    that channel count up with zero channels (None: as it is).
    """

    def __init__(self, cin, cout, pad_channels=None):
        super().__init__(cin, cout, 7, stride=2, padding=3, bias=False)
        self.pad_channels = pad_channels

    def forward(self, x):
        n, c, h, w = x.shape
        ho, wo = halved(h), halved(w)
        # pad 3 before, and after up to 2 * out + 6 rows/columns (an even count)
        xp = nn.functional.pad(x, (3, 2 * wo + 3 - w, 3, 2 * ho + 3 - h))
        s = xp.reshape(n, c, ho + 3, 2, wo + 3, 2).permute(0, 1, 3, 5, 2, 4).reshape(n, 4 * c, ho + 3, wo + 3)
        k = self.weight.shape[0]
        wt = nn.functional.pad(self.weight, (0, 1, 0, 1))
        wt = wt.reshape(k, c, 4, 2, 4, 2).permute(0, 1, 3, 5, 2, 4).reshape(k, 4 * c, 4, 4)
        extra = (-(4 * c)) % self.pad_channels if self.pad_channels else 0
        if extra:
            s = nn.functional.pad(s, (0, 0, 0, 0, 0, extra))
            wt = nn.functional.pad(wt, (0, 0, 0, 0, 0, extra))
        if _is_channels_last(x):
            s = s.contiguous(memory_format=torch.channels_last)
        return nn.functional.conv2d(s, wt)


class ResNetTrunk(nn.Module):
    """The ResNet stem and stages, named as torchvision names them (``conv1``, ``bn1``,
    ``layer1``..), so that an ImageNet checkpoint in that layout loads as is.

    ``strides`` per stage (the SSD backbone keeps layer3 at stride 1);
    ``forward`` returns the outputs of the stages listed in ``return_stages``.
    """

    def __init__(
        self,
        block,
        layers,
        width=64,
        strides=(1, 2, 2, 2),
        norm=nn.BatchNorm2d,
        zero_init=True,
        return_stages=None,
        space_to_depth_stem=False,
        stem_pad_channels=None,
    ):
        super().__init__()
        if space_to_depth_stem:
            self.conv1 = SpaceToDepthConv7(3, width, pad_channels=stem_pad_channels)
        else:
            self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = norm(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = width
        self.channels = []
        for i, (n, st) in enumerate(zip(layers, strides)):
            stage, cin = make_stage(block, cin, width * 2**i, n, st, norm=norm, zero_init=zero_init)
            setattr(self, f"layer{i + 1}", stage)
            self.channels.append(cin)
        self.num_stages = len(layers)
        self.return_stages = return_stages

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        outs = []
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
            outs.append(x)
        if self.return_stages is None:
            return x
        return [outs[i] for i in self.return_stages]


def stem_options(ctx) -> dict:
    """ResNetTrunk's stem keywords from the scale's settings (``space_to_depth_stem``,
    ``stem_pad_channels``) when the model is compiled: the form pays once Inductor
    fuses it (eager, its padding and reshapes cost more than the plain convolution).
    Eager runs and the benchmark's plain baseline keep the plain stem (``ctx.fast_layers``,
    decided by runner.workloads.compiling.decide)."""
    if not ctx.fast_layers:
        return {}
    cfg = ctx.cfg
    return {
        "space_to_depth_stem": bool(cfg.get("space_to_depth_stem", False)),
        "stem_pad_channels": cfg.get("stem_pad_channels"),
    }


def init_convs(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm with fixed statistics and affine parameters (detection backbones)."""

    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(n))
        self.register_buffer("bias", torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))

    def forward(self, x):
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        shift = self.bias - self.running_mean * scale
        return x * scale.view(1, -1, 1, 1).to(x.dtype) + shift.view(1, -1, 1, 1).to(x.dtype)


# --- the speed path ----------------------------------------------------------------------


def prepare_model(ctx, model: nn.Module) -> nn.Module:
    """Move to the device; channels-last when the context asks for it."""
    model = model.to(ctx.device)
    if ctx.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def to_device_images(ctx, images_u8: torch.Tensor, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> torch.Tensor:
    """uint8 NHWC (CPU) -> normalized float NCHW on the device (channels-last when asked)."""
    x = images_u8.to(ctx.device, non_blocking=True).permute(0, 3, 1, 2).float()
    m = torch.tensor(mean, device=ctx.device).view(1, 3, 1, 1)
    s = torch.tensor(std, device=ctx.device).view(1, 3, 1, 1)
    x = (x - m) / s
    if ctx.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def device_generator(ctx, seed: int) -> torch.Generator:
    """A generator on the run's device, seeded with ``seed``."""
    g = torch.Generator(device=ctx.device)
    g.manual_seed(seed)
    return g


def synthetic_images(ctx, batch: int, size, generator=None) -> torch.Tensor:
    h, w = (size, size) if isinstance(size, int) else size
    x = torch.randn(batch, 3, h, w, device=ctx.device, generator=generator)
    if ctx.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def synthetic_boxes(
    ctx,
    batch: int,
    num_classes: int,
    generator,
    centre: tuple[float, float],
    extent: tuple[float, float],
    gmax: int = 8,
):
    """``gmax`` random boxes per image (x0, y0, x1, y1 as fractions of the image) and labels 1..classes-1.

    Centres are drawn from ``centre[0] + centre[1] * U`` and widths and heights
    from ``extent[0] + extent[1] * U`` (U uniform in [0, 1)), on the device.
    """
    c = torch.rand(batch, gmax, 2, device=ctx.device, generator=generator) * centre[1] + centre[0]
    wh = torch.rand(batch, gmax, 2, device=ctx.device, generator=generator) * extent[1] + extent[0]
    boxes = torch.cat([c - wh / 2, c + wh / 2], -1)
    labels = torch.randint(1, num_classes, (batch, gmax), device=ctx.device, generator=generator)
    return boxes, labels


def step_sgd_hyperparameters(ctx, cfg: dict, batch: int, lr: float) -> dict:
    """The MLLOG keys of the detection workloads' SGD with warm-up and step decay (x0.1)."""
    return {
        C.GLOBAL_BATCH_SIZE: batch * ctx.world_size,
        C.OPT_NAME: "sgd",
        C.OPT_BASE_LR: lr,
        C.OPT_WEIGHT_DECAY: cfg["weight_decay"],
        "opt_momentum": cfg["momentum"],
        "opt_learning_rate_warmup_factor": cfg["warmup_factor"],
        "opt_learning_rate_decay_factor": 0.1,
    }


def round_lr(lr: float, quantum: float) -> float:
    """``lr`` rounded to a multiple of ``quantum`` (the MLPerf rules ask for such values)."""
    return round(max(quantum, round(lr / quantum) * quantum), 10)


# --- data -----------------------------------------------------------------------------------


def check_dataset(name: str, root: str) -> None:
    """Verify a prepared dataset with ``runner.datasets.check`` where that package exists."""
    try:
        from runner.datasets import check
    except ImportError:
        return
    try:
        check(name, root)
    except WorkloadError:
        raise
    except Exception as exc:  # the package's own error: one line naming the data set
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkloadError(f"{name} data at {root}: {msg}") from exc


def loader_workers(ctx, per_gpu_max: int = 12) -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size)))
    return max(0, min(per_gpu_max, n // local - 1))


def decode_rgb(path: str, draft_size: int | None = None):
    """A PIL RGB image; JPEGs are decoded at a reduced scale when ``draft_size`` allows."""
    from PIL import Image

    img = Image.open(path)
    if draft_size and img.format == "JPEG":
        img.draft("RGB", (draft_size, draft_size))
    return img.convert("RGB")


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """The same order on every rank; ranks take disjoint slices of it."""
    return np.random.default_rng((seed * 7919 + epoch) % (2**63)).permutation(n)


def log_note(msg: str) -> None:
    print(f"[workload] {msg}", file=sys.stderr, flush=True)
