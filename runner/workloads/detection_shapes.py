"""The generated shapes data set of the detection workloads' small and tiny scales (ssd, maskrcnn):
coloured shapes with their boxes, classes and masks, a fixed data set the same for every run."""

from __future__ import annotations

import numpy as np

DATA_SEED = 20190503

SHAPES = ("rectangle", "ellipse", "triangle", "diamond", "cross", "ring")
COLORS = np.array(
    [[220, 60, 50], [60, 200, 70], [60, 90, 230], [230, 210, 50], [200, 70, 210], [60, 210, 220]], dtype=np.float32
)


def _shape_mask(kind: str, h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    u = (xx + 0.5) / w * 2 - 1
    v = (yy + 0.5) / h * 2 - 1
    if kind == "rectangle":
        return np.ones((h, w), bool)
    if kind == "ellipse":
        return u * u + v * v <= 1.0
    if kind == "triangle":
        return np.abs(u) <= (v + 1) / 2
    if kind == "diamond":
        return np.abs(u) + np.abs(v) <= 1.0
    if kind == "cross":
        return (np.abs(u) <= 0.35) | (np.abs(v) <= 0.35)
    return (u * u + v * v <= 1.0) & (u * u + v * v >= 0.3)


def generate_shapes(cfg: dict, n: int, split: int) -> list[dict]:
    """``n`` images of coloured shapes; the class is the shape (and its colour).

    Each entry: ``image`` uint8 HWC, ``boxes`` float32 (G, 4) xyxy (tight
    around the visible pixels), ``labels`` int64 in 1..classes, ``masks`` bool
    (G, H, W), ``crowd`` bool (G,). Deterministic for (cfg, n, split).
    """
    rng = np.random.default_rng(DATA_SEED + 7919 * split)
    size, k = cfg["image_size"], cfg["classes"]
    lo, hi = cfg["object_size"]
    out = []
    for _ in range(n):
        img = 110 + cfg.get("background_noise", 12.0) * rng.standard_normal((size, size, 3))
        count = rng.integers(1, cfg["max_objects"] + 1)
        placed, masks, labels = [], [], []
        for _ in range(count):
            for _ in range(20):
                h, w = rng.integers(lo, hi + 1, size=2)
                y0, x0 = rng.integers(0, size - h + 1), rng.integers(0, size - w + 1)
                b = np.array([x0, y0, x0 + w, y0 + h], np.float64)
                if all(_iou_np(b, p) < 0.2 for p in placed):
                    break
            else:
                continue
            cls = int(rng.integers(0, k))
            m = np.zeros((size, size), bool)
            m[y0 : y0 + h, x0 : x0 + w] = _shape_mask(SHAPES[cls % len(SHAPES)], h, w)
            color = COLORS[cls % len(COLORS)] + rng.uniform(-25, 25, size=3)
            img[m] = color + 6.0 * rng.standard_normal((int(m.sum()), 3))
            for prev in masks:  # the new object hides what it covers
                prev &= ~m
            placed.append(b)
            masks.append(m)
            labels.append(cls + 1)
        boxes, keep = [], []
        for i, m in enumerate(masks):
            ys, xs = np.nonzero(m)
            if len(ys) < 8:
                continue
            boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
            keep.append(i)
        out.append(
            {
                "image": np.clip(img, 0, 255).astype(np.uint8),
                "boxes": np.asarray(boxes, np.float32).reshape(-1, 4),
                "labels": np.asarray([labels[i] for i in keep], np.int64),
                "masks": np.stack([masks[i] for i in keep]) if keep else np.zeros((0, size, size), bool),
                "crowd": np.zeros(len(keep), bool),
            }
        )
    return out


def _iou_np(a, b) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)
