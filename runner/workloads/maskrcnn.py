"""Mask R-CNN, ResNet-50-FPN (MLPerf v0.5 "maskrcnn", COCO box and mask AP): the trainer.

The workload follows NVIDIA's v0.5 submission (maskrcnn-benchmark R-50-FPN 1x;
runner/README.md, "Fidelity to the MLPerf v0.5 references", lists every
element and every deviation). Its parts:

- runner/workloads/maskrcnn_model.py: the modules and the anchors;
- runner/workloads/maskrcnn_heads.py: RPN, proposals, RoI sampling, losses,
  inference and mask pasting;
- runner/workloads/maskrcnn_data.py: COCO as the reference feeds it, batches
  grouped by orientation, the generated shapes of the test scales;
- runner/workloads/maskrcnn_recipe.py: parameter groups, learning-rate
  schedule and the MLLOG keys.

Here: building the model (at full scale from the MSRA ResNet-50 the
reference loads, ``R-50.pkl``, checked against its published md5 before the
run: runner/artifacts.py), the training step (several processes average their
gradients with one flat all-reduce per step, since the detector calls its
modules piecewise), evaluation once per epoch with pycocotools
(runner/workloads/coco_eval.py) and the throughput step.

Small and tiny scales are test scales: generated shapes at 128 and 64 pixels,
a narrower and shallower network with trainable BN from scratch (``width``,
``layers``, ``fpn_channels``, ``box_fc``, ``mask_convs`` in workloads.yml).
"""

from __future__ import annotations

import torch

from runner.workloads import detection as D
from runner.workloads import maskrcnn_data as data
from runner.workloads import maskrcnn_recipe as recipe
from runner.workloads import vision as V
from runner.workloads.base import compile_fn
from runner.workloads.compiling import build_device
from runner.workloads.coco_eval import COCOEvaluator
from runner.workloads.maskrcnn_heads import Detector, paste_masks
from runner.workloads.maskrcnn_model import MaskRCNN
from runner.workloads.pretrained import load_backbone
from runner.workloads.trainer import Trainer as TrainerContract
from runner.workloads.trainer import WorkloadSpec


class Trainer(TrainerContract):
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        self.num_classes = cfg["classes"] + 1
        if ctx.mode == "throughput":
            self.batch = ctx.throughput_batch_size(cfg["batch_size"])
        else:
            self.batch = ctx.by_memory(cfg.get("batch_by_memory"), cfg["batch_size"])
        self.mask_stride = int(cfg.get("mask_stride", 1))
        frozen = cfg.get("backbone_norm", "bn") == "frozen"
        with build_device(ctx):
            model = MaskRCNN(cfg, self.num_classes, frozen)
        if ctx.mode == "ttt" and cfg.get("pretrained"):  # the published backbone (checked before the run)
            V.log_note("maskrcnn: " + load_backbone(ctx, model.backbone))
        self.data = None
        if ctx.mode == "ttt":
            self._load_data()
        self.model = V.prepare_model(ctx, model)
        if ctx.distributed:
            import torch.distributed as dist

            for t in list(self.model.parameters()) + list(self.model.buffers()):
                dist.broadcast(t.data, 0)
        feature_fn, roi_align_fn = self.model.features, None
        if ctx.compile:  # throughput mode only (SPEC): at a fixed image size the backbone and FPN compile well
            feature_fn = compile_fn(ctx, feature_fn)
            if cfg.get("compile_roi_align"):  # the gathers and their weights fuse into one kernel
                roi_align_fn = compile_fn(ctx, D.multilevel_roi_align)
        self.det = Detector(self.model, cfg, ctx, feature_fn, roi_align_fn)
        gbs = self.batch * ctx.world_size
        self.lr = recipe.base_lr(cfg, gbs)
        self.optimizer = torch.optim.SGD(
            recipe.param_groups(
                self.model,
                self.lr,
                cfg["weight_decay"],
                cfg.get("bias_lr_factor", 2.0),
                cfg.get("weight_decay_bias", 0.0),
            ),
            lr=self.lr,
            momentum=cfg["momentum"],
            **ctx.fused(),
        )
        self.scaler = ctx.grad_scaler()
        self.steps_per_epoch = max(1, self.train_samples // gbs) if ctx.mode == "ttt" else 1
        self.warmup = int(cfg["warmup_steps"])
        self.boundaries = recipe.decay_steps(cfg, gbs, self.steps_per_epoch)
        mean, std = cfg.get("pixel_mean", V.IMAGENET_MEAN), cfg.get("pixel_std", V.IMAGENET_STD)
        self.norm = (tuple(mean), tuple(std))

    def _load_data(self):
        ctx, cfg = self.ctx, self.ctx.cfg
        if cfg["data"] == "generated":
            self.data = "generated"
            self.xtr, self.btr, self.ltr, self.mtr = data.generated_train(cfg, ctx.device)
            self.eval_items = D.generate_shapes(cfg, cfg["eval_images"], 1)
            self.train_samples, self.eval_samples = len(self.xtr), len(self.eval_items)
            return
        train_idx, self.val_idx, _ = D.open_coco(ctx, self.num_classes)
        ids = [i for i in train_idx.ids if train_idx.all_anns[i]]  # any annotation, as the reference
        self.data = "prepared"
        self.train_samples, self.eval_samples = len(ids), len(self.val_idx.ids)
        workers = V.loader_workers(ctx)
        ms = self.mask_stride

        def train_collate(b):
            return data.collate(b, 32, ms)

        common = {"num_workers": workers, "pin_memory": ctx.cuda, "persistent_workers": workers > 0}
        self.train_set = data.CocoSet(train_idx, ids, cfg, True, ctx.seed, ms)
        self.train_sampler = data.GroupedSampler(self.train_set, self.batch, ctx)
        self.train_loader = torch.utils.data.DataLoader(
            self.train_set, batch_sampler=self.train_sampler, collate_fn=train_collate, **common
        )
        eval_set = data.CocoSet(self.val_idx, self.val_idx.ids, cfg, False, ctx.seed, ms)
        self.eval_loader = torch.utils.data.DataLoader(
            eval_set,
            batch_size=self.batch,
            sampler=data.ShardSampler(len(eval_set), ctx),
            collate_fn=data.collate,
            **common,
        )

    def hyperparameters(self) -> dict:
        return recipe.hyperparameters(self.ctx.cfg, self.batch, self.ctx.world_size, self.lr, self.boundaries)

    def schedule(self, update: int) -> list[float]:
        return recipe.group_rates(self.optimizer, update, self.lr, self.warmup, self.boundaries, self.ctx.cfg)

    def loss(self, images, sizes, boxes, labels, masks):
        return self.det.loss(images, sizes, boxes, labels, masks, self.mask_stride)

    def reduce_gradients(self):
        """One flat all-reduce of every gradient (the detector calls its modules piecewise: no DDP)."""
        if not self.ctx.distributed:
            return
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
            g.copy_(flat[o : o + g.numel()].view_as(g))
            o += g.numel()

    def _images(self, u8, sizes=None):
        """Normalised images on the device; the padding past each image's size is zero afterwards,
        as the reference pads its normalised images."""
        x = V.to_device_images(self.ctx, u8, *self.norm)
        if sizes is not None and (sizes.min(0).values < torch.tensor(x.shape[-2:], device=sizes.device)).any():
            ys = torch.arange(x.shape[-2], device=x.device)
            xs = torch.arange(x.shape[-1], device=x.device)
            s = sizes.to(x.device)
            inside = (ys[None, :, None] < s[:, 0, None, None]) & (xs[None, None, :] < s[:, 1, None, None])
            x = x * inside[:, None].to(x.dtype)
        return x

    def train_epoch(self, epoch: int) -> None:
        ctx = self.ctx
        self.model.train()
        if self.data == "generated":
            g = V.device_generator(ctx, ctx.seed * 7919 + epoch)
            self.det.gen = g
            n = self.xtr.shape[0]
            s = self.ctx.cfg["image_size"]
            perm = torch.randperm(n, device=ctx.device, generator=g)[ctx.shard(n)]
            flips = torch.rand(len(perm), device=ctx.device, generator=g) < 0.5
            sizes = torch.tensor([[s, s]], device=ctx.device, dtype=torch.float32).expand(self.batch, 2)
            for st in range(0, len(perm) - self.batch + 1, self.batch):
                idx = perm[st : st + self.batch]
                f = flips[st : st + self.batch]
                x, b, m = self.xtr[idx], self.btr[idx], self.mtr[idx]
                x = torch.where(f.view(-1, 1, 1, 1), x.flip(2), x)
                m = torch.where(f.view(-1, 1, 1, 1), m.flip(3), m)
                fb = torch.stack([s - b[..., 2], b[..., 1], s - b[..., 0], b[..., 3]], -1)
                b = torch.where(f.view(-1, 1, 1), fb, b)
                self.train_step(self._images(x), sizes, b, self.ltr[idx], m)
                ctx.mark_step()
            return
        self.train_sampler.epoch = epoch
        self.train_set.epoch = epoch
        for images, sizes, (b, lab, m) in self.train_loader:
            dev = ctx.device
            self.train_step(self._images(images, sizes), sizes.to(dev), b.to(dev), lab.to(dev), m.to(dev))
            ctx.mark_step()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        ctx = self.ctx
        self.model.eval()
        evb, evm = COCOEvaluator("bbox"), COCOEvaluator("segm")
        if self.data == "generated":
            batches = data.generated_eval_batches(self.eval_items, ctx, ctx.cfg["image_size"])
        else:
            batches = self.eval_loader
        for images, sizes, targets in batches:
            with ctx.autocast():
                out = self.det.detect(self._images(images, sizes), sizes.to(ctx.device))
            for (b, sc, lab, probs), t in zip(out, targets):
                h0, w0 = t["orig"]
                b = data.boxes_to_original(b.float().cpu().numpy(), t["size"], t["orig"])
                masks = paste_masks(probs.float().cpu().numpy(), b, h0, w0)
                sc, lab = sc.float().cpu().numpy(), lab.cpu().numpy()
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

    def synthetic_batches(self, g):
        ctx, cfg = self.ctx, self.ctx.cfg
        self.det.gen = g
        h, w = cfg.get("throughput_image", [cfg.get("image_size", 64)] * 2)
        x = V.synthetic_images(ctx, self.batch, (h, w), g)
        boxes, labels = V.synthetic_boxes(ctx, self.batch, self.num_classes, g, (0.2, 0.6), (0.1, 0.3))
        boxes = boxes * torch.tensor([w, h, w, h], device=ctx.device)
        ms = self.mask_stride
        yy = (torch.arange((h + ms - 1) // ms, device=ctx.device) + 0.5) * ms
        xx = (torch.arange((w + ms - 1) // ms, device=ctx.device) + 0.5) * ms
        bb = boxes[..., None, None]
        masks = (
            (yy[:, None] >= bb[..., 1, :, :])
            & (yy[:, None] < bb[..., 3, :, :])
            & (xx[None] >= bb[..., 0, :, :])
            & (xx[None] < bb[..., 2, :, :])
        ).to(torch.uint8)
        sizes = torch.tensor([[h, w]], device=ctx.device, dtype=torch.float32).expand(self.batch, 2)
        return [(x, sizes, boxes, labels, masks)]


SPEC = WorkloadSpec(Trainer, compile_modes=("throughput",))
build = SPEC.build
