"""Detection parts shared by ssd and maskrcnn, in plain torch (no torchvision).

Box arithmetic, box coding, exact greedy non-maximum suppression on the
device, RoIAlign (``grid_sample`` on one map, row gathers across the FPN
levels), the generated shapes data set of the small and tiny scales
(in detection_shapes.py, re-exported here), and the COCO 2017 reader of the
full scale (``<data>/coco/{train2017,val2017}/*.jpg`` and
``<data>/coco/annotations/instances_{train,val}2017.json``; masks rasterised
by pycocotools).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from runner import boundjson
from runner.workloads.base import WorkloadError
from runner.workloads.detection_shapes import generate_shapes  # noqa: F401  (read as D.generate_shapes)

try:  # optional: torchvision's CUDA NMS kernel; the torch code below gives the same result
    from torchvision.ops import nms as _tv_nms
except Exception:  # not installed, or built for another torch
    _tv_nms = None


# --- boxes --------------------------------------------------------------------------------


def box_area(b: torch.Tensor) -> torch.Tensor:
    return (b[..., 2] - b[..., 0]).clamp(min=0) * (b[..., 3] - b[..., 1]).clamp(min=0)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of xyxy boxes: (..., N, 4) x (..., M, 4) -> (..., N, M)."""
    lt = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = box_area(a)[..., :, None] + box_area(b)[..., None, :] - inter
    return inter / union.clamp(min=1e-9)


def encode(boxes: torch.Tensor, anchors: torch.Tensor, weights) -> torch.Tensor:
    """Box deltas (dx, dy, dw, dh) of xyxy ``boxes`` against xyxy ``anchors``."""
    wx, wy, ww, wh = weights
    aw, ah = anchors[..., 2] - anchors[..., 0], anchors[..., 3] - anchors[..., 1]
    ax, ay = anchors[..., 0] + 0.5 * aw, anchors[..., 1] + 0.5 * ah
    bw, bh = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
    bx, by = boxes[..., 0] + 0.5 * bw, boxes[..., 1] + 0.5 * bh
    return torch.stack(
        [
            wx * (bx - ax) / aw,
            wy * (by - ay) / ah,
            ww * torch.log(bw.clamp(min=1e-6) / aw),
            wh * torch.log(bh.clamp(min=1e-6) / ah),
        ],
        -1,
    )


BOX_CLIP = math.log(1000.0 / 16)  # the largest log-scale of a decoded box's size


def decode(deltas: torch.Tensor, anchors: torch.Tensor, weights, clip=BOX_CLIP) -> torch.Tensor:
    wx, wy, ww, wh = weights
    deltas = deltas.float()
    aw, ah = anchors[..., 2] - anchors[..., 0], anchors[..., 3] - anchors[..., 1]
    ax, ay = anchors[..., 0] + 0.5 * aw, anchors[..., 1] + 0.5 * ah
    dx, dy = deltas[..., 0] / wx, deltas[..., 1] / wy
    dw, dh = (deltas[..., 2] / ww).clamp(max=clip), (deltas[..., 3] / wh).clamp(max=clip)
    cx, cy = dx * aw + ax, dy * ah + ay
    w, h = torch.exp(dw) * aw, torch.exp(dh) * ah
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], -1)


def clip_boxes(b: torch.Tensor, h, w) -> torch.Tensor:
    return torch.stack([b[..., 0].clamp(0, w), b[..., 1].clamp(0, h), b[..., 2].clamp(0, w), b[..., 3].clamp(0, h)], -1)


def nms(boxes: torch.Tensor, scores: torch.Tensor, thr: float) -> torch.Tensor:
    """Exact greedy NMS: indices of the kept boxes, best score first.

    Computed as the fixed point of "a box is kept unless a kept better box
    overlaps it by more than ``thr``", which equals greedy suppression and runs
    as a few matrix steps on the device.
    """
    if boxes.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    if boxes.is_cuda and _tv_nms is not None:  # torchvision's kernel where it is installed
        return _tv_nms(boxes.float(), scores.float(), thr)
    order = scores.argsort(descending=True)
    b = boxes[order].float()
    over = box_iou(b, b) > thr
    over = torch.triu(over, diagonal=1)  # [j, i]: j better than i and overlapping
    keep = torch.ones(len(b), dtype=torch.bool, device=b.device)
    for _ in range(len(b)):
        new = ~(over & keep[:, None]).any(0)
        if torch.equal(new, keep):
            break
        keep = new
    return order[keep]


def nms_sorted_padded(boxes: torch.Tensor, valid: torch.Tensor, thr: float) -> torch.Tensor:
    """Exact greedy NMS of many sets at once: ``boxes`` (B, n, 4) sorted by score within each row.

    ``valid`` (B, n) marks real boxes (padding neither counts nor suppresses).
    Returns the kept boxes as a (B, n) mask: the same fixed point as ``nms``,
    iterated for all rows together and checked every four steps.
    """
    over = box_iou(boxes.float(), boxes.float()) > thr
    over = torch.triu(over, diagonal=1) & valid[:, :, None] & valid[:, None, :]
    keep = valid.clone()
    for _ in range(0, boxes.shape[1] + 4, 4):
        prev = keep
        for _ in range(4):
            prev, keep = keep, valid & ~(over & keep[:, :, None]).any(1)
        if torch.equal(prev, keep):
            break
    return keep


def clip_to_sizes(b: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Clip (N, K, 4) boxes to per-image sizes (N, 2) = (h, w)."""
    h = sizes[:, 0].view(-1, 1).to(b.dtype)
    w = sizes[:, 1].view(-1, 1).to(b.dtype)
    x1 = torch.minimum(b[..., 0].clamp(min=0), w)
    y1 = torch.minimum(b[..., 1].clamp(min=0), h)
    x2 = torch.minimum(b[..., 2].clamp(min=0), w)
    y2 = torch.minimum(b[..., 3].clamp(min=0), h)
    return torch.stack([x1, y1, x2, y2], -1)


def batched_nms(boxes, scores, labels, thr: float) -> torch.Tensor:
    """NMS within each label (boxes of different labels never suppress each other)."""
    if boxes.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    offset = labels.to(boxes.dtype)[:, None] * (boxes.max() + 1)
    return nms(boxes + offset, scores, thr)


def roi_align(feat: torch.Tensor, rois: torch.Tensor, out_size: int, scale: float, sampling: int = 2) -> torch.Tensor:
    """RoIAlign of padded per-image boxes on one map, through ``grid_sample`` (float32).

    ``feat`` (N, C, H, W); ``rois`` (N, K, 4) xyxy in image pixels; ``scale``
    maps image pixels to feature cells. Each output cell averages
    ``sampling x sampling`` bilinear samples (half-pixel aligned). Returns
    (N, K, C, out, out).
    """
    n, c, h, w = feat.shape
    k = rois.shape[1]
    s = out_size * sampling
    r = rois.float() * scale - 0.5
    t = (torch.arange(s, device=feat.device, dtype=torch.float32) + 0.5) / s  # (s,)
    x = r[..., 0:1] + (r[..., 2:3] - r[..., 0:1]) * t  # (N, K, s)
    y = r[..., 1:2] + (r[..., 3:4] - r[..., 1:2]) * t
    gx = (x + 0.5) / w * 2 - 1
    gy = (y + 0.5) / h * 2 - 1
    grid = torch.stack([gx[:, :, None, :].expand(n, k, s, s), gy[:, :, :, None].expand(n, k, s, s)], -1)
    grid = grid.reshape(n, k * s, s, 2)  # float32: bf16 would move samples by up to a cell on large maps
    out = F.grid_sample(feat.float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    out = out.to(feat.dtype)
    out = out.view(n, c, k, s, s).permute(0, 2, 1, 3, 4)  # (N, K, C, s, s)
    if sampling > 1:
        out = out.reshape(n * k, c, s, s)
        out = F.avg_pool2d(out, sampling).view(n, k, c, out_size, out_size)
    return out


def fpn_levels(rois: torch.Tensor, kmin: int, kmax: int, canonical=224, canonical_level=4) -> torch.Tensor:
    """FPN level of each box (Mask R-CNN's rule)."""
    size = box_area(rois).clamp(min=1e-6).sqrt()
    lvl = torch.floor(canonical_level + torch.log2(size / canonical + 1e-6))
    return lvl.clamp(kmin, kmax).long()


def _legacy_axis(v: torch.Tensor, size: torch.Tensor):
    """Bilinear neighbours and weights along one axis as maskrcnn-benchmark's RoIAlign kernel
    takes them: a sample below -1 or past ``size`` reads zero; one in [-1, 0] reads at 0; one
    at or past the last cell reads the last cell."""
    n = size[..., None].to(v.dtype)
    valid = ((v >= -1) & (v <= n)).to(v.dtype)
    vc = v.clamp(min=0)
    lo = vc.floor()
    edge = lo >= n - 1
    lo = torch.where(edge, n - 1, lo)
    frac = torch.where(edge, torch.zeros_like(vc), vc - lo)
    hi = torch.where(edge, lo, lo + 1)
    return (lo.long(), hi.long()), ((1 - frac) * valid, frac * valid)


def multilevel_roi_align(
    feats: list, rois: torch.Tensor, out_size: int, strides: list, sampling: int = 2
) -> torch.Tensor:
    """RoIAlign on the FPN level each box belongs to: (N, K, C, out, out).

    The samples of maskrcnn-benchmark's RoIAlign (the CUDA kernel MLPerf v0.5
    trains with): on the box's own level, ``sampling x sampling`` bilinear
    samples per cell, spread over the box from its corner ``x1 * scale`` to
    its inclusive end ``(x2 - 1) * scale`` (``rois`` are continuous xyxy) with
    no half-pixel shift, the box at least one cell wide; the kernel's border
    rules (``_legacy_axis``). Computed as gathers of feature rows: every
    level's cells become rows of one channels-last table, and each sample
    reads its four neighbours there with float32 coordinates and weights.
    Only the box's own level is read (no per-level passes) and shapes depend
    on the RoI count only (compile-friendly); the backward pass is an
    ``index_add`` of rows.
    """
    n, c = feats[0].shape[:2]
    k = rois.shape[1]
    dev = feats[0].device
    kmin = int(round(math.log2(strides[0])))
    level = fpn_levels(rois, kmin, kmin + len(feats) - 1) - kmin  # (N, K)
    # (sum over levels of N*H*W, C) in float32: the backward pass adds rows atomically, and
    # float32 atomics are both exact enough and faster than bf16 ones
    table = torch.cat([f.permute(0, 2, 3, 1).reshape(-1, c) for f in feats]).float()
    hs = torch.tensor([f.shape[2] for f in feats], device=dev)
    ws = torch.tensor([f.shape[3] for f in feats], device=dev)
    sizes = [n * f.shape[2] * f.shape[3] for f in feats]
    starts = torch.tensor([sum(sizes[:i]) for i in range(len(feats))], device=dev)
    scale = torch.tensor([1.0 / st for st in strides[: len(feats)]], device=dev)[level]
    h, w = hs[level], ws[level]  # (N, K)
    base = starts[level] + torch.arange(n, device=dev)[:, None] * h * w
    s = out_size * sampling
    t = (torch.arange(s, device=dev, dtype=torch.float32) + 0.5) / s
    r = rois.float()
    x1, y1 = r[..., 0:1] * scale[..., None], r[..., 1:2] * scale[..., None]
    bw = ((r[..., 2:3] - 1) * scale[..., None] - x1).clamp(min=1.0)
    bh = ((r[..., 3:4] - 1) * scale[..., None] - y1).clamp(min=1.0)
    (ylo, yhi), (wylo, wyhi) = _legacy_axis(y1 + bh * t, h)  # (N, K, s) in cells, centres at integers
    (xlo, xhi), (wxlo, wxhi) = _legacy_axis(x1 + bw * t, w)
    out = None
    for yi, wy in ((ylo, wylo), (yhi, wyhi)):
        row = base[..., None] + yi * w[..., None]  # (N, K, s)
        for xi, wx in ((xlo, wxlo), (xhi, wxhi)):
            idx = (row[..., :, None] + xi[..., None, :]).reshape(-1)  # (N*K*s*s,)
            v = table.index_select(0, idx).view(n, k, s, s, c)
            v = v * (wy[..., :, None] * wx[..., None, :])[..., None]
            out = v if out is None else out + v
    if sampling > 1:
        out = out.view(n, k, out_size, sampling, out_size, sampling, c).mean((3, 5))
    return out.to(feats[0].dtype).permute(0, 1, 4, 2, 3)


# --- COCO 2017 ---------------------------------------------------------------------------------


def coco_root(data: str) -> Path:
    root = Path(data) / "coco"
    return root if root.is_dir() else Path(data)


def open_coco(ctx, num_classes: int) -> tuple["CocoIndex", "CocoIndex", list]:
    """The prepared COCO 2017 under ``--data``: (train index, val index, train images with annotations).

    Checks the dataset's manifest and that it has ``num_classes - 1`` categories
    (class 0 is the background).
    """
    from runner.workloads.vision import check_dataset

    root = coco_root(ctx.data)
    check_dataset("coco", str(root))
    train_idx, val_idx = CocoIndex(root, "train"), CocoIndex(root, "val")
    if len(train_idx.cat_ids) != num_classes - 1:
        raise WorkloadError(f"coco data at {root}: {len(train_idx.cat_ids)} categories, expected {num_classes - 1}")
    return train_idx, val_idx, train_idx.with_annotations()


class CocoIndex:
    """One split of COCO 2017 from its instances JSON: images, annotations, category ids."""

    def __init__(self, root: Path, split: str):
        ann = root / "annotations" / f"instances_{split}2017.json"
        self.image_dir = root / f"{split}2017"
        if not ann.is_file():
            raise WorkloadError(f"coco data: {ann} is missing")
        if not self.image_dir.is_dir():
            raise WorkloadError(f"coco data: {self.image_dir} is missing")
        try:
            doc = boundjson.read(ann, boundjson.ANNOTATION_CHARS)
        except ValueError as exc:
            raise WorkloadError(f"coco data: {ann} is not valid JSON ({exc})") from exc
        self.cat_ids = sorted(c["id"] for c in doc["categories"])
        self.label_of = {cid: i + 1 for i, cid in enumerate(self.cat_ids)}  # 0 = background
        self.images = {im["id"]: im for im in doc["images"]}
        self.anns: dict[int, list] = {i: [] for i in self.images}  # those with a box of positive size
        self.all_anns: dict[int, list] = {i: [] for i in self.images}  # every one (what COCO evaluates)
        for a in doc["annotations"]:
            if a["image_id"] in self.all_anns:
                self.all_anns[a["image_id"]].append(a)
                if a.get("bbox") and a["bbox"][2] > 0 and a["bbox"][3] > 0:
                    self.anns[a["image_id"]].append(a)
        self.ids = sorted(self.images)

    def with_annotations(self) -> list[int]:
        return [i for i in self.ids if any(not a.get("iscrowd", 0) for a in self.anns[i])]

    def target(self, image_id: int, with_masks: bool, scale_xy=(1.0, 1.0), out_hw=None) -> dict:
        """Boxes (xyxy), labels, crowd flags and (optionally) masks of one image, scaled."""
        im = self.images[image_id]
        sx, sy = scale_xy
        boxes, labels, crowd, masks = [], [], [], []
        for a in self.anns[image_id]:
            x, y, w, h = a["bbox"]
            boxes.append([x * sx, y * sy, (x + w) * sx, (y + h) * sy])
            labels.append(self.label_of[a["category_id"]])
            crowd.append(bool(a.get("iscrowd", 0)))
            if with_masks:
                masks.append(segmentation_mask(a["segmentation"], im["height"], im["width"], scale_xy, out_hw))
        hw = out_hw or (im["height"], im["width"])
        t = {
            "boxes": np.asarray(boxes, np.float32).reshape(-1, 4),
            "labels": np.asarray(labels, np.int64),
            "crowd": np.asarray(crowd, bool),
        }
        if with_masks:
            t["masks"] = np.stack(masks) if masks else np.zeros((0, *hw), bool)
        return t


def segmentation_mask(seg, h: int, w: int, scale_xy=(1.0, 1.0), out_hw=None) -> np.ndarray:
    """A COCO segmentation (polygons or RLE) as a boolean mask, rasterised by pycocotools.

    Polygons are scaled by ``scale_xy`` and rasterised on the ``out_hw`` grid
    (``frPyObjects``, as COCO's ``annToRLE`` does at full size); RLE is decoded
    at its own size and resized to ``out_hw`` (nearest) when that differs.
    """
    from pycocotools import mask as mask_util

    oh, ow = out_hw or (h, w)
    sx, sy = scale_xy
    if isinstance(seg, list):
        if (sx, sy) != (1.0, 1.0):
            seg = [[v * (sx if j % 2 == 0 else sy) for j, v in enumerate(p)] for p in seg]
        m = mask_util.decode(mask_util.merge(mask_util.frPyObjects(seg, oh, ow)))
    else:
        rle = mask_util.frPyObjects(seg, h, w) if isinstance(seg.get("counts"), list) else seg
        m = mask_util.decode(rle)
        if (oh, ow) != m.shape:
            from PIL import Image

            m = np.asarray(Image.fromarray(m * 255).resize((ow, oh), Image.NEAREST)) > 127
    return m.astype(bool)


def read_image(path: Path, draft=None):
    from runner.workloads.vision import decode_rgb

    return decode_rgb(str(path), draft_size=draft)
