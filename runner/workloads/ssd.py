"""SSD300 with a ResNet-34 backbone (MLPerf v0.5 "ssd", COCO box AP 0.50:0.95).

The model of the MLPerf reference: ResNet-34 up to layer3 with layer3 at
stride 1 (38x38 at 300x300), five extra blocks (1x1 then 3x3, BN, ReLU) down to
19, 10, 5, 3, 1, 3x3 location and class heads, 8732 default boxes (scales 21..315,
aspect ratios 2 and 3), box coding with variances 0.1/0.2, IoU-0.5 matching
plus the best default box of every object, smooth-L1 plus cross-entropy with
3:1 hard negative mining; inference: softmax, score 0.05, per-class NMS 0.5,
200 detections per image, COCO AP by pycocotools (runner/workloads/coco_eval.py).

Full scale reads COCO 2017 (train2017 / val2017 and the instances JSON) with
the SSD random crop (minimum-IoU choices, ``max_samples`` trials), horizontal
flip and a resize to 300x300; the backbone starts from torchvision's ImageNet
ResNet-34 (``resnet34-333f7ec4.pth``, as the reference), a catalogued artifact
at ``<data>/resnet34-torchvision/`` whose sum the runner checks before a ttt
run (a missing or wrong file is bad input, never a run from scratch). Small and tiny scales train on generated shapes
(runner/workloads/detection.py) at 96 and 64 pixels with a narrower, shallower
backbone and fewer feature levels (``width``, ``layers``, ``extras`` in
workloads.yml).
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
        for mid, out, stride, pad in cfg["extras"]:
            self.extras.append(nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                nn.Conv2d(mid, out, 3, stride=stride, padding=pad, bias=False), nn.BatchNorm2d(out),
                nn.ReLU(inplace=True)))
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
        for m in list(self.extras.modules()) + list(self.loc) + list(self.conf):
            if isinstance(m, nn.Conv2d):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

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


def default_boxes(fig: int, feat_sizes, scales, aspect_ratios) -> torch.Tensor:
    """The SSD default boxes, xyxy in [0, 1], in the order of the heads' outputs."""
    out = []
    for k, fk in enumerate(feat_sizes):
        sk = scales[k] / fig
        sk1 = math.sqrt(scales[k] * scales[k + 1]) / fig
        shapes = [(sk, sk), (sk1, sk1)]
        for a in aspect_ratios[k]:
            r = math.sqrt(a)
            shapes += [(sk * r, sk / r), (sk / r, sk * r)]
        for i in range(fk):
            for j in range(fk):
                cx, cy = (j + 0.5) / fk, (i + 0.5) / fk
                for w, h in shapes:
                    out.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
    return torch.tensor(out, dtype=torch.float32).clamp(0, 1)


class SSDLoss(nn.Module):
    """Smooth-L1 on matched boxes plus cross-entropy with 3:1 hard negative mining."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, gloc, glabel):
        ploc, pconf = self.model(x)
        ploc, pconf = ploc.float(), pconf.float()
        mask = glabel > 0
        pos = mask.sum(1)
        sl1 = (F.smooth_l1_loss(ploc, gloc, reduction="none").sum(2) * mask).sum(1)
        con = F.cross_entropy(pconf.transpose(1, 2), glabel, reduction="none")
        neg = con.masked_fill(mask, 0.0)
        rank = neg.argsort(1, descending=True).argsort(1)
        neg_mask = rank < (3 * pos).clamp(max=mask.shape[1])[:, None]
        closs = (con * (mask | neg_mask)).sum(1)
        has = (pos > 0).float()
        return ((sl1 + closs) * has / pos.float().clamp(min=1e-6)).mean()


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
    lab = torch.where(best_iou >= thr, lab, torch.zeros_like(lab))
    matched = boxes.gather(1, best_g[..., None].expand(-1, -1, 4))
    gloc = D.encode(matched, anchors[None].expand(b, -1, -1), WEIGHTS)
    return gloc, lab


@torch.no_grad()
def detect(ploc, pconf, anchors, score_thr=0.05, nms_thr=0.5, per_class=200, max_out=200):
    """Detections of one image: normalized xyxy boxes, scores, labels (1..K-1)."""
    boxes = D.decode(ploc.float(), anchors, WEIGHTS).clamp(0, 1)
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
    """COCO training images with the SSD random crop, flip and resize to ``size``."""

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
        keep = ~t["crowd"]
        boxes, labels = t["boxes"][keep], t["labels"][keep]
        rng = np.random.default_rng((self.seed * 1000003 + self.epoch * 7919 + i) % (2**63))
        w, h = img.size
        crop = ssd_crop(rng, w, h, boxes, self.max_samples)
        if crop is not None:
            x0, y0, x1, y1 = crop
            c = (boxes[:, :2] + boxes[:, 2:]) / 2
            inside = (c[:, 0] > x0) & (c[:, 0] < x1) & (c[:, 1] > y0) & (c[:, 1] < y1)
            boxes, labels = boxes[inside], labels[inside]
            boxes = np.clip(boxes - [x0, y0, x0, y0], 0, [x1 - x0, y1 - y0, x1 - x0, y1 - y0])
            img = img.crop((x0, y0, x1, y1))
            w, h = x1 - x0, y1 - y0
        if rng.uniform() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
            boxes = np.stack([w - boxes[:, 2], boxes[:, 1], w - boxes[:, 0], boxes[:, 3]], 1) if len(boxes) else boxes
        s = self.size
        img = img.resize((s, s), Image.BILINEAR)
        boxes = np.asarray(boxes, np.float32).reshape(-1, 4) * [s / w, s / h, s / w, s / h]
        return (torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()),
                {"boxes": boxes.astype(np.float32), "labels": labels})


def ssd_crop(rng, w, h, boxes, max_samples):
    """The SSD random crop: a minimum IoU drawn from (none, 0.1, 0.3, 0.5, 0.7, 0.9) or no crop."""
    choice = rng.integers(0, 7)
    if choice == 0 or len(boxes) == 0:
        return None
    min_iou = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9][choice - 1]
    for _ in range(max_samples):
        cw, ch = rng.uniform(0.3, 1.0) * w, rng.uniform(0.3, 1.0) * h
        if not 0.5 <= cw / ch <= 2:
            continue
        x0, y0 = rng.uniform(0, w - cw), rng.uniform(0, h - ch)
        box = np.array([[x0, y0, x0 + cw, y0 + ch]])
        from runner.workloads.coco_eval import box_iou as np_iou

        if np_iou(boxes, box, np.zeros(1, bool)).min() < min_iou:
            continue
        return int(x0), int(y0), int(x0 + cw), int(y0 + ch)
    return None


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
        self.anchors = default_boxes(self.size, feat_sizes, scales, cfg["aspect_ratios"]).to(ctx.device)
        self.feat_sizes = feat_sizes
        self.data = None
        if ctx.mode == "ttt":
            self._load_data(model)
        self.model = V.prepare_model(ctx, model)
        self.net = ctx.wrap(SSDLoss(self.model))
        self.step_model = compile_fn(ctx, self.net)
        gbs = self.batch * ctx.world_size
        self.lr = V.round_lr(cfg["lr_per_32"] * gbs / 32, 1e-5)
        self.opt = torch.optim.SGD(V.param_groups(self.model, cfg["weight_decay"]), lr=self.lr,
                                   momentum=cfg["momentum"], **ctx.fused())
        self.scaler = ctx.grad_scaler()
        self.step = 0
        self.steps_per_epoch = max(1, self.train_samples // gbs) if ctx.mode == "ttt" else 1
        self.warmup = int(cfg["warmup_steps"])
        self.boundaries = [e * self.steps_per_epoch for e in cfg["decay_epochs"]]

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
        train_idx, self.val_idx, ids = D.open_coco(ctx, self.num_classes)
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
            "opt_learning_rate_decay_boundary_epochs": list(cfg["decay_epochs"]),
            "max_samples": cfg["max_samples"],
            "model_bn_span": self.batch,
            "image_size": self.size,
            "num_default_boxes": int(self.anchors.shape[0]),
        }

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

    def _images(self, u8):
        return V.to_device_images(self.ctx, u8)

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
                x, b = self._images(self.xtr[idx]), self.btr[idx].clone()
                f = flips[s: s + self.batch]
                x = torch.where(f.view(-1, 1, 1, 1), x.flip(3), x)
                fb = torch.stack([1 - b[..., 2], b[..., 1], 1 - b[..., 0], b[..., 3]], -1)
                b = torch.where(f.view(-1, 1, 1), fb, b)
                self._train_step(x, b, self.ltr[idx])
                ctx.mark_step()
            return
        self.train_sampler.epoch = epoch
        self.train_set.epoch = epoch
        for images, targets in self.train_loader:
            b, lab = pad_targets(targets, (self.size, self.size))
            self._train_step(self._images(images), b.to(ctx.device), lab.to(ctx.device))
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
