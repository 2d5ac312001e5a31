"""SSD300's data (runner/workloads/ssd.py): COCO for training (the reference's random crop and flip,
resize, and the device-side colour jitter) and for evaluation, and the batch collation."""

from __future__ import annotations

import math

import numpy as np
import torch

from runner.workloads import detection as D

GRAY = (0.299, 0.587, 0.114)
_YIQ = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], dtype=torch.float64)


def color_jitter(
    x: torch.Tensor, u: torch.Tensor, brightness: float, contrast: float, saturation: float, hue: float
) -> torch.Tensor:
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
        return (
            torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()),
            {"boxes": (boxes * s).astype(np.float32).reshape(-1, 4), "labels": labels},
        )


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


def collate(batch):
    return torch.stack([b[0] for b in batch]), [b[1] for b in batch]
