"""Mask R-CNN's data: COCO 2017 as the reference feeds it, and the generated shapes of the test scales.

COCO training images are those with at least one annotation (crowd ones
included: 117,266 in train2017), as maskrcnn-benchmark keeps them. Each image
is resized as the reference's ``Resize(800, 1333)`` computes the size (the
shorter side 800 unless the longer would pass 1333, then the longer 1333 with
the shorter rounded; the other side truncated), bilinearly; flipped with
probability 0.5. Ground truth: the non-crowd annotations, boxes clipped to the
image and dropped when empty, scaled per axis on inclusive pixel coordinates
as the reference scales them (then held as continuous ``x2 = x + w``
boxes); polygons scaled, mirrored as the reference mirrors them
(``x -> width - x - 1``), and rasterised by pycocotools at ``1 / mask_stride``
of the image for the mask targets.

Batches: every process takes whole batches of images of one orientation
(height/width below 1, or not), the reference's aspect-ratio grouping, from
one seeded permutation per epoch shared by all processes; batches are dealt
to the processes in turn, so all of them take the same number of steps. A
batch is padded to a multiple of 32 (zeros after normalisation, in the
trainer).
"""

from __future__ import annotations

import numpy as np
import torch

from runner.workloads import detection as D


def reference_size(h: int, w: int, min_size: int, max_size: int) -> tuple[int, int]:
    """The reference's resized (height, width) of an h x w image."""
    size = min_size
    short, long = float(min(h, w)), float(max(h, w))
    if long / short * size > max_size:
        size = int(round(max_size * short / long))
    if (w <= h and w == size) or (h <= w and h == size):
        return h, w
    if w < h:
        return int(size * h / w), size
    return size, int(size * w / h)


def scale_boxes(boxes: np.ndarray, rw: float, rh: float) -> np.ndarray:
    """Continuous xyxy boxes resized as the reference resizes its inclusive ones (x2 - 1 scaled)."""
    b = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    r = np.array([rw, rh, rw, rh], np.float32)
    return ((b - [0, 0, 1, 1]) * r + [0, 0, 1, 1]).astype(np.float32)


def train_target(index: D.CocoIndex, iid: int, out_hw, flip: bool, mask_stride: int) -> dict:
    """Boxes (continuous xyxy in the resized image), labels and masks (on the 1/mask_stride grid)."""
    meta = index.images[iid]
    h0, w0 = meta["height"], meta["width"]
    h, w = out_hw
    boxes, labels, segs = [], [], []
    for a in index.all_anns[iid]:
        if a.get("iscrowd", 0):
            continue
        x, y, bw, bh = a["bbox"]
        x1, y1 = min(max(x, 0.0), w0 - 1), min(max(y, 0.0), h0 - 1)  # clipped, inclusive
        x2, y2 = min(max(x + bw - 1, 0.0), w0 - 1), min(max(y + bh - 1, 0.0), h0 - 1)
        if x2 > x1 and y2 > y1:
            boxes.append([x1, y1, x2 + 1, y2 + 1])
            labels.append(index.label_of[a["category_id"]])
            segs.append(a["segmentation"])
    rw, rh = w / w0, h / h0
    b = scale_boxes(np.asarray(boxes, np.float32).reshape(-1, 4), rw, rh)
    if flip:
        b = np.stack([w - b[:, 2], b[:, 1], w - b[:, 0], b[:, 3]], 1).astype(np.float32)
    mh, mw = (h + mask_stride - 1) // mask_stride, (w + mask_stride - 1) // mask_stride
    masks = np.zeros((len(segs), mh, mw), bool)
    for i, seg in enumerate(segs):
        if isinstance(seg, list):
            polys = []
            for p in seg:
                q = np.asarray(p, np.float64).copy()
                q[0::2] *= rw
                q[1::2] *= rh
                if flip:
                    q[0::2] = w - q[0::2] - 1
                polys.append((q / mask_stride).tolist())
            masks[i] = D.segmentation_mask(polys, mh, mw)
        else:
            m = D.segmentation_mask(seg, h0, w0, out_hw=(mh, mw))
            masks[i] = m[:, ::-1] if flip else m
    return {"boxes": b, "labels": np.asarray(labels, np.int64), "masks": masks}


class CocoSet(torch.utils.data.Dataset):
    """COCO images resized as the reference, flipped in training, with their targets."""

    def __init__(self, index: D.CocoIndex, ids, cfg, train, seed, mask_stride):
        self.index, self.ids, self.cfg, self.train, self.seed = index, ids, cfg, train, seed
        self.mask_stride = mask_stride
        self.epoch = 0

    def __len__(self):
        return len(self.ids)

    def size_of(self, i) -> tuple[int, int]:
        meta = self.index.images[self.ids[i]]
        return reference_size(meta["height"], meta["width"], self.cfg["min_size"], self.cfg["max_size"])

    def __getitem__(self, i):
        from PIL import Image

        iid = self.ids[i]
        meta = self.index.images[iid]
        h, w = self.size_of(i)
        img = D.read_image(self.index.image_dir / meta["file_name"]).resize((w, h), Image.BILINEAR)
        if not self.train:
            return (
                torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()),
                {"id": iid, "orig": (meta["height"], meta["width"]), "size": (h, w)},
            )
        rng = np.random.default_rng((self.seed * 1000003 + self.epoch * 7919 + i) % (2**63))
        flip = bool(rng.uniform() < 0.5)
        if flip:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        t = train_target(self.index, iid, (h, w), flip, self.mask_stride)
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()), t


def collate(batch, divisor=32, mask_stride=1):
    """Pad images to a common size (a multiple of ``divisor``); targets padded per batch."""
    h = max(b[0].shape[0] for b in batch)
    w = max(b[0].shape[1] for b in batch)
    h, w = (h + divisor - 1) // divisor * divisor, (w + divisor - 1) // divisor * divisor
    imgs = torch.zeros(len(batch), h, w, 3, dtype=torch.uint8)
    sizes = torch.zeros(len(batch), 2)
    for i, (im, _) in enumerate(batch):
        imgs[i, : im.shape[0], : im.shape[1]] = im
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
            masks[i, :n, : m.shape[1], : m.shape[2]] = m
    return imgs, sizes, (boxes, labels, masks)


def grouped_batches(portrait: np.ndarray, batch: int, seed: int, epoch: int, rank: int, world: int) -> list:
    """This process's batches of one epoch: a seeded permutation, batches of one orientation each
    (in the order their first image comes), dealt to the processes in turn; a group's last
    partial batch and the batches past a multiple of ``world`` wait for another epoch."""
    perm = np.random.default_rng((seed * 7919 + epoch) % (2**63)).permutation(len(portrait))
    batches = []
    for group in (False, True):
        members = perm[portrait[perm] == group]
        pos = np.flatnonzero(portrait[perm] == group)
        for s in range(0, len(members) - batch + 1, batch):
            batches.append((pos[s], members[s : s + batch].tolist()))
    batches = [b for _, b in sorted(batches, key=lambda x: x[0])]
    usable = len(batches) // world * world
    return batches[rank:usable:world]


class GroupedSampler(torch.utils.data.Sampler):
    """``grouped_batches`` as a DataLoader batch sampler; set ``epoch`` before iterating."""

    def __init__(self, dataset: CocoSet, batch: int, ctx):
        sizes = [dataset.index.images[i] for i in dataset.ids]
        self.portrait = np.array([m["height"] / m["width"] >= 1 for m in sizes])
        self.batch, self.ctx, self.epoch = batch, ctx, 0

    def _batches(self):
        c = self.ctx
        return grouped_batches(self.portrait, self.batch, c.seed, self.epoch, c.rank, c.world_size)

    def __iter__(self):
        return iter(self._batches())

    def __len__(self):
        return len(self._batches())


class ShardSampler(torch.utils.data.Sampler):
    """This process's contiguous share of the evaluation images (the last one takes the rest)."""

    def __init__(self, n: int, ctx):
        per = n // ctx.world_size
        self.idx = list(range(ctx.rank * per, n if ctx.rank == ctx.world_size - 1 else (ctx.rank + 1) * per))

    def __iter__(self):
        return iter(self.idx)

    def __len__(self):
        return len(self.idx)


def boxes_to_original(b: np.ndarray, size, orig) -> np.ndarray:
    """Detections in the resized image -> the original image, per axis as the reference."""
    (h, w), (h0, w0) = size, orig
    return scale_boxes(b, w0 / w, h0 / h)


# --- generated shapes (small and tiny scales) ----------------------------------------------------


def generated_train(cfg: dict, device) -> tuple:
    """The generated training set as device tensors: images, boxes, labels, masks (padded per image)."""
    tr = D.generate_shapes(cfg, cfg["train_images"], 0)
    s, n = cfg["image_size"], len(tr)
    g = max(len(t["labels"]) for t in tr)
    x = torch.as_tensor(np.stack([t["image"] for t in tr]))
    boxes, labels = torch.zeros(n, g, 4), torch.zeros(n, g, dtype=torch.long)
    masks = torch.zeros(n, g, s, s, dtype=torch.uint8)
    for i, t in enumerate(tr):
        k = len(t["labels"])
        boxes[i, :k] = torch.as_tensor(t["boxes"])
        labels[i, :k] = torch.as_tensor(t["labels"])
        masks[i, :k] = torch.as_tensor(t["masks"])
    return tuple(t.to(device) for t in (x, boxes, labels, masks))


def generated_eval_batches(items: list, ctx, size: int, per_batch: int = 32) -> list:
    """This process's share of the generated evaluation images, in batches (images, sizes, targets)."""
    n = len(items)
    per = n // ctx.world_size
    mine = items[ctx.rank * per : n if ctx.rank == ctx.world_size - 1 else (ctx.rank + 1) * per]
    out = []
    for st in range(0, len(mine), per_batch):
        part = mine[st : st + per_batch]
        ts = [dict(t, orig=(size, size), size=(size, size)) for t in part]
        out.append(
            (
                torch.as_tensor(np.stack([t["image"] for t in part])),
                torch.tensor([[size, size]] * len(part), dtype=torch.float32),
                ts,
            )
        )
    return out
