"""Mask R-CNN, ResNet-50-FPN (MLPerf v0.5 "maskrcnn", COCO box and mask AP).

The model of the MLPerf reference (maskrcnn-benchmark's R-50-FPN 1x): a
ResNet-50 with frozen BN (stem and layer1 frozen), FPN P2-P6 with 256
channels, an RPN with one anchor size per level (32..512) and three aspect
ratios (IoU 0.7/0.3, 256 anchors per image, half positive; NMS 0.7, 2000
candidates per level before it, ``num_image_candidates`` after it), RoIAlign
7x7 (sampling 2) on P2-P5 by box size, a two-layer 1024-wide box head with
class-specific regression (512 RoIs per image, a quarter positive, IoU 0.5),
and a mask head of four 3x3 convolutions, a 2x up-convolution and per-class
28x28 masks trained on the positive RoIs. Inference: score 0.05, per-class NMS
0.5, 100 detections per image, masks pasted at the image's resolution and cut
at 0.5; COCO box and mask AP by pycocotools (runner/workloads/coco_eval.py).

Shapes are kept static where that is cheap: RoIs are padded per image and
RoIAlign samples every level (runner/workloads/detection.py), so that the
heads run the same kernels every step.

Full scale reads COCO 2017 (shorter side 800, longer at most 1333, flip),
polygons and RLE rasterized by pycocotools at half resolution for the mask
targets; an ImageNet ResNet-50 in torchvision's layout at
``<data>/pretrained/resnet50.pth`` initializes the backbone (the reference
starts from one; without it the backbone trains from scratch with BN and a
note says so). Small and tiny scales train on generated shapes at 96 and 64
pixels with a narrower and shallower network (``width``, ``layers``,
``fpn_channels``, ``box_fc``, ``mask_convs`` in workloads.yml).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from runner.workloads import detection as D
from runner.workloads import vision as V
from runner.workloads.base import compile_fn
from runner.workloads.coco_eval import COCOEvaluator

BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
RPN_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
STRIDES = (4, 8, 16, 32, 64)


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
        lat = [l(f) for l, f in zip(self.lateral, feats)]
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


def grid_anchors(feat_sizes, sizes, ratios, device) -> torch.Tensor:
    """Anchors of all levels (level, row, column, ratio order), xyxy pixels."""
    out = []
    for (h, w), size, stride in zip(feat_sizes, sizes, STRIDES):
        base = []
        for r in ratios:
            ws = round(math.sqrt(size * size / r))
            hs = round(ws * r)
            base.append([-(ws - 1) / 2, -(hs - 1) / 2, (ws - 1) / 2, (hs - 1) / 2])
        base = torch.tensor(base, dtype=torch.float32, device=device)
        ys = (torch.arange(h, device=device, dtype=torch.float32) * stride)
        xs = (torch.arange(w, device=device, dtype=torch.float32) * stride)
        cy, cx = torch.meshgrid(ys, xs, indexing="ij")
        shift = torch.stack([cx, cy, cx, cy], -1).reshape(-1, 1, 4)
        out.append((shift + base[None]).reshape(-1, 4))
    return out


def sample_mask(cand_pos, cand_neg, total, pos_frac, gen=None):
    """Random subsets per row: at most ``total*pos_frac`` positives, the rest negatives."""
    r = torch.rand(cand_pos.shape, device=cand_pos.device, generator=gen)
    npos = cand_pos.sum(1).clamp(max=int(total * pos_frac))
    pr = torch.where(cand_pos, r, torch.full_like(r, -1.0)).argsort(1, descending=True).argsort(1)
    pos = cand_pos & (pr < npos[:, None])
    nneg = (total - npos).clamp(min=0)
    nneg = torch.minimum(nneg, cand_neg.sum(1))
    nr = torch.where(cand_neg, r, torch.full_like(r, -1.0)).argsort(1, descending=True).argsort(1)
    neg = cand_neg & (nr < nneg[:, None])
    return pos, neg


class MaskRCNN(nn.Module):
    def __init__(self, cfg: dict, num_classes: int, frozen_bn: bool):
        super().__init__()
        norm = V.FrozenBatchNorm2d if frozen_bn else nn.BatchNorm2d
        self.backbone = V.ResNetTrunk(V.Bottleneck, cfg["layers"], cfg["width"], norm=norm,
                                      zero_init=not frozen_bn, return_stages=[0, 1, 2, 3])
        V.init_convs(self.backbone)
        if frozen_bn:  # the reference freezes the stem and layer1
            for m in (self.backbone.conv1, self.backbone.layer1):
                for p in m.parameters():
                    p.requires_grad_(False)
        c = cfg["fpn_channels"]
        self.fpn = FPN(self.backbone.channels, c)
        self.ratios = (0.5, 1.0, 2.0)
        self.rpn = RPNHead(c, len(self.ratios))
        self.box_head = BoxHead(c, 7, cfg["box_fc"], num_classes)
        self.mask_head = MaskHead(c, cfg.get("mask_width", c), cfg["mask_convs"], num_classes)
        self.num_classes = num_classes

    def features(self, x):
        return self.fpn(self.backbone(x))


class Detector:
    """The training and inference logic around the modules (RPN, sampling, heads, losses)."""

    def __init__(self, model: MaskRCNN, cfg: dict, ctx, feature_fn=None, roi_align_fn=None):
        self.m = model
        self.cfg = cfg
        self.ctx = ctx
        self.features = feature_fn or model.features
        self.roi_align = roi_align_fn or D.multilevel_roi_align
        self.sizes = cfg["anchor_sizes"]
        self._anchor_cache = {}
        self.gen = None
        self.sampling = int(cfg.get("roi_sampling", 2))
        self.mask_pool = int(cfg.get("mask_pool", 14))  # masks are twice that size

    def anchors(self, feats):
        key = tuple(tuple(f.shape[-2:]) for f in feats)
        if key not in self._anchor_cache:
            self._anchor_cache[key] = grid_anchors([f.shape[-2:] for f in feats], self.sizes,
                                                   self.m.ratios, feats[0].device)
        return self._anchor_cache[key]

    # --- RPN ---
    def rpn_loss(self, anchors, logits, deltas, gt_boxes, gt_valid, sizes):
        a = torch.cat(anchors)
        lg = torch.cat(logits, 1).float()
        dl = torch.cat(deltas, 1).float()
        n = lg.shape[0]
        iou = D.box_iou(a[None].expand(n, -1, -1), gt_boxes)  # (N, A, G)
        iou = iou.masked_fill(~gt_valid[:, None, :], -1.0)
        best, idx = iou.max(2)
        inside = ((a[None, :, 0] >= 0) & (a[None, :, 1] >= 0)
                  & (a[None, :, 2] <= sizes[:, 1:2]) & (a[None, :, 3] <= sizes[:, 0:1]))
        gt_best = iou.max(1).values  # (N, G)
        low_q = ((iou == gt_best[:, None, :]) & (gt_best[:, None, :] > 0) & gt_valid[:, None, :]).any(2)
        pos = ((best >= 0.7) | low_q) & inside
        neg = (best < 0.3) & (best >= -0.5) & inside & ~pos
        neg = neg | ((~gt_valid.any(1))[:, None] & inside)
        spos, sneg = sample_mask(pos, neg, self.cfg["rpn_batch"], 0.5, self.gen)
        sampled = (spos | sneg).float()
        count = sampled.sum().clamp(min=1.0)
        obj = (F.binary_cross_entropy_with_logits(lg, spos.float(), reduction="none") * sampled).sum() / count
        tgt = D.encode(gt_boxes.gather(1, idx[..., None].expand(-1, -1, 4)), a[None].expand(n, -1, -1),
                       RPN_WEIGHTS)
        box = (F.smooth_l1_loss(dl, tgt, beta=1.0 / 9, reduction="none").sum(2) * spos).sum() / count
        return obj, box

    @torch.no_grad()
    def proposals(self, anchors, logits, deltas, sizes, training):
        pre = self.cfg["pre_nms_top"] if training else self.cfg.get("pre_nms_top_test", self.cfg["pre_nms_top"])
        post = self.cfg["num_image_candidates"] if training else self.cfg.get(
            "num_image_candidates_test", self.cfg["num_image_candidates"])
        n = logits[0].shape[0]
        boxes, scores, valid = [], [], []
        for a, lg, dl in zip(anchors, logits, deltas):  # per level: the best ``pre`` anchors, sorted
            k = min(pre, lg.shape[1])
            sc, top = lg.float().topk(k, dim=1)
            d = dl.gather(1, top[..., None].expand(-1, -1, 4))
            b = D.clip_to_sizes(D.decode(d, a[top], RPN_WEIGHTS), sizes)
            ok = ((b[..., 2] - b[..., 0]) > 0) & ((b[..., 3] - b[..., 1]) > 0)
            if k < pre:  # levels with fewer anchors: padding
                b = F.pad(b, (0, 0, 0, pre - k))
                sc = F.pad(sc, (0, pre - k))
                ok = F.pad(ok, (0, pre - k))
            boxes.append(b)
            scores.append(sc)
            valid.append(ok)
        nl = len(boxes)
        b = torch.stack(boxes, 1)  # (N, L, pre, 4)
        sc = torch.stack(scores, 1)
        keep = D.nms_sorted_padded(b.view(n * nl, pre, 4), torch.stack(valid, 1).view(n * nl, pre),
                                   0.7).view(n, nl, pre)
        sc = sc.masked_fill(~keep, float("-inf")).view(n, -1)
        top_s, top = sc.topk(min(post, sc.shape[1]), dim=1)
        top_b = b.view(n, -1, 4).gather(1, top[..., None].expand(-1, -1, 4))
        ok = torch.isfinite(top_s)
        out = [top_b[i][ok[i]] for i in range(n)]
        return out

    # --- box / mask heads ---
    def sample_rois(self, props, gt_boxes, gt_labels, gt_valid):
        """512 (``roi_batch``) RoIs per image from proposals and ground truth, padded."""
        k = self.cfg["roi_batch"]
        n = len(props)
        dev = gt_boxes.device
        rois = torch.zeros(n, k, 4, device=dev)
        labels = torch.zeros(n, k, dtype=torch.long, device=dev)
        valid = torch.zeros(n, k, dtype=torch.bool, device=dev)
        matched = torch.zeros(n, k, dtype=torch.long, device=dev)
        for i in range(n):
            g = gt_boxes[i][gt_valid[i]]
            cand = torch.cat([props[i], g])
            if len(g):
                iou = D.box_iou(cand, g)
                best, idx = iou.max(1)
            else:
                best = torch.zeros(len(cand), device=dev)
                idx = torch.zeros(len(cand), dtype=torch.long, device=dev)
            pos = best >= 0.5
            neg = best < 0.5
            sp, sn = sample_mask(pos[None], neg[None], k, 0.25, self.gen)
            sel = torch.nonzero(sp[0] | sn[0]).squeeze(1)[:k]
            m = len(sel)
            rois[i, :m] = cand[sel]
            valid[i, :m] = True
            gl = gt_labels[i][gt_valid[i]]
            lab = gl[idx[sel]] if len(g) else torch.zeros(m, dtype=torch.long, device=dev)
            labels[i, :m] = torch.where(pos[sel], lab, torch.zeros_like(lab))
            full_idx = torch.nonzero(gt_valid[i]).squeeze(1)
            matched[i, :m] = full_idx[idx[sel]] if len(g) else 0
        return rois, labels, valid, matched

    def box_forward(self, feats, rois):
        n, k = rois.shape[:2]
        x = self.roi_align(feats[:4], rois, 7, STRIDES[:4], self.sampling)
        cls, box = self.m.box_head(x.reshape(n * k, -1, 7, 7))
        return cls.view(n, k, -1), box.view(n, k, -1, 4)

    def mask_forward(self, feats, rois):
        n, k = rois.shape[:2]
        p = self.mask_pool
        x = self.roi_align(feats[:4], rois, p, STRIDES[:4], self.sampling)
        return self.m.mask_head(x.reshape(n * k, -1, p, p)).view(n, k, -1, 2 * p, 2 * p)

    def loss(self, images, sizes, gt_boxes, gt_labels, gt_masks, mask_stride=1):
        gt_valid = gt_labels > 0
        feats = self.features(images)
        anchors = self.anchors(feats)
        logits, deltas = self.m.rpn(feats)
        obj, rbox = self.rpn_loss(anchors, logits, deltas, gt_boxes, gt_valid, sizes)
        props = self.proposals(anchors, [x.detach() for x in logits], [x.detach() for x in deltas],
                               sizes, True)
        rois, labels, valid, matched = self.sample_rois(props, gt_boxes, gt_labels, gt_valid)
        cls, box = self.box_forward(feats, rois)
        cls, box = cls.float(), box.float()
        count = valid.sum().clamp(min=1)
        cls_loss = (F.cross_entropy(cls.flatten(0, 1), labels.flatten(), reduction="none")
                    * valid.flatten()).sum() / count
        pos = valid & (labels > 0)
        tgt = D.encode(gt_boxes.gather(1, matched[..., None].expand(-1, -1, 4)), rois, BOX_WEIGHTS)
        pred = box.gather(2, labels[..., None, None].expand(-1, -1, 1, 4)).squeeze(2)
        box_loss = (F.smooth_l1_loss(pred, tgt, beta=1.0, reduction="none").sum(2) * pos).sum() / count
        # masks: the positive RoIs, at most mask_batch per image
        mk = self.cfg["mask_batch"]
        order = torch.sort(pos.float(), dim=1, descending=True, stable=True).indices[:, :mk]
        mrois = rois.gather(1, order[..., None].expand(-1, -1, 4))
        mpos = pos.gather(1, order)
        mlab = labels.gather(1, order)
        mgt = matched.gather(1, order)
        r = 2 * self.mask_pool
        logits_m = self.mask_forward(feats, mrois).float()
        logits_m = logits_m.gather(2, mlab[..., None, None, None].expand(-1, -1, 1, r, r)).squeeze(2)
        with torch.no_grad():
            t = D.roi_align(gt_masks.to(logits_m.dtype), mrois, r, 1.0 / mask_stride, 2)  # (N, K, G, r, r)
            t = t.gather(2, mgt[..., None, None, None].expand(-1, -1, 1, r, r)).squeeze(2)
            t = (t >= 0.5).float()
        mcount = (mpos.sum() * r * r).clamp(min=1)
        mask_loss = (F.binary_cross_entropy_with_logits(logits_m, t, reduction="none")
                     * mpos[..., None, None]).sum() / mcount
        return obj + rbox + cls_loss + box_loss + mask_loss

    @torch.no_grad()
    def detect(self, images, sizes):
        """Per image: boxes (xyxy, input pixels), scores, labels, mask probabilities (D, 28, 28)."""
        feats = self.features(images)
        anchors = self.anchors(feats)
        logits, deltas = self.m.rpn(feats)
        props = self.proposals(anchors, logits, deltas, sizes, False)
        k = max(1, max(len(p) for p in props))
        n = len(props)
        rois = torch.zeros(n, k, 4, device=images.device)
        for i, p in enumerate(props):
            rois[i, :len(p)] = p
        cls, box = self.box_forward(feats, rois)
        scores = F.softmax(cls.float(), -1)
        dets = []
        maxd = self.cfg.get("detections_per_image", 100)
        for i, p in enumerate(props):
            h, w = float(sizes[i, 0]), float(sizes[i, 1])
            m = len(p)
            b = D.clip_boxes(D.decode(box[i, :m].float(), p[:, None, :].expand(-1, box.shape[2], -1),
                                      BOX_WEIGHTS), h, w)[:, 1:]
            s = scores[i, :m, 1:]
            lab = torch.arange(1, s.shape[1] + 1, device=s.device).expand_as(s)
            ok = s > 0.05
            b, s, lab = b[ok], s[ok], lab[ok]
            keep = D.batched_nms(b, s, lab, 0.5)[:maxd]
            dets.append((b[keep], s[keep], lab[keep]))
        kd = max(1, max(len(d[0]) for d in dets))
        drois = torch.zeros(n, kd, 4, device=images.device)
        for i, d in enumerate(dets):
            drois[i, :len(d[0])] = d[0]
        mlog = self.mask_forward(feats, drois).float()
        out = []
        for i, (b, s, lab) in enumerate(dets):
            probs = torch.sigmoid(mlog[i, torch.arange(len(lab), device=lab.device), lab])
            out.append((b, s, lab, probs))
        return out


def paste_masks(probs: torch.Tensor, boxes: torch.Tensor, h: int, w: int, thr=0.5) -> torch.Tensor:
    """Mask probabilities (D, r, r) placed into (h, w) at their boxes, cut at ``thr``: bool (D, h, w)."""
    if len(boxes) == 0:
        return torch.zeros(0, h, w, dtype=torch.bool, device=boxes.device)
    ys = torch.arange(h, device=boxes.device, dtype=torch.float32) + 0.5
    xs = torch.arange(w, device=boxes.device, dtype=torch.float32) + 0.5
    bw = (boxes[:, 2] - boxes[:, 0]).clamp(min=1e-3)
    bh = (boxes[:, 3] - boxes[:, 1]).clamp(min=1e-3)
    gx = (xs[None] - boxes[:, 0:1]) / bw[:, None] * 2 - 1  # (D, w)
    gy = (ys[None] - boxes[:, 1:2]) / bh[:, None] * 2 - 1  # (D, h)
    grid = torch.stack([gx[:, None, :].expand(-1, h, -1), gy[:, :, None].expand(-1, -1, w)], -1)
    out = F.grid_sample(probs[:, None].float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out[:, 0] >= thr


# --- data -------------------------------------------------------------------------------------

def resize_scale(h, w, min_size, max_size) -> float:
    s = min_size / min(h, w)
    if max(h, w) * s > max_size:
        s = max_size / max(h, w)
    return s


class CocoSet(torch.utils.data.Dataset):
    """COCO images resized (shorter side ``min_size``), flipped in training, with targets."""

    def __init__(self, index: D.CocoIndex, ids, cfg, train, seed, mask_stride):
        self.index, self.ids, self.cfg, self.train, self.seed = index, ids, cfg, train, seed
        self.mask_stride = mask_stride
        self.epoch = 0

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        from PIL import Image

        iid = self.ids[i]
        meta = self.index.images[iid]
        h0, w0 = meta["height"], meta["width"]
        s = resize_scale(h0, w0, self.cfg["min_size"], self.cfg["max_size"])
        h, w = int(round(h0 * s)), int(round(w0 * s))
        img = D.read_image(self.index.image_dir / meta["file_name"]).resize((w, h), Image.BILINEAR)
        if not self.train:
            t = self.index.target(iid, with_masks=False, scale_xy=(s, s))
            t.update(id=iid, orig=(h0, w0), scale=s)
            return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()), t
        ms = self.mask_stride
        mh, mw = (h + ms - 1) // ms, (w + ms - 1) // ms
        t = self.index.target(iid, with_masks=True, scale_xy=(s * mw / w, s * mh / h), out_hw=(mh, mw))
        t["boxes"] = t["boxes"] * np.array([w / mw, h / mh, w / mw, h / mh], np.float32)
        keep = ~t["crowd"]
        t = {k: v[keep] for k, v in t.items()}
        rng = np.random.default_rng((self.seed * 1000003 + self.epoch * 7919 + i) % (2**63))
        if rng.uniform() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
            b = t["boxes"]
            t["boxes"] = np.stack([w - b[:, 2], b[:, 1], w - b[:, 0], b[:, 3]], 1).astype(np.float32)
            t["masks"] = t["masks"][:, :, ::-1].copy()
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()), t


def collate(batch, divisor=32, mask_stride=1):
    """Pad images to a common size (a multiple of ``divisor``); targets padded per batch."""
    h = max(b[0].shape[0] for b in batch)
    w = max(b[0].shape[1] for b in batch)
    h, w = (h + divisor - 1) // divisor * divisor, (w + divisor - 1) // divisor * divisor
    imgs = torch.zeros(len(batch), h, w, 3, dtype=torch.uint8)
    sizes = torch.zeros(len(batch), 2)
    for i, (im, _) in enumerate(batch):
        imgs[i, :im.shape[0], :im.shape[1]] = im
        sizes[i] = torch.tensor([im.shape[0], im.shape[1]])
    targets = [b[1] for b in batch]
    if "masks" not in targets[0]:
        return imgs, sizes, targets
    g = max([len(t["labels"]) for t in targets] + [1])
    mh, mw = (h + mask_stride - 1) // mask_stride, (w + mask_stride - 1) // mask_stride
    boxes = torch.zeros(len(batch), g, 4)
    labels = torch.zeros(len(batch), g, dtype=torch.long)
    masks = torch.zeros(len(batch), g, mh, mw, dtype=torch.uint8)
    for i, t in enumerate(targets):
        n = len(t["labels"])
        if n:
            boxes[i, :n] = torch.as_tensor(t["boxes"])
            labels[i, :n] = torch.as_tensor(t["labels"])
            m = torch.as_tensor(t["masks"])
            masks[i, :n, :m.shape[1], :m.shape[2]] = m
    return imgs, sizes, (boxes, labels, masks)


# --- trainer ----------------------------------------------------------------------------------

class Trainer:
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        self.num_classes = cfg["classes"] + 1
        self.batch = cfg["batch_size"]
        if ctx.mode == "throughput":
            self.batch = ctx.throughput_batch_size(cfg["batch_size"])
        else:
            self.batch = ctx.by_memory(cfg.get("batch_by_memory"), self.batch)
        self.mask_stride = int(cfg.get("mask_stride", 1))
        frozen = cfg.get("backbone_norm", "bn") == "frozen"
        pre = Path(ctx.data) / "pretrained" / "resnet50.pth" if ctx.data else None
        if frozen and ctx.mode == "ttt" and not (pre and pre.is_file()):
            V.log_note(f"maskrcnn: no ImageNet ResNet-50 at {pre}: the backbone trains from scratch with BN")
            frozen = False
        model = MaskRCNN(cfg, self.num_classes, frozen)
        if frozen and pre and pre.is_file():
            n = V.load_pretrained(model.backbone, pre)
            V.log_note(f"maskrcnn: backbone initialized from {pre} ({n} tensors)")
        self.data = None
        if ctx.mode == "ttt":
            self._load_data()
        self.model = V.prepare_model(ctx, model)
        # several processes: gradients are averaged by one flat all-reduce per step (the
        # detector calls its modules piecewise, which DistributedDataParallel does not follow)
        if ctx.distributed:
            import torch.distributed as dist

            for t in list(self.model.parameters()) + list(self.model.buffers()):
                dist.broadcast(t.data, 0)
        inner = self.model
        feature_fn = self.model.features
        roi_align_fn = None
        if ctx.compile and ctx.mode == "throughput":  # fixed image size: the backbone and FPN compile well
            feature_fn = compile_fn(ctx, feature_fn)
            if cfg.get("compile_roi_align"):  # the gathers and their weights fuse into one kernel
                roi_align_fn = compile_fn(ctx, D.multilevel_roi_align)
        self.det = Detector(inner, cfg, ctx, feature_fn, roi_align_fn)
        gbs = self.batch * ctx.world_size
        self.lr = round(cfg["lr_per_image"] * gbs, 6)
        self.opt = torch.optim.SGD(V.param_groups(self.model, cfg["weight_decay"]), lr=self.lr,
                                   momentum=cfg["momentum"], **ctx.fused())
        self.scaler = ctx.grad_scaler()
        self.step = 0
        self.steps_per_epoch = max(1, self.train_samples // gbs) if ctx.mode == "ttt" else 1
        self.warmup = int(cfg["warmup_steps"])
        self.boundaries = [int(e * self.steps_per_epoch) for e in cfg["decay_epochs"]]

    def _load_data(self):
        ctx, cfg = self.ctx, self.ctx.cfg
        if cfg["data"] == "generated":
            self.data = "generated"
            tr = D.generate_shapes(cfg, cfg["train_images"], 0)
            self.eval_items = D.generate_shapes(cfg, cfg["eval_images"], 1)
            s = cfg["image_size"]
            g = max(len(t["labels"]) for t in tr)
            n = len(tr)
            self.xtr = torch.as_tensor(np.stack([t["image"] for t in tr]))
            self.btr = torch.zeros(n, g, 4)
            self.ltr = torch.zeros(n, g, dtype=torch.long)
            self.mtr = torch.zeros(n, g, s, s, dtype=torch.uint8)
            for i, t in enumerate(tr):
                k = len(t["labels"])
                self.btr[i, :k] = torch.as_tensor(t["boxes"])
                self.ltr[i, :k] = torch.as_tensor(t["labels"])
                self.mtr[i, :k] = torch.as_tensor(t["masks"])
            self.xtr, self.btr, self.ltr, self.mtr = (t.to(ctx.device) for t in (self.xtr, self.btr, self.ltr, self.mtr))
            self.train_samples, self.eval_samples = n, len(self.eval_items)
            return
        train_idx, self.val_idx, ids = D.open_coco(ctx, self.num_classes)
        self.data = "prepared"
        self.train_samples, self.eval_samples = len(ids), len(self.val_idx.ids)
        workers = V.loader_workers(ctx)
        ms = self.mask_stride

        def train_collate(b):
            return collate(b, 32, ms)

        common = {"num_workers": workers, "pin_memory": ctx.cuda, "persistent_workers": workers > 0}
        from runner.workloads.resnet50 import EpochSampler

        self.train_set = CocoSet(train_idx, ids, cfg, True, ctx.seed, ms)
        self.train_sampler = EpochSampler(len(ids), ctx, self.batch)
        self.train_loader = torch.utils.data.DataLoader(self.train_set, batch_size=self.batch,
                                                        sampler=self.train_sampler, drop_last=True,
                                                        collate_fn=train_collate, **common)
        self.eval_loader = torch.utils.data.DataLoader(
            CocoSet(self.val_idx, self.val_idx.ids, cfg, False, ctx.seed, ms), batch_size=self.batch,
            sampler=EpochSampler(len(self.val_idx.ids), ctx, self.batch, False), collate_fn=collate, **common)

    def hyperparameters(self) -> dict:
        cfg, ctx = self.ctx.cfg, self.ctx
        return {
            **V.step_sgd_hyperparameters(ctx, cfg, self.batch, self.lr),
            "opt_learning_rate_warmup_steps": int(cfg["warmup_steps"]),
            "opt_learning_rate_decay_steps": self.boundaries,
            "num_image_candidates": cfg["num_image_candidates"],
            "min_image_size": cfg.get("min_size", cfg.get("image_size")),
            "max_image_size": cfg.get("max_size", cfg.get("image_size")),
            "model_layers": list(cfg["layers"]),
            "model_width": cfg["width"],
        }

    def _train_step(self, images, sizes, boxes, labels, masks):
        cfg = self.ctx.cfg
        lr = V.step_lr(self.step, self.warmup, cfg["warmup_factor"], self.lr, self.boundaries, 0.1)
        V.set_lr(self.opt, lr)
        self.step += 1
        with self.ctx.autocast():
            loss = self.det.loss(images, sizes, boxes, labels, masks, self.mask_stride)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.ctx.distributed:
            self._allreduce_grads()
        self.scaler.step(self.opt)
        self.scaler.update()

    def _allreduce_grads(self):
        import torch.distributed as dist

        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.ctx.world_size
        o = 0
        for g in grads:
            g.copy_(flat[o: o + g.numel()].view_as(g))
            o += g.numel()

    def _images(self, u8):
        return V.to_device_images(self.ctx, u8)

    def train_epoch(self, epoch: int) -> None:
        ctx = self.ctx
        self.model.train()
        self._freeze_bn_stats()
        if self.data == "generated":
            g = V.device_generator(ctx, ctx.seed * 7919 + epoch)
            self.det.gen = g
            n = self.xtr.shape[0]
            s = self.ctx.cfg["image_size"]
            perm = torch.randperm(n, device=ctx.device, generator=g)[ctx.shard(n)]
            flips = torch.rand(len(perm), device=ctx.device, generator=g) < 0.5
            sizes = torch.tensor([[s, s]], device=ctx.device, dtype=torch.float32).expand(self.batch, 2)
            for st in range(0, len(perm) - self.batch + 1, self.batch):
                idx = perm[st: st + self.batch]
                f = flips[st: st + self.batch]
                x, b, m = self.xtr[idx], self.btr[idx], self.mtr[idx]
                x = torch.where(f.view(-1, 1, 1, 1), x.flip(2), x)
                m = torch.where(f.view(-1, 1, 1, 1), m.flip(3), m)
                fb = torch.stack([s - b[..., 2], b[..., 1], s - b[..., 0], b[..., 3]], -1)
                b = torch.where(f.view(-1, 1, 1), fb, b)
                self._train_step(self._images(x), sizes, b, self.ltr[idx], m)
                ctx.mark_step()
            return
        self.train_sampler.epoch = epoch
        self.train_set.epoch = epoch
        for images, sizes, (b, lab, m) in self.train_loader:
            dev = ctx.device
            self._train_step(self._images(images), sizes.to(dev), b.to(dev), lab.to(dev), m.to(dev))
            ctx.mark_step()

    def _freeze_bn_stats(self):
        pass  # FrozenBatchNorm2d has no statistics to update; BN (from scratch) trains as usual

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        ctx = self.ctx
        self.model.eval()
        evb, evm = COCOEvaluator("bbox"), COCOEvaluator("segm")
        if self.data == "generated":
            n = len(self.eval_items)
            per = n // ctx.world_size
            mine = self.eval_items[ctx.rank * per: n if ctx.rank == ctx.world_size - 1 else (ctx.rank + 1) * per]
            s = ctx.cfg["image_size"]
            batches = []
            for st in range(0, len(mine), 32):
                part = mine[st: st + 32]
                ts = [dict(t, orig=(s, s), scale=1.0) for t in part]
                batches.append((torch.as_tensor(np.stack([t["image"] for t in part])),
                                torch.tensor([[s, s]] * len(part), dtype=torch.float32), ts))
        else:
            batches = self.eval_loader
        for images, sizes, targets in batches:
            with ctx.autocast():
                out = self.det.detect(self._images(images), sizes.to(ctx.device))
            for (b, sc, lab, probs), t in zip(out, targets):
                h0, w0 = t["orig"]
                b = b / t["scale"]
                masks = paste_masks(probs, b, h0, w0).cpu().numpy()
                sc, lab, b = sc.cpu().numpy(), lab.cpu().numpy(), b.cpu().numpy()
                if "id" in t:  # COCO: the image's annotations as the JSON holds them
                    anns, label_of = self.val_idx.all_anns[t["id"]], self.val_idx.label_of
                    evb.add_annotations(h0, w0, anns, label_of, sc, lab, det_boxes=b)
                    evm.add_annotations(h0, w0, anns, label_of, sc, lab, det_masks=masks)
                    continue
                crowd = t.get("crowd")
                evb.add(t["labels"], sc, lab, gt_boxes=t["boxes"], det_boxes=b, gt_crowd=crowd)
                evm.add(t["labels"], sc, lab, gt_masks=t["masks"], det_masks=masks, gt_crowd=crowd)
        states = ctx.gather((evb.state(), evm.state()))
        q = None
        if ctx.is_main:
            tb, tm = COCOEvaluator("bbox"), COCOEvaluator("segm")
            tb.merge([s[0] for s in states])
            tm.merge([s[1] for s in states])
            q = {"BBOX": tb.summarize()["AP"], "SEGM": tm.summarize()["AP"]}
        q = ctx.broadcast(q)
        self.model.train()
        return q

    # --- throughput mode ---
    def throughput_batch(self) -> int:
        return self.batch

    def throughput_step(self) -> None:
        if not hasattr(self, "_synthetic"):
            ctx, cfg = self.ctx, self.ctx.cfg
            g = V.device_generator(ctx, ctx.seed + ctx.rank)
            self.det.gen = g
            h, w = cfg.get("throughput_image", [cfg.get("image_size", 64)] * 2)
            x = V.synthetic_images(ctx, self.batch, (h, w), g)
            boxes, labels = V.synthetic_boxes(ctx, self.batch, self.num_classes, g, (0.2, 0.6), (0.1, 0.3))
            boxes = boxes * torch.tensor([w, h, w, h], device=ctx.device)
            ms = self.mask_stride
            yy = (torch.arange((h + ms - 1) // ms, device=ctx.device) + 0.5) * ms
            xx = (torch.arange((w + ms - 1) // ms, device=ctx.device) + 0.5) * ms
            bb = boxes[..., None, None]
            masks = ((yy[:, None] >= bb[..., 1, :, :]) & (yy[:, None] < bb[..., 3, :, :])
                     & (xx[None] >= bb[..., 0, :, :]) & (xx[None] < bb[..., 2, :, :])).to(torch.uint8)
            sizes = torch.tensor([[h, w]], device=ctx.device, dtype=torch.float32).expand(self.batch, 2)
            self._synthetic = (x, sizes, boxes, labels, masks)
            self.model.train()
        self._train_step(*self._synthetic)


def build(ctx) -> Trainer:
    return Trainer(ctx)
