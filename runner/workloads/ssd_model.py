"""SSD300's model (runner/workloads/ssd.py): the ResNet backbone with its extra blocks and heads, the
default boxes, matching and box coding, the loss with hard negative mining, and inference (NMS)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from runner.workloads import detection as D
from runner.workloads import vision as V
from runner.workloads.base import WorkloadError

WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # variances 0.1 (centre) and 0.2 (size)
BACKBONE_STRIDES = (1, 2, 1)  # ResNet-34 layer1..layer3, layer3 kept at stride 1 (38x38 at 300)


class SSD(nn.Module):
    def __init__(self, cfg: dict, num_classes: int):
        super().__init__()
        w = cfg["width"]
        self.backbone = V.ResNetTrunk(V.BasicBlock, cfg["layers"], w, strides=BACKBONE_STRIDES, zero_init=False)
        cin = self.backbone.channels[-1]
        self.extras = nn.ModuleList()
        chans = [cin]
        for mid, out, stride, pad in cfg["extras"]:  # as the reference: biased convolutions, no BN
            self.extras.append(
                nn.Sequential(
                    nn.Conv2d(cin, mid, 1),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(mid, out, 3, stride=stride, padding=pad),
                    nn.ReLU(inplace=True),
                )
            )
            chans.append(out)
            cin = out
        self.num_anchors = [2 + 2 * len(a) for a in cfg["aspect_ratios"]]
        if len(self.num_anchors) != len(chans):
            raise WorkloadError(f"ssd: {len(chans)} feature levels but {len(self.num_anchors)} aspect-ratio lists")
        self.num_classes = num_classes
        self.loc = nn.ModuleList(nn.Conv2d(c, a * 4, 3, padding=1) for c, a in zip(chans, self.num_anchors))
        self.conf = nn.ModuleList(nn.Conv2d(c, a * num_classes, 3, padding=1) for c, a in zip(chans, self.num_anchors))
        V.init_convs(self.backbone)
        # the reference: Xavier-uniform weights in the extra blocks and heads, PyTorch's default biases
        for m in list(self.extras.modules()) + list(self.loc) + list(self.conf):
            if isinstance(m, nn.Conv2d):
                nn.init.xavier_uniform_(m.weight)

    def features(self, x):
        x = self.backbone(x)
        feats = [x]
        for e in self.extras:
            x = e(x)
            feats.append(x)
        return feats

    def forward(self, x):
        locs, confs = [], []
        n = x.shape[0]
        for f, lh, ch in zip(self.features(x), self.loc, self.conf):
            locs.append(lh(f).permute(0, 2, 3, 1).reshape(n, -1, 4))
            confs.append(ch(f).permute(0, 2, 3, 1).reshape(n, -1, self.num_classes))
        return torch.cat(locs, 1), torch.cat(confs, 1)


def feature_sizes(cfg: dict) -> list[int]:
    """The side of every feature map the heads read, from the scale's geometry.

    The backbone takes the image to 1/8 (stem 1/4, layer2 1/2, layer3 at stride 1);
    each extra block's 3x3 convolution (stride ``s``, padding ``p``) needs a map of
    at least 3 - 2p pixels. A geometry that breaks that is bad input, named here
    instead of failing inside the first convolution."""
    size = cfg["image_size"]
    s = V.halved(V.halved(size))  # the 7x7/2 stem convolution and the 3x3/2 max pool
    for st in BACKBONE_STRIDES[: len(cfg["layers"])]:
        s = (s - 1) // st + 1  # 3x3, padding 1
    sizes = [s]
    for k, (_, _, stride, pad) in enumerate(cfg["extras"]):
        if s + 2 * pad < 3:
            raise WorkloadError(
                f"ssd: extra block {k + 1} gets a {s}x{s} map, too small for its 3x3 convolution "
                f"(padding {pad}) at image_size {size}: change image_size or extras"
            )
        s = (s + 2 * pad - 3) // stride + 1
        sizes.append(s)
    return sizes


def default_boxes(fig: int, feat_sizes, scales, aspect_ratios, steps=None) -> torch.Tensor:
    """The SSD default boxes as the reference's ``DefaultBoxes`` computes them, xyxy, in
    the order of the heads' outputs (level, row, column, shape).

    On level k the centres are ``((j + 0.5) / (fig / steps[k]), (i + 0.5) / ...)``: with
    the reference's steps (8, 16, 32, 64, 100, 300 at 300 pixels) a grid of 38 cells is
    spread over 37.5 step widths, so the last centres reach 1.0. The shapes: ``s_k``
    square, ``sqrt(s_k s_k+1)`` square, and ``s_k sqrt(a)`` x ``s_k / sqrt(a)`` both ways
    for every aspect ratio a, with ``s_k = scales[k] / fig``. Centre and size are
    clamped to [0, 1] (not the corners: a box may reach past the image). Without
    ``steps`` a level's step is ``fig / size`` (centres in the middle of the cells).
    """
    out = []
    for k, fk in enumerate(feat_sizes):
        cells = fig / steps[k] if steps else fk
        sk = scales[k] / fig
        shapes = [(sk, sk), (math.sqrt(sk * scales[k + 1] / fig),) * 2]
        for a in aspect_ratios[k]:
            r = math.sqrt(a)
            shapes += [(sk * r, sk / r), (sk / r, sk * r)]
        for i in range(fk):
            for j in range(fk):
                for w, h in shapes:
                    out.append([(j + 0.5) / cells, (i + 0.5) / cells, w, h])
    cxcywh = torch.tensor(out, dtype=torch.float64).clamp(0, 1)
    xy, wh = cxcywh[:, :2], cxcywh[:, 2:]
    return torch.cat([xy - wh / 2, xy + wh / 2], 1).float()


def ssd_loss(ploc, pconf, gloc, glabel, negatives=None):
    """The reference's loss of a batch, in fp32: smooth L1 over the positives' box codes plus
    cross-entropy over the positives and the hard negatives (per image the 3 x positives
    background boxes of highest cross-entropy), per image divided by its positives, mean
    over the images (an image without positives counts 0).

    ``negatives`` (B, A) bool replaces the hard-negative choice (for studies of it).
    Returns (loss, the hard negatives used)."""
    ploc, pconf = ploc.float(), pconf.float()
    mask = glabel > 0
    pos = mask.sum(1)
    sl1 = (F.smooth_l1_loss(ploc, gloc, reduction="none").sum(2) * mask).sum(1)
    con = F.cross_entropy(pconf.transpose(1, 2), glabel, reduction="none")
    if negatives is None:
        rank = con.masked_fill(mask, 0.0).argsort(1, descending=True).argsort(1)
        negatives = rank < (3 * pos).clamp(max=mask.shape[1])[:, None]
    closs = (con * (mask | negatives)).sum(1)
    has = (pos > 0).float()
    return ((sl1 + closs) * has / pos.float().clamp(min=1e-6)).mean(), negatives


class SSDLoss(nn.Module):
    """The model and its loss in one module (one compiled graph). The network runs under
    the caller's autocast; the loss, as in the reference, in fp32 (autocast off), from the
    heads' outputs cast to fp32. Matching (``match``) runs before, in fp32, outside."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, gloc, glabel):
        ploc, pconf = self.model(x)
        with torch.autocast(x.device.type, enabled=False):
            return ssd_loss(ploc, pconf, gloc, glabel)[0]


def match(anchors: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor, thr=0.5):
    """Targets of a batch: ``boxes`` (B, G, 4) normalized xyxy, ``labels`` (B, G), -1 = padding.

    Returns location targets (B, A, 4) and class targets (B, A) (0 = background).
    """
    b, g = labels.shape
    valid = labels >= 0
    if g == 0:
        a = anchors.shape[0]
        return anchors.new_zeros(b, a, 4), labels.new_zeros(b, a)
    iou = D.box_iou(boxes, anchors[None].expand(b, -1, -1))  # (B, G, A)
    iou = iou.masked_fill(~valid[..., None], -1.0)
    best_a = iou.argmax(2)  # every object's best default box: (B, G)
    for j in range(g):
        idx = best_a[:, j]
        ok = valid[:, j]
        rows = torch.arange(b, device=iou.device)[ok]
        iou[rows, j, idx[ok]] = 2.0
    best_iou, best_g = iou.max(1)  # (B, A)
    lab = labels.gather(1, best_g).clamp(min=0)
    lab = torch.where(best_iou > thr, lab, torch.zeros_like(lab))  # the reference: IoU > 0.5
    matched = boxes.gather(1, best_g[..., None].expand(-1, -1, 4))
    gloc = D.encode(matched, anchors[None].expand(b, -1, -1), WEIGHTS)
    return gloc, lab


@torch.no_grad()
def detect(ploc, pconf, anchors, score_thr=0.05, nms_thr=0.5, per_class=200, max_out=200):
    """Detections of one image: normalized xyxy boxes, scores, labels (1..K-1)."""
    boxes = D.decode(ploc.float(), anchors, WEIGHTS)  # unclipped, as the reference scores them
    scores = F.softmax(pconf.float(), dim=-1)[:, 1:]  # (A, K-1)
    cand_b, cand_s, cand_l = [], [], []
    for c in range(scores.shape[1]):
        s = scores[:, c]
        keep = torch.nonzero(s > score_thr).squeeze(1)
        if keep.numel() == 0:
            continue
        top = s[keep].topk(min(per_class, keep.numel())).indices
        keep = keep[top]
        cand_b.append(boxes[keep])
        cand_s.append(s[keep])
        cand_l.append(torch.full((keep.numel(),), c + 1, dtype=torch.long, device=s.device))
    if not cand_b:
        z = boxes.new_zeros(0)
        return boxes.new_zeros(0, 4), z, z.long()
    b, s, lab = torch.cat(cand_b), torch.cat(cand_s), torch.cat(cand_l)
    keep = D.batched_nms(b, s, lab, nms_thr)[:max_out]
    return b[keep], s[keep], lab[keep]
