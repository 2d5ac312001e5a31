"""Mask R-CNN's modules: the ResNet-50 trunk, FPN, RPN head, box and mask heads, and the anchors.

The network of maskrcnn-benchmark's R-50-FPN as MLPerf v0.5 trains it: an MSRA
ResNet-50 (ResNet v1: the stride of a stage sits in its first 1x1
convolution) whose norms are frozen affine layers holding the checkpoint's
scale and shift (``y = x * s + b``), the stem and the first stage frozen; FPN
P2-P6 with ``fpn_channels``; an RPN head (3x3 convolution, objectness and box
deltas for three aspect ratios); a box head of two ``box_fc``-wide layers with
class-specific regression; a mask head of ``mask_convs`` 3x3 convolutions, a
2x up-convolution and per-class masks. Initialisation as the reference: FPN
``kaiming_uniform(a=1)``, RPN normal(0.01), box classifier normal(0.01), box
regressor normal(0.001), mask convolutions ``kaiming_normal`` (fan out).

Anchors are the reference's (Detectron's ``generate_anchors``): per level one
size and three ratios around the centre of the level's first stride x stride
cell, widths and heights rounded at the stride's scale and then scaled, shifted
by the stride over the map. The reference writes boxes as inclusive pixel
indices (``x2 = x + w - 1``); here boxes are continuous (``x2 = x + w``), so an
anchor is the reference's with 1 added to ``x2`` and ``y2``.

Test scales (tiny, small) build the same modules narrower and shallower, with
trainable BN (they start from scratch on generated data).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from runner.workloads import vision as V

STRIDES = (4, 8, 16, 32, 64)
RATIOS = (0.5, 1.0, 2.0)


class MSRABottleneck(V.Bottleneck):
    """ResNet v1 bottleneck as MSRA's ResNet-50: the stride on the first 1x1 convolution."""

    def __init__(self, cin, width, stride=1, norm=nn.BatchNorm2d, zero_init=True):
        super().__init__(cin, width, stride, norm=norm, zero_init=zero_init)
        self.conv1 = nn.Conv2d(cin, width, 1, stride=stride, bias=False)
        self.conv2 = V.conv3x3(width, width, 1)


# the reference's frozen norm: the checkpoint's scale and shift, nothing added to the variance
frozen_affine = functools.partial(V.FrozenBatchNorm2d, eps=0.0)


class FPN(nn.Module):
    def __init__(self, in_channels, out):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, out, 1) for c in in_channels)
        self.output = nn.ModuleList(nn.Conv2d(out, out, 3, padding=1) for _ in in_channels)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, a=1)
                nn.init.zeros_(m.bias)

    def forward(self, feats):
        lat = [lyr(f) for lyr, f in zip(self.lateral, feats)]
        x = lat[-1]
        outs = [self.output[-1](x)]
        for i in range(len(lat) - 2, -1, -1):
            x = lat[i] + F.interpolate(x, size=lat[i].shape[-2:], mode="nearest")
            outs.insert(0, self.output[i](x))
        outs.append(F.max_pool2d(outs[-1], 1, stride=2))  # P6
        return outs


class RPNHead(nn.Module):
    def __init__(self, c, a):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.cls = nn.Conv2d(c, a, 1)
        self.box = nn.Conv2d(c, 4 * a, 1)
        for m in (self.conv, self.cls, self.box):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)

    def forward(self, feats):
        logits, deltas = [], []
        for f in feats:
            t = F.relu(self.conv(f))
            n = f.shape[0]
            logits.append(self.cls(t).permute(0, 2, 3, 1).reshape(n, -1))
            deltas.append(self.box(t).permute(0, 2, 3, 1).reshape(n, -1, 4))
        return logits, deltas


class BoxHead(nn.Module):
    def __init__(self, c, pool, fc, num_classes):
        super().__init__()
        self.fc1 = nn.Linear(c * pool * pool, fc)
        self.fc2 = nn.Linear(fc, fc)
        self.cls = nn.Linear(fc, num_classes)
        self.box = nn.Linear(fc, num_classes * 4)
        for m in (self.fc1, self.fc2):
            nn.init.kaiming_uniform_(m.weight, a=1)
            nn.init.zeros_(m.bias)
        nn.init.normal_(self.cls.weight, std=0.01)
        nn.init.normal_(self.box.weight, std=0.001)
        nn.init.zeros_(self.cls.bias)
        nn.init.zeros_(self.box.bias)

    def forward(self, x):
        x = F.relu(self.fc2(F.relu(self.fc1(x.flatten(1)))))
        return self.cls(x), self.box(x)


class MaskHead(nn.Module):
    def __init__(self, c, width, convs, num_classes):
        super().__init__()
        layers, cin = [], c
        for _ in range(convs):
            layers += [nn.Conv2d(cin, width, 3, padding=1), nn.ReLU(inplace=True)]
            cin = width
        self.convs = nn.Sequential(*layers)
        self.up = nn.ConvTranspose2d(cin, width, 2, stride=2)
        self.logits = nn.Conv2d(width, num_classes, 1)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.logits(F.relu(self.up(self.convs(x))))


def cell_anchors(stride: int, size: float, ratios=RATIOS) -> np.ndarray:
    """One level's anchors around its first cell, (len(ratios), 4) inclusive xyxy as the reference."""
    ctr = (stride - 1) / 2.0
    ws = np.round(np.sqrt(stride * stride / np.asarray(ratios, dtype=np.float64)))
    hs = np.round(ws * np.asarray(ratios, dtype=np.float64))
    ws, hs = ws * (size / stride), hs * (size / stride)
    return np.stack([ctr - 0.5 * (ws - 1), ctr - 0.5 * (hs - 1), ctr + 0.5 * (ws - 1), ctr + 0.5 * (hs - 1)], 1)


def grid_anchors(feat_sizes, sizes, ratios, device) -> list[torch.Tensor]:
    """Anchors of every level, (H * W * A, 4) continuous xyxy in location-major, ratio-minor order."""
    out = []
    for (h, w), size, stride in zip(feat_sizes, sizes, STRIDES):
        base = torch.tensor(cell_anchors(stride, size, ratios), dtype=torch.float32, device=device)
        base = base + torch.tensor([0.0, 0.0, 1.0, 1.0], device=device)  # inclusive -> continuous
        ys = torch.arange(h, device=device, dtype=torch.float32) * stride
        xs = torch.arange(w, device=device, dtype=torch.float32) * stride
        cy, cx = torch.meshgrid(ys, xs, indexing="ij")
        shift = torch.stack([cx, cy, cx, cy], -1).reshape(-1, 1, 4)
        out.append((shift + base[None]).reshape(-1, 4))
    return out


def anchors_inside(anchors: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """(N, A): anchors wholly inside each image as the reference tests it (straddle 0, on
    inclusive coordinates: x1 >= 0, y1 >= 0, x2 < width, y2 < height)."""
    a = anchors[None]
    return (a[..., 0] >= 0) & (a[..., 1] >= 0) & (a[..., 2] - 1 < sizes[:, 1:2]) & (a[..., 3] - 1 < sizes[:, 0:1])


class MaskRCNN(nn.Module):
    def __init__(self, cfg: dict, num_classes: int, frozen_bn: bool):
        super().__init__()
        norm = frozen_affine if frozen_bn else nn.BatchNorm2d
        self.backbone = V.ResNetTrunk(
            MSRABottleneck, cfg["layers"], cfg["width"], norm=norm, zero_init=not frozen_bn, return_stages=[0, 1, 2, 3]
        )
        V.init_convs(self.backbone)
        if frozen_bn:  # as the reference: the stem and the first stage are frozen too
            for m in (self.backbone.conv1, self.backbone.layer1):
                for p in m.parameters():
                    p.requires_grad_(False)
        c = cfg["fpn_channels"]
        self.fpn = FPN(self.backbone.channels, c)
        self.ratios = RATIOS
        self.rpn = RPNHead(c, len(self.ratios))
        self.box_head = BoxHead(c, 7, cfg["box_fc"], num_classes)
        self.mask_head = MaskHead(c, cfg.get("mask_width", c), cfg["mask_convs"], num_classes)
        self.num_classes = num_classes

    def features(self, x):
        return self.fpn(self.backbone(x))
