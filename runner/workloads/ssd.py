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

This module holds the recipe (learning rate, decay) and the trainer; the model, default boxes, matching,
loss and inference are in ssd_model.py, the COCO data and augmentation in ssd_data.py.
"""

from __future__ import annotations

import numpy as np
import torch

from runner.workloads import detection as D
from runner.workloads import schedules as S
from runner.workloads import vision as V
from runner.workloads.base import WorkloadError, compile_fn
from runner.workloads.compiling import build_device
from runner.workloads.coco_eval import COCOEvaluator
from runner.workloads.pretrained import load_backbone
from runner.workloads.trainer import Trainer as TrainerContract
from runner.workloads.trainer import WorkloadSpec
from runner.workloads.ssd_data import CocoEval, CocoTrain, collate, color_jitter, pad_targets

# GRAY, ssd_crop and ssd_loss are not used here: tests and benchmarks/ssd_bf16.py read them as ssd.<name>
# (each noqa on a one-line import, where `ruff format` leaves it)
from runner.workloads.ssd_data import GRAY, ssd_crop  # noqa: F401
from runner.workloads.ssd_model import SSD, SSDLoss, default_boxes, detect, feature_sizes, match, ssd_loss  # noqa: F401


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


class Trainer(TrainerContract):
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        self.size = cfg["image_size"]
        self.num_classes = cfg["classes"] + 1
        self.batch = cfg["batch_size"]
        if ctx.mode == "throughput":
            self.batch = ctx.throughput_batch_size(cfg["batch_size"])
        feat_sizes = feature_sizes(cfg)
        with build_device(ctx):
            model = SSD(cfg, self.num_classes)
        scales = cfg["scales"]
        if len(scales) != len(feat_sizes) + 1:
            raise WorkloadError(f"ssd: {len(feat_sizes)} feature levels need {len(feat_sizes) + 1} scales")
        self.anchors = default_boxes(self.size, feat_sizes, scales, cfg["aspect_ratios"], cfg.get("steps")).to(
            ctx.device
        )
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
        self.optimizer = torch.optim.SGD(
            [{"params": params, "weight_decay": cfg["weight_decay"]}],
            lr=self.lr,
            momentum=cfg["momentum"],
            **ctx.fused(),
        )
        self.scaler = ctx.grad_scaler()
        self.steps_per_epoch = max(1, self.train_samples // gbs) if ctx.mode == "ttt" else 1
        self.warmup = int(cfg["warmup_steps"])
        self.lr_schedule = S.check(cfg.get("lr_schedule"), ("warmup_step",), "ssd")
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
        common = {
            "num_workers": workers,
            "pin_memory": ctx.cuda,
            "persistent_workers": workers > 0,
            "collate_fn": collate,
        }
        from runner.workloads.resnet50 import EpochSampler

        self.train_set = CocoTrain(train_idx, ids, self.size, cfg["max_samples"], ctx.seed)
        self.train_sampler = EpochSampler(len(ids), ctx, self.batch)
        self.train_loader = torch.utils.data.DataLoader(
            self.train_set, batch_size=self.batch, sampler=self.train_sampler, drop_last=True, **common
        )
        self.eval_loader = torch.utils.data.DataLoader(
            CocoEval(self.val_idx, self.val_idx.ids, self.size),
            batch_size=self.batch,
            sampler=EpochSampler(len(self.val_idx.ids), ctx, self.batch, False),
            **common,
        )

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

    def schedule(self, update: int) -> float:
        return S.rate(
            self.lr_schedule,
            update,
            warmup=self.warmup,
            warmup_factor=self.ctx.cfg["warmup_factor"],
            base=self.lr,
            boundaries=self.boundaries,
            factor=0.1,
        )

    def loss(self, x, boxes, labels):
        with torch.autocast(self.ctx.device.type, enabled=False):  # matching in fp32, outside autocast
            gloc, glab = match(self.anchors, boxes, labels)
        return self.step_model(x, gloc, glab)

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
        x = (x - torch.tensor(V.IMAGENET_MEAN, device=ctx.device).view(1, 3, 1, 1)) / torch.tensor(
            V.IMAGENET_STD, device=ctx.device
        ).view(1, 3, 1, 1)
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
                idx = perm[s : s + self.batch]
                x, b = self._images(self.xtr[idx], g), self.btr[idx].clone()
                f = flips[s : s + self.batch]
                x = torch.where(f.view(-1, 1, 1, 1), x.flip(3), x)
                fb = torch.stack([1 - b[..., 2], b[..., 1], 1 - b[..., 0], b[..., 3]], -1)
                b = torch.where(f.view(-1, 1, 1), fb, b)
                self.train_step(x, b, self.ltr[idx])
                ctx.mark_step()
            return
        self.train_sampler.epoch = epoch
        self.train_set.epoch = epoch
        g = V.device_generator(ctx, (ctx.seed * 7919 + epoch) * 1009 + ctx.rank)
        for images, targets in self.train_loader:
            b, lab = pad_targets(targets, (self.size, self.size))
            self.train_step(self._images(images, g), b.to(ctx.device), lab.to(ctx.device))
            ctx.mark_step()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        ctx = self.ctx
        self.model.eval()
        ev = COCOEvaluator("bbox")
        if self.data == "generated":
            n = len(self.eval_items)
            per = n // ctx.world_size
            mine = self.eval_items[ctx.rank * per : n if ctx.rank == ctx.world_size - 1 else (ctx.rank + 1) * per]
            batches = []
            for s in range(0, len(mine), 64):
                part = mine[s : s + 64]
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
                ev.add(
                    t["labels"],
                    s.cpu().numpy(),
                    lab.cpu().numpy(),
                    gt_boxes=t["boxes"],
                    det_boxes=b,
                    gt_crowd=t.get("crowd"),
                )
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

    def synthetic_batches(self, g):
        ctx = self.ctx
        x = V.synthetic_images(ctx, self.batch, self.size, g)
        boxes, labels = V.synthetic_boxes(ctx, self.batch, self.num_classes, g, (0.1, 0.8), (0.05, 0.3))
        return [(x, boxes.clamp(0, 1), labels)]


SPEC = WorkloadSpec(Trainer)
build = SPEC.build
