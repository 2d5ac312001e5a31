"""COCO-style average precision in numpy (what pycocotools' COCOeval computes).

AP is the mean over IoU thresholds 0.50:0.05:0.95, over categories that have
ground truth, of the 101-point interpolated precision (recall thresholds
0:0.01:1), with at most ``max_dets`` detections per image and category chosen
by score, greedy matching in score order, crowd regions (``iscrowd``) matched
without being counted (IoU against a crowd region is intersection over the
detection's area, and a detection matched to one is ignored), and precision
made monotone before sampling. Area ranges other than "all" are not computed.

Boxes are ``[x1, y1, x2, y2]`` in pixels (area ``(x2-x1)*(y2-y1)``, as COCO's
``[x, y, w, h]``); masks are boolean arrays of the image's size. Results are
accumulated image by image (``add``), so masks are never held for a whole data
set; ``state()``/``merge()`` combine the shares of several processes.
"""

from __future__ import annotations

import numpy as np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
RECALL_THRESHOLDS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)


def box_iou(dets: np.ndarray, gts: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU matrix (D, G) of xyxy boxes; against a crowd box: intersection over the detection's area."""
    d = np.asarray(dets, dtype=np.float64).reshape(-1, 4)
    g = np.asarray(gts, dtype=np.float64).reshape(-1, 4)
    if len(d) == 0 or len(g) == 0:
        return np.zeros((len(d), len(g)))
    iw = np.minimum(d[:, None, 2], g[None, :, 2]) - np.maximum(d[:, None, 0], g[None, :, 0])
    ih = np.minimum(d[:, None, 3], g[None, :, 3]) - np.maximum(d[:, None, 1], g[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    ad = ((d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1]))[:, None]
    ag = ((g[:, 2] - g[:, 0]) * (g[:, 3] - g[:, 1]))[None, :]
    union = np.where(np.asarray(crowd, dtype=bool)[None, :], ad, ad + ag - inter)
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def mask_iou(dets: np.ndarray, gts: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU matrix (D, G) of boolean masks (N, H, W); crowd as in ``box_iou``."""
    if len(dets) == 0 or len(gts) == 0:
        return np.zeros((len(dets), len(gts)))
    d = np.asarray(dets, dtype=bool).reshape(len(dets), -1)
    g = np.asarray(gts, dtype=bool).reshape(len(gts), -1)
    # only the pixels any mask covers take part (smaller products)
    cols = d.any(axis=0) | g.any(axis=0)
    d, g = d[:, cols].astype(np.float32), g[:, cols].astype(np.float32)
    inter = (d @ g.T).astype(np.float64)
    ad = d.sum(axis=1, dtype=np.float64)[:, None]
    ag = g.sum(axis=1, dtype=np.float64)[None, :]
    union = np.where(np.asarray(crowd, dtype=bool)[None, :], ad, ad + ag - inter)
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def match(ious: np.ndarray, gt_ignore: np.ndarray, gt_crowd: np.ndarray,
          thresholds: np.ndarray = IOU_THRESHOLDS) -> tuple[np.ndarray, np.ndarray]:
    """Greedy matching of score-sorted detections (rows) to ground truths (columns).

    ``gt_ignore`` marks ground truths that do not count (crowd); they must come
    last in the column order. Returns ``matched`` and ``ignored`` (T, D) booleans.
    """
    n_t, (n_d, n_g) = len(thresholds), ious.shape
    matched = np.zeros((n_t, n_d), dtype=bool)
    ignored = np.zeros((n_t, n_d), dtype=bool)
    gt_taken = np.zeros((n_t, n_g), dtype=bool)
    for ti, t in enumerate(thresholds):
        for di in range(n_d):
            best, m = min(t, 1 - 1e-10), -1
            for gi in range(n_g):
                if gt_taken[ti, gi] and not gt_crowd[gi]:
                    continue
                # a real match found: stop at the first ignored ground truth
                if m > -1 and not gt_ignore[m] and gt_ignore[gi]:
                    break
                if ious[di, gi] < best:
                    continue
                best, m = ious[di, gi], gi
            if m == -1:
                continue
            matched[ti, di] = True
            ignored[ti, di] = bool(gt_ignore[m])
            gt_taken[ti, m] = True
    return matched, ignored


class COCOEvaluator:
    """Accumulates per-image matches for one IoU type ("bbox" or "segm")."""

    def __init__(self, iou_type: str = "bbox", max_dets: int = 100):
        if iou_type not in ("bbox", "segm"):
            raise ValueError(f"iou_type {iou_type!r}: expected 'bbox' or 'segm'")
        self.iou_type = iou_type
        self.max_dets = max_dets
        self.per_cat: dict[int, list] = {}   # category -> [(scores, matched, ignored)]
        self.n_gt: dict[int, int] = {}       # category -> ground truths that count

    def add(self, gt_labels, det_scores, det_labels, *, gt_boxes=None, det_boxes=None,
            gt_crowd=None, gt_masks=None, det_masks=None) -> None:
        """One image: its ground truths and detections (boxes xyxy, or masks for "segm")."""
        gt_labels = np.asarray(gt_labels, dtype=np.int64).reshape(-1)
        det_labels = np.asarray(det_labels, dtype=np.int64).reshape(-1)
        det_scores = np.asarray(det_scores, dtype=np.float64).reshape(-1)
        crowd = (np.zeros(len(gt_labels), dtype=bool) if gt_crowd is None
                 else np.asarray(gt_crowd, dtype=bool).reshape(-1))
        gts = gt_boxes if self.iou_type == "bbox" else gt_masks
        dets = det_boxes if self.iou_type == "bbox" else det_masks
        if gts is None:
            gts = np.zeros((0, 4))
        if dets is None:
            dets = np.zeros((0, 4))
        gts, dets = np.asarray(gts), np.asarray(dets)
        for cat in np.union1d(np.unique(gt_labels), np.unique(det_labels)):
            gi = np.flatnonzero(gt_labels == cat)
            gi = np.concatenate([gi[~crowd[gi]], gi[crowd[gi]]])  # crowd (ignored) last
            di = np.flatnonzero(det_labels == cat)
            di = di[np.argsort(-det_scores[di], kind="mergesort")][: self.max_dets]
            c = crowd[gi]
            self.n_gt[int(cat)] = self.n_gt.get(int(cat), 0) + int((~c).sum())
            if len(di) == 0:
                self.per_cat.setdefault(int(cat), [])
                continue
            if len(gi):
                fn = box_iou if self.iou_type == "bbox" else mask_iou
                ious = fn(dets[di], gts[gi], c)
            else:
                ious = np.zeros((len(di), 0))
            m, ig = match(ious, c, c)
            self.per_cat.setdefault(int(cat), []).append((det_scores[di], m, ig))

    # --- several processes ---
    def state(self) -> dict:
        return {"per_cat": self.per_cat, "n_gt": self.n_gt}

    def merge(self, states) -> None:
        for st in states:
            for cat, items in st["per_cat"].items():
                self.per_cat.setdefault(int(cat), []).extend(items)
            for cat, n in st["n_gt"].items():
                self.n_gt[int(cat)] = self.n_gt.get(int(cat), 0) + int(n)

    # --- the result ---
    def precision(self) -> np.ndarray:
        """Interpolated precision (T, R, K) over the categories with ground truth; -1 where none."""
        cats = sorted(set(self.n_gt) | set(self.per_cat))
        out = -np.ones((len(IOU_THRESHOLDS), len(RECALL_THRESHOLDS), len(cats)))
        for k, cat in enumerate(cats):
            npig = self.n_gt.get(cat, 0)
            if npig == 0:
                continue
            items = self.per_cat.get(cat, [])
            out[:, :, k] = 0.0
            if not items:
                continue
            scores = np.concatenate([s for s, _, _ in items])
            order = np.argsort(-scores, kind="mergesort")
            matched = np.concatenate([m for _, m, _ in items], axis=1)[:, order]
            ignored = np.concatenate([ig for _, _, ig in items], axis=1)[:, order]
            tps = np.cumsum(matched & ~ignored, axis=1, dtype=np.float64)
            fps = np.cumsum(~matched & ~ignored, axis=1, dtype=np.float64)
            for t in range(len(IOU_THRESHOLDS)):
                tp, fp = tps[t], fps[t]
                rc = tp / npig
                pr = tp / (fp + tp + np.spacing(1))
                pr = np.maximum.accumulate(pr[::-1])[::-1]  # monotone from the right
                inds = np.searchsorted(rc, RECALL_THRESHOLDS, side="left")
                q = np.zeros(len(RECALL_THRESHOLDS))
                ok = inds < len(pr)
                q[ok] = pr[inds[ok]]
                out[t, :, k] = q
        return out

    def summarize(self) -> dict:
        """``AP`` (0.50:0.95), ``AP50``, ``AP75``; NaN-free: 0.0 when nothing has ground truth."""
        p = self.precision()

        def mean(a):
            a = a[a > -1]
            return float(a.mean()) if a.size else 0.0

        return {"AP": mean(p), "AP50": mean(p[0]), "AP75": mean(p[5])}
