"""Mask R-CNN's detector logic around the modules: RPN targets and proposals, RoI sampling,
the box and mask heads' losses, inference, and the pasting of masks into images.

Training as maskrcnn-benchmark in MLPerf v0.5: RPN anchors labelled by IoU
(0.7 / 0.3, every ground truth's best anchors positive, anchors reaching past
the image ignored), 256 per image, half positive, BCE plus smooth L1
(beta 1/9); proposals: per image and level the best ``pre_nms_top`` by
objectness, decoded, clipped, NMS 0.7, then in training the best
``rpn_post_nms_top_n_train`` x images of the whole batch together (the
reference's FPN_POST_NMS_TOP_N_TRAIN counts per batch, not per image: an
image with confident proposals takes more of them), in evaluation the best
``rpn_post_nms_top_n_test`` per image; the ground-truth boxes join the
proposals; 512 RoIs per image, a quarter positive (IoU 0.5); cross-entropy and
smooth L1 (beta 1) over the sampled RoIs; masks on the positive RoIs (at most
``mask_batch`` per image), BCE on 28x28 targets.

Inference: score 0.05, per-class NMS 0.5, 100 detections per image, the
class's mask probabilities pasted as the reference pastes them (padded by one
cell, box widened to match, truncated to whole pixels, resized bilinearly with
Pillow, cut above 0.5).

Shapes are kept static where that is cheap: RoIs are padded per image and
RoIAlign samples every level (runner/workloads/detection.py).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from runner.workloads import detection as D
from runner.workloads.maskrcnn_model import STRIDES, MaskRCNN, anchors_inside, grid_anchors

BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
RPN_WEIGHTS = (1.0, 1.0, 1.0, 1.0)


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
            self._anchor_cache[key] = grid_anchors(
                [f.shape[-2:] for f in feats], self.sizes, self.m.ratios, feats[0].device
            )
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
        inside = anchors_inside(a, sizes)
        gt_best = iou.max(1).values  # (N, G)
        low_q = ((iou == gt_best[:, None, :]) & (gt_best[:, None, :] > 0) & gt_valid[:, None, :]).any(2)
        pos = ((best >= 0.7) | low_q) & inside
        neg = (best < 0.3) & (best >= -0.5) & inside & ~pos
        neg = neg | ((~gt_valid.any(1))[:, None] & inside)
        spos, sneg = sample_mask(pos, neg, self.cfg["rpn_batch"], 0.5, self.gen)
        sampled = (spos | sneg).float()
        count = sampled.sum().clamp(min=1.0)
        obj = (F.binary_cross_entropy_with_logits(lg, spos.float(), reduction="none") * sampled).sum() / count
        tgt = D.encode(gt_boxes.gather(1, idx[..., None].expand(-1, -1, 4)), a[None].expand(n, -1, -1), RPN_WEIGHTS)
        box = (F.smooth_l1_loss(dl, tgt, beta=1.0 / 9, reduction="none").sum(2) * spos).sum() / count
        return obj, box

    @torch.no_grad()
    def proposals(self, anchors, logits, deltas, sizes, training):
        """Per image the proposal boxes (K_i, 4), best first: per level the best ``pre`` anchors,
        decoded, clipped, NMS 0.7; then the best of the whole batch in training, of each image
        in evaluation."""
        cfg = self.cfg
        pre = cfg["pre_nms_top"] if training else cfg.get("pre_nms_top_test", cfg["pre_nms_top"])
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
        keep = D.nms_sorted_padded(b.view(n * nl, pre, 4), torch.stack(valid, 1).view(n * nl, pre), 0.7).view(
            n, nl, pre
        )
        sc = sc.masked_fill(~keep, float("-inf")).view(n, -1)
        b = b.view(n, -1, 4)
        if training:  # the best of the whole batch
            post = int(cfg["rpn_post_nms_top_n_train"]) * n
            top_s, top = sc.reshape(-1).topk(min(post, sc.numel()))
            image = torch.div(top, sc.shape[1], rounding_mode="floor")
            ok = torch.isfinite(top_s)
            flat = b.reshape(-1, 4)[top]
            return [flat[ok & (image == i)] for i in range(n)]
        post = int(cfg["rpn_post_nms_top_n_test"])
        top_s, top = sc.topk(min(post, sc.shape[1]), dim=1)
        top_b = b.gather(1, top[..., None].expand(-1, -1, 4))
        ok = torch.isfinite(top_s)
        return [top_b[i][ok[i]] for i in range(n)]

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
        props = self.proposals(anchors, [x.detach() for x in logits], [x.detach() for x in deltas], sizes, True)
        rois, labels, valid, matched = self.sample_rois(props, gt_boxes, gt_labels, gt_valid)
        cls, box = self.box_forward(feats, rois)
        cls, box = cls.float(), box.float()
        count = valid.sum().clamp(min=1)
        cls_loss = (
            F.cross_entropy(cls.flatten(0, 1), labels.flatten(), reduction="none") * valid.flatten()
        ).sum() / count
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
        mask_loss = (
            F.binary_cross_entropy_with_logits(logits_m, t, reduction="none") * mpos[..., None, None]
        ).sum() / mcount
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
            rois[i, : len(p)] = p
        cls, box = self.box_forward(feats, rois)
        scores = F.softmax(cls.float(), -1)
        dets = []
        maxd = self.cfg.get("detections_per_image", 100)
        for i, p in enumerate(props):
            h, w = float(sizes[i, 0]), float(sizes[i, 1])
            m = len(p)
            b = D.clip_boxes(
                D.decode(box[i, :m].float(), p[:, None, :].expand(-1, box.shape[2], -1), BOX_WEIGHTS), h, w
            )[:, 1:]
            s = scores[i, :m, 1:]
            lab = torch.arange(1, s.shape[1] + 1, device=s.device).expand_as(s)
            ok = s > 0.05
            b, s, lab = b[ok], s[ok], lab[ok]
            keep = D.batched_nms(b, s, lab, 0.5)[:maxd]
            dets.append((b[keep], s[keep], lab[keep]))
        kd = max(1, max(len(d[0]) for d in dets))
        drois = torch.zeros(n, kd, 4, device=images.device)
        for i, d in enumerate(dets):
            drois[i, : len(d[0])] = d[0]
        mlog = self.mask_forward(feats, drois).float()
        out = []
        for i, (b, s, lab) in enumerate(dets):
            probs = torch.sigmoid(mlog[i, torch.arange(len(lab), device=lab.device), lab])
            out.append((b, s, lab, probs))
        return out


def paste_masks(probs: np.ndarray, boxes: np.ndarray, h: int, w: int, thr: float = 0.5) -> np.ndarray:
    """Mask probabilities (D, M, M) pasted into an h x w image at their boxes (continuous xyxy),
    as the reference's Masker pastes them: the mask padded by one cell, the box widened by
    (M + 2) / M about its centre (on inclusive coordinates) and truncated to whole pixels,
    the padded mask resized to it bilinearly (Pillow), cut above ``thr``. Boolean (D, h, w)."""
    from PIL import Image

    probs = np.asarray(probs, dtype=np.float32)
    out = np.zeros((len(probs), h, w), dtype=bool)
    if len(probs) == 0:
        return out
    m = probs.shape[-1]
    scale = np.float32((m + 2.0) / m)
    b = np.asarray(boxes, dtype=np.float32).reshape(-1, 4) - np.array([0, 0, 1, 1], np.float32)
    half_w, half_h = (b[:, 2] - b[:, 0]) * np.float32(0.5) * scale, (b[:, 3] - b[:, 1]) * np.float32(0.5) * scale
    cx, cy = (b[:, 2] + b[:, 0]) * np.float32(0.5), (b[:, 3] + b[:, 1]) * np.float32(0.5)
    wide = np.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], 1).astype(np.int32)
    padded = np.zeros((m + 2, m + 2), np.float32)
    for i, (x0, y0, x1, y1) in enumerate(wide.tolist()):
        padded[1:-1, 1:-1] = probs[i]
        bw, bh = max(x1 - x0 + 1, 1), max(y1 - y0 + 1, 1)
        mask = np.asarray(Image.fromarray(padded).resize((bw, bh), Image.BILINEAR)) > thr
        xa, xb, ya, yb = max(x0, 0), min(x1 + 1, w), max(y0, 0), min(y1 + 1, h)
        if xb > xa and yb > ya:
            out[i, ya:yb, xa:xb] = mask[ya - y0 : yb - y0, xa - x0 : xb - x0]
    return out
