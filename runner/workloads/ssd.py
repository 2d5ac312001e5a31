"""SSD300 with a ResNet-34 backbone (MLPerf v0.5 "ssd", COCO box AP 0.50:0.95).

At full scale the recipe of the v0.5 reference (NVIDIA's PyTorch submission;
runner/README.md "Fidelity to the MLPerf v0.5 references", ssd, lists each
element and every deviation): ResNet-34 up to layer3 with layer3 at stride 1
(38x38 at 300x300), five extra blocks (biased 1x1 and 3x3 convolutions with
ReLU, no BN) down to 19, 10, 5, 3, 1, 3x3 location and class heads, the
reference's 8732 default boxes, box coding with variances 0.1/0.2, matching at
IoU > 0.5 plus the best default box of every object (fp32), smooth-L1 plus
cross-entropy with 3:1 hard negative mining (fp32); inference: softmax, score
0.05, per-class NMS 0.5, 200 detections per image, COCO AP by pycocotools
(runner/workloads/coco_eval.py).

Full scale reads COCO 2017 (train2017 / val2017 and the instances JSON) with
the reference's SSD random crop, horizontal flip, resize to 300x300 and colour
jitter (on the device); the backbone starts from torchvision's ImageNet
ResNet-34 (``resnet34-333f7ec4.pth``, as the reference), a catalogued artifact
at ``<data>/resnet34-torchvision/`` whose sum the runner checks before a ttt
run (a missing or wrong file is bad input, never a run from scratch). Small
and tiny are test scales: generated shapes (runner/workloads/detection.py) at
96 and 64 pixels with a narrower, shallower backbone and fewer feature levels
(``width``, ``layers``, ``extras`` in workloads.yml), their own schedules.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from runner.workloads import detection as D
from runner.workloads import vision as V
from runner.workloads.base import WorkloadError, compile_fn
from runner.workloads.coco_eval import COCOEvaluator
from runner.workloads.pretrained import load_backbone

WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # variances 0.1 (centre) and 0.2 (size)
BACKBONE_STRIDES = (1, 2, 1)  # ResNet-34 layer1..layer3, layer3 kept at stride 1 (38x38 at 300)


class SSD(nn.Module):
    def __init__(self, cfg: dict, num_classes: int):
        super().__init__()
        w = cfg["width"]
        self.backbone = V.ResNetTrunk(V.BasicBlock, cfg["layers"], w, strides=BACKBONE_STRIDES,
                                      zero_init=False)
        cin = self.backbone.channels[-1]
        self.extras = nn.ModuleList()
        chans = [cin]
        for mid, out, stride, pad in cfg["extras"]:  # as the reference: biased convolutions, no BN
            self.extras.append(nn.Sequential(
                nn.Conv2d(cin, mid, 1), nn.ReLU(inplace=True),
                nn.Conv2d(mid, out, 3, stride=stride, padding=pad), nn.ReLU(inplace=True)))
            chans.append(out)
            cin = out
        self.num_anchors = [2 + 2 * len(a) for a in cfg["aspect_ratios"]]
        if len(self.num_anchors) != len(chans):
            raise WorkloadError(f"ssd: {len(chans)} feature levels but {len(self.num_anchors)} aspect-ratio lists")
        self.num_classes = num_classes
        self.loc = nn.ModuleList(nn.Conv2d(c, a * 4, 3, padding=1) for c, a in zip(chans, self.num_anchors))
        self.conf = nn.ModuleList(nn.Conv2d(c, a * num_classes, 3, padding=1)
                                  for c, a in zip(chans, self.num_anchors))
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
    s = V._half(V._half(size))  # the 7x7/2 stem convolution and the 3x3/2 max pool
    for st in BACKBONE_STRIDES[: len(cfg["layers"])]:
        s = (s - 1) // st + 1  # 3x3, padding 1
    sizes = [s]
    for k, (_, _, stride, pad) in enumerate(cfg["extras"]):
        if s + 2 * pad < 3:
            raise WorkloadError(f"ssd: extra block {k + 1} gets a {s}x{s} map, too small for its 3x3 convolution "
                                f"(padding {pad}) at image_size {size}: change image_size or extras")
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


# --- data ----------------------------------------------------------------------------------

GRAY = (0.299, 0.587, 0.114)
_YIQ = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], dtype=torch.float64)


def color_jitter(x: torch.Tensor, u: torch.Tensor, brightness: float, contrast: float, saturation: float,
                 hue: float) -> torch.Tensor:
    """The reference's colour jitter on a batch of float RGB images (N, 3, H, W) in 0..255.

    ``u`` (N, 4): uniform draws in [0, 1) per image. Brightness, contrast and saturation
    factors are drawn from ``1 +- brightness`` etc., the hue shift from ``+- hue`` of a
    full turn (the reference: 0.125, 0.5, 0.5, 0.05): brightness scales the image,
    contrast blends it with the mean of its grey image, saturation with its grey image
    per pixel, and the hue turns the chroma plane of YIQ (a linear map per image). The
    result is clamped to 0..255 after each step.
    """
    n = x.shape[0]
    f = (2 * u.float() - 1) * torch.tensor([brightness, contrast, saturation, hue], device=x.device)
    b, c, s = (1 + f[:, :3]).unbind(1)
    gw = torch.tensor(GRAY, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    x = (x * b.view(n, 1, 1, 1)).clamp(0, 255)
    m = (x * gw).sum(1, keepdim=True).mean((2, 3), keepdim=True)
    x = ((x - m) * c.view(n, 1, 1, 1) + m).clamp(0, 255)
    g = (x * gw).sum(1, keepdim=True)
    x = ((x - g) * s.view(n, 1, 1, 1) + g).clamp(0, 255)
    theta = f[:, 3].double() * 2 * math.pi
    rot = torch.zeros(n, 3, 3, dtype=torch.float64, device=x.device)
    rot[:, 0, 0] = 1
    rot[:, 1, 1], rot[:, 1, 2] = theta.cos(), -theta.sin()
    rot[:, 2, 1], rot[:, 2, 2] = theta.sin(), theta.cos()
    yiq = _YIQ.to(x.device)
    mat = (torch.linalg.inv(yiq) @ rot @ yiq).to(x.dtype)  # (N, 3, 3)
    return torch.einsum("nij,njhw->nihw", mat, x).clamp(0, 255)


def pad_targets(items: list[dict], size_wh) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-image boxes (pixels) -> (B, G, 4) normalized boxes and (B, G) labels, -1 padded."""
    g = max([len(t["labels"]) for t in items] + [1])
    boxes = torch.zeros(len(items), g, 4)
    labels = torch.full((len(items), g), -1, dtype=torch.long)
    for i, t in enumerate(items):
        n = len(t["labels"])
        if n:
            w, h = size_wh[i] if isinstance(size_wh, list) else size_wh
            bx = torch.as_tensor(t["boxes"], dtype=torch.float32) / torch.tensor([w, h, w, h])
            boxes[i, :n] = bx
            labels[i, :n] = torch.as_tensor(t["labels"])
    return boxes, labels


class CocoTrain(torch.utils.data.Dataset):
    """COCO training images with the SSD random crop, flip and resize to ``size``
    (the colour jitter runs on the device, on the batch: ``color_jitter``).

    As the reference, every annotation is an object (crowd boxes included) and
    the images are those with at least one annotation."""

    def __init__(self, index: D.CocoIndex, ids, size, max_samples, seed):
        self.index, self.ids, self.size, self.max_samples, self.seed = index, ids, size, max_samples, seed
        self.epoch = 0

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        from PIL import Image

        iid = self.ids[i]
        img = D.read_image(self.index.image_dir / self.index.images[iid]["file_name"])
        t = self.index.target(iid, with_masks=False)
        rng = np.random.default_rng((self.seed * 1000003 + self.epoch * 7919 + i) % (2**63))
        w, h = img.size
        boxes = t["boxes"] / np.array([w, h, w, h], np.float32)
        img, boxes, labels = ssd_crop(rng, img, boxes, t["labels"], self.max_samples)
        if rng.uniform() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
            boxes = np.stack([1 - boxes[:, 2], boxes[:, 1], 1 - boxes[:, 0], boxes[:, 3]], 1)
        s = self.size
        img = img.resize((s, s), Image.BILINEAR)
        return (torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()),
                {"boxes": (boxes * s).astype(np.float32).reshape(-1, 4), "labels": labels})


CROP_MIN_IOU = (None, 0.1, 0.3, 0.5, 0.7, 0.9, -math.inf)  # None: keep the whole image


def ssd_crop(rng, img, boxes, labels, trials=1):
    """The reference's SSD random crop of a PIL image and its boxes (xyxy, fractions of the image).

    Draws one of seven modes: the whole image, a crop whose IoU with every box exceeds
    0.1, 0.3, 0.5, 0.7 or 0.9, or any crop; a crop is 0.3..1 of each side with a side
    ratio (of the fractions) within 0.5..2 and must hold the centre of at least one
    box. ``trials`` crops are tried per mode (the reference: 1); when all fail, a new
    mode is drawn. Boxes whose centres fall outside are dropped, the rest clipped.
    """
    from runner.workloads.coco_eval import box_iou as np_iou

    if len(boxes) == 0:
        return img, boxes, labels
    while True:
        min_iou = CROP_MIN_IOU[rng.integers(0, len(CROP_MIN_IOU))]
        if min_iou is None:
            return img, boxes, labels
        for _ in range(trials):
            cw, ch = rng.uniform(0.3, 1.0), rng.uniform(0.3, 1.0)
            if not 0.5 <= cw / ch <= 2:
                continue
            left, top = rng.uniform(0, 1.0 - cw), rng.uniform(0, 1.0 - ch)
            right, bottom = left + cw, top + ch
            if not (np_iou(boxes, np.array([[left, top, right, bottom]]), np.zeros(1, bool)) > min_iou).all():
                continue
            cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
            inside = (cx > left) & (cx < right) & (cy > top) & (cy < bottom)
            if not inside.any():
                continue
            kept = np.clip(boxes[inside], [left, top, left, top], [right, bottom, right, bottom])
            kept = (kept - [left, top, left, top]) / [cw, ch, cw, ch]
            w, h = img.size
            img = img.crop((int(left * w), int(top * h), int(right * w), int(bottom * h)))
            return img, kept.astype(np.float32), labels[inside]


class CocoEval(torch.utils.data.Dataset):
    def __init__(self, index: D.CocoIndex, ids, size):
        self.index, self.ids, self.size = index, ids, size

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        from PIL import Image

        iid = self.ids[i]
        img = D.read_image(self.index.image_dir / self.index.images[iid]["file_name"])
        w, h = img.size
        img = img.resize((self.size, self.size), Image.BILINEAR)
        t = self.index.target(iid, with_masks=False)
        t["size"] = (w, h)
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()), t


def _collate(batch):
    return torch.stack([b[0] for b in batch]), [b[1] for b in batch]


# --- trainer ------------------------------------------------------------------------------

def base_lr(lr_per_32: float, global_batch: int) -> float:
    """The reference's base learning rate: 1e-3 times ``round(lr_per_32 / 1e-3 * batch / 32)``
    (Python's rounding, at least 1): MLPerf v0.5 allowed only whole multiples of 1e-3."""
    return 1e-3 * max(1, round(lr_per_32 / 1e-3 * global_batch / 32))


def decay_boundaries(cfg: dict, global_batch: int, steps_per_epoch: int) -> list[int]:
    """The steps at which the learning rate drops x0.1: ``decay_samples // batch`` (the
    reference: 160k and 200k steps of 32 images, whatever the batch), else ``decay_epochs``."""
    if "decay_samples" in cfg:
        return [int(n) // global_batch for n in cfg["decay_samples"]]
    return [e * steps_per_epoch for e in cfg["decay_epochs"]]


class Trainer:
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        self.size = cfg["image_size"]
        self.num_classes = cfg["classes"] + 1
        self.batch = cfg["batch_size"]
        if ctx.mode == "throughput":
            self.batch = ctx.throughput_batch_size(cfg["batch_size"])
        feat_sizes = feature_sizes(cfg)
        model = SSD(cfg, self.num_classes)
        scales = cfg["scales"]
        if len(scales) != len(feat_sizes) + 1:
            raise WorkloadError(f"ssd: {len(feat_sizes)} feature levels need {len(feat_sizes) + 1} scales")
        self.anchors = default_boxes(self.size, feat_sizes, scales, cfg["aspect_ratios"],
                                     cfg.get("steps")).to(ctx.device)
        self.feat_sizes = feat_sizes
        self.data = None
        if ctx.mode == "ttt":
            self._load_data(model)
        self.model = V.prepare_model(ctx, model)
        self.net = ctx.wrap(SSDLoss(self.model))
        self.step_model = compile_fn(ctx, self.net)
        gbs = self.batch * ctx.world_size
        self.lr = base_lr(cfg["lr_per_32"], gbs)
        # weight decay on every parameter (BN and biases too), as the reference's SGD
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.SGD([{"params": params, "weight_decay": cfg["weight_decay"]}], lr=self.lr,
                                   momentum=cfg["momentum"], **ctx.fused())
        self.scaler = ctx.grad_scaler()
        self.step = 0
        self.steps_per_epoch = max(1, self.train_samples // gbs) if ctx.mode == "ttt" else 1
        self.warmup = int(cfg["warmup_steps"])
        self.boundaries = decay_boundaries(cfg, gbs, self.steps_per_epoch)
        self.jitter = cfg.get("color_jitter")

    def _load_data(self, model):
        ctx, cfg = self.ctx, self.ctx.cfg
        if cfg["data"] == "generated":
            self.data = "generated"
            tr = D.generate_shapes(cfg, cfg["train_images"], 0)
            self.eval_items = D.generate_shapes(cfg, cfg["eval_images"], 1)
            self.xtr = torch.as_tensor(np.stack([t["image"] for t in tr]))
            self.btr, self.ltr = pad_targets(tr, (self.size, self.size))
            self.xtr, self.btr, self.ltr = (t.to(ctx.device) for t in (self.xtr, self.btr, self.ltr))
            self.train_samples, self.eval_samples = len(tr), len(self.eval_items)
            return
        train_idx, self.val_idx, _ = D.open_coco(ctx, self.num_classes)
        # the reference: the images with any annotation (117,266), crowd boxes trained as objects
        ids = [i for i in train_idx.ids if train_idx.all_anns[i]]
        self.data = "prepared"
        V.log_note("ssd: " + load_backbone(ctx, model.backbone))  # its sum is checked before the run
        self.train_samples, self.eval_samples = len(ids), len(self.val_idx.ids)
        workers = V.loader_workers(ctx)
        common = {"num_workers": workers, "pin_memory": ctx.cuda, "persistent_workers": workers > 0,
                  "collate_fn": _collate}
        from runner.workloads.resnet50 import EpochSampler

        self.train_set = CocoTrain(train_idx, ids, self.size, cfg["max_samples"], ctx.seed)
        self.train_sampler = EpochSampler(len(ids), ctx, self.batch)
        self.train_loader = torch.utils.data.DataLoader(self.train_set, batch_size=self.batch,
                                                        sampler=self.train_sampler, drop_last=True, **common)
        self.eval_loader = torch.utils.data.DataLoader(
            CocoEval(self.val_idx, self.val_idx.ids, self.size), batch_size=self.batch,
            sampler=EpochSampler(len(self.val_idx.ids), ctx, self.batch, False), **common)

    def hyperparameters(self) -> dict:
        cfg, ctx = self.ctx.cfg, self.ctx
        return {
            **V.step_sgd_hyperparameters(ctx, cfg, self.batch, self.lr),
            "opt_learning_rate_warmup_steps": max(1, int(cfg["warmup_steps"])),
            "opt_learning_rate_decay_boundary_epochs": self._boundary_epochs(),
            "opt_learning_rate_decay_boundary_steps": list(self.boundaries),
            **{f"color_jitter_{k}": v for k, v in (self.jitter or {}).items()},
            "max_samples": cfg["max_samples"],
            "model_bn_span": self.batch,
            "image_size": self.size,
            "num_default_boxes": int(self.anchors.shape[0]),
        }

    def _boundary_epochs(self) -> list:
        cfg = self.ctx.cfg
        if "decay_samples" not in cfg:
            return list(cfg["decay_epochs"])
        if self.ctx.mode != "ttt":
            return []
        gbs = self.batch * self.ctx.world_size
        return [round(b * gbs / self.train_samples, 2) for b in self.boundaries]

    def _train_step(self, x, boxes, labels):
        cfg = self.ctx.cfg
        lr = V.step_lr(self.step, self.warmup, cfg["warmup_factor"], self.lr, self.boundaries, 0.1)
        V.set_lr(self.opt, lr)
        self.step += 1
        gloc, glab = match(self.anchors, boxes, labels)
        with self.ctx.autocast():
            loss = self.step_model(x, gloc, glab)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()

    def _images(self, u8, g=None):
        """uint8 NHWC -> normalized NCHW on the device; with a generator ``g`` and the scale's
        ``color_jitter``, jittered first (training only)."""
        if g is None or not self.jitter:
            return V.to_device_images(self.ctx, u8)
        ctx = self.ctx
        x = u8.to(ctx.device, non_blocking=True).permute(0, 3, 1, 2).float()
        u = torch.rand(x.shape[0], 4, device=ctx.device, generator=g)
        j = self.jitter
        x = color_jitter(x, u, j["brightness"], j["contrast"], j["saturation"], j["hue"])
        x = (x - torch.tensor(V.IMAGENET_MEAN, device=ctx.device).view(1, 3, 1, 1)) / \
            torch.tensor(V.IMAGENET_STD, device=ctx.device).view(1, 3, 1, 1)
        return x.contiguous(memory_format=torch.channels_last) if ctx.channels_last else x

    def train_epoch(self, epoch: int) -> None:
        ctx = self.ctx
        self.model.train()
        if self.data == "generated":
            g = V.device_generator(ctx, ctx.seed * 7919 + epoch)
            n = self.xtr.shape[0]
            perm = torch.randperm(n, device=ctx.device, generator=g)[ctx.shard(n)]
            flips = torch.rand(len(perm), device=ctx.device, generator=g) < 0.5
            for s in range(0, len(perm) - self.batch + 1, self.batch):
                idx = perm[s: s + self.batch]
                x, b = self._images(self.xtr[idx], g), self.btr[idx].clone()
                f = flips[s: s + self.batch]
                x = torch.where(f.view(-1, 1, 1, 1), x.flip(3), x)
                fb = torch.stack([1 - b[..., 2], b[..., 1], 1 - b[..., 0], b[..., 3]], -1)
                b = torch.where(f.view(-1, 1, 1), fb, b)
                self._train_step(x, b, self.ltr[idx])
                ctx.mark_step()
            return
        self.train_sampler.epoch = epoch
        self.train_set.epoch = epoch
        g = V.device_generator(ctx, (ctx.seed * 7919 + epoch) * 1009 + ctx.rank)
        for images, targets in self.train_loader:
            b, lab = pad_targets(targets, (self.size, self.size))
            self._train_step(self._images(images, g), b.to(ctx.device), lab.to(ctx.device))
            ctx.mark_step()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        ctx = self.ctx
        self.model.eval()
        ev = COCOEvaluator("bbox")
        if self.data == "generated":
            n = len(self.eval_items)
            per = n // ctx.world_size
            mine = self.eval_items[ctx.rank * per: n if ctx.rank == ctx.world_size - 1 else (ctx.rank + 1) * per]
            batches = []
            for s in range(0, len(mine), 64):
                part = mine[s: s + 64]
                for t in part:
                    t["size"] = (self.size, self.size)
                batches.append((torch.as_tensor(np.stack([t["image"] for t in part])), part))
        else:
            batches = self.eval_loader
        for images, targets in batches:
            with ctx.autocast():
                ploc, pconf = self.model(self._images(images))
            for i, t in enumerate(targets):
                b, s, lab = detect(ploc[i], pconf[i], self.anchors, **self.ctx.cfg.get("detect", {}))
                w, h = t["size"]
                b = (b * torch.tensor([w, h, w, h], device=b.device)).cpu().numpy()
                ev.add(t["labels"], s.cpu().numpy(), lab.cpu().numpy(), gt_boxes=t["boxes"], det_boxes=b,
                       gt_crowd=t.get("crowd"))
        states = ctx.gather(ev.state())
        ap = None
        if ctx.is_main:
            total = COCOEvaluator("bbox")
            total.merge(states)
            ap = total.summarize()["AP"]
        ap = ctx.broadcast(ap)
        self.model.train()
        return float(ap)

    # --- throughput mode ---
    def throughput_batch(self) -> int:
        return self.batch

    def throughput_step(self) -> None:
        if not hasattr(self, "_synthetic"):
            ctx = self.ctx
            g = V.device_generator(ctx, ctx.seed + ctx.rank)
            x = V.synthetic_images(ctx, self.batch, self.size, g)
            boxes, labels = V.synthetic_boxes(ctx, self.batch, self.num_classes, g, (0.1, 0.8), (0.05, 0.3))
            boxes = boxes.clamp(0, 1)
            self._synthetic = (x, boxes, labels)
            self.model.train()
        self._train_step(*self._synthetic)


def build(ctx) -> Trainer:
    return Trainer(ctx)
