"""ResNet-50 v1.5 image classification (MLPerf v0.5 "resnet", top-1 accuracy).

Full scale reads ImageNet as the datasets playbook prepares it
(``<data>/imagenet/{train,val}/<wnid>/*.JPEG`` and ``classes.txt``), decodes
JPEGs with Pillow in DataLoader workers (the reference's distorted crop, flip
and resize for training, resize and centre crop for evaluation) and subtracts
the channel means on the device, as the reference.
Small and tiny scales generate a fixed image classification set: each class is
a smooth colour pattern, each image a randomly shifted, contrast-scaled and
noisy copy of its class pattern; a share of the evaluation labels is replaced
at random, so top-1 stays below 1.0 (MLPerf's checker rejects 1.0). The
untrained model scores about 1/classes. Tiny uses the same code narrower and
shallower (``width``, ``layers`` in workloads.yml).

Optimizer and learning-rate schedule: ``resnet50_recipe`` (at full scale the
MLPerf v0.5 submission's: Nesterov SGD, warm-up then steps x0.1 after epochs 30
and 60, weight decay on all but batch norm, no label smoothing).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from runner.workloads import resnet50_recipe as recipe
from runner.workloads import vision as V
from runner.workloads.base import WorkloadError, compile_fn
from runner.workloads.compiling import build_device
from runner.workloads.trainer import Trainer as TrainerContract
from runner.workloads.trainer import WorkloadSpec

DATA_SEED = 20190502


# the reference's input: each channel's ImageNet mean subtracted, no division (tf_cnn_benchmarks --ml_perf)
REFERENCE_MEAN = (123.68, 116.78, 103.94)
REFERENCE_STD = (1.0, 1.0, 1.0)
# tf.image.sample_distorted_bounding_box as the reference calls it (preprocessing.py train_image)
CROP_MIN_COVERED, CROP_RATIO, CROP_AREA, CROP_ATTEMPTS = 0.1, (0.75, 1.33), (0.05, 1.0), 100
_TRUNCATED_STD = 0.87962566103423978  # the standard deviation of a unit normal truncated at +-2


@torch.no_grad()
def _truncated_normal_(t: torch.Tensor, sd: float) -> None:
    """N(0, sd) redrawn wherever it falls beyond 2 sd (as TF's truncated_normal; faster than nn.init's)."""
    flat = t.view(-1)
    flat.normal_(0.0, sd)
    idx = (flat.abs() > 2 * sd).nonzero().squeeze(1)
    while idx.numel():
        v = torch.randn(idx.numel(), dtype=t.dtype, device=t.device) * sd
        flat[idx] = v
        idx = idx[v.abs() > 2 * sd]


def reference_init(model: nn.Module) -> None:
    """tf_cnn_benchmarks' initialisation: convolutions by variance scaling (std sqrt(1/fan_in) after
    truncation at 2 sigma), batch norm scale 1 and shift 0 (no zero scale on a block's last norm),
    the classifier truncated normal with sigma sqrt(1/fan_in) and bias 0."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            fan_in = m.weight[0].numel()
            sd = (1.0 / fan_in) ** 0.5 / (_TRUNCATED_STD if isinstance(m, nn.Conv2d) else 1.0)
            _truncated_normal_(m.weight, sd)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def distorted_crop(w: int, h: int, rng) -> tuple[int, int, int, int]:
    """A training crop box (x0, y0, x1, y1) drawn as the reference's sample_distorted_bounding_box with the
    whole image as the object: aspect ratio uniform in CROP_RATIO, height uniform between the heights that
    give the extreme areas, kept when it fits, covers CROP_AREA and at least CROP_MIN_COVERED of the image;
    after CROP_ATTEMPTS misses, the whole image."""
    lo_area, hi_area = CROP_AREA[0] * w * h, CROP_AREA[1] * w * h
    for _ in range(CROP_ATTEMPTS):
        ratio = rng.uniform(*CROP_RATIO)
        hmin, hmax = int(round((lo_area / ratio) ** 0.5)), int(round((hi_area / ratio) ** 0.5))
        if round(hmax * ratio) > w:
            hmax = int((w + 0.5 - 1e-7) / ratio)
        hmax = min(hmax, h)
        hmin = min(hmin, hmax)
        ch = int(rng.integers(hmin, hmax + 1))
        cw = int(round(ch * ratio))
        if cw * ch < lo_area:
            ch += 1
            cw = int(round(ch * ratio))
        area = cw * ch
        if not (0 < cw <= w and 0 < ch <= h and lo_area <= area <= hi_area and area >= CROP_MIN_COVERED * w * h):
            continue
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        return x0, y0, x0 + cw, y0 + ch
    return 0, 0, w, h


def open_cropped(path: str, size: int, rng):
    """The RGB image at ``path`` and its training crop box (``distorted_crop`` on the stored size). A JPEG
    is decoded at the coarsest scale that still gives the crop ``size`` pixels or more on each side."""
    from PIL import Image

    img = Image.open(path)
    w, h = img.size
    x0, y0, x1, y1 = distorted_crop(w, h, rng)
    if img.format == "JPEG":
        img.draft("RGB", (math.ceil(w * size / (x1 - x0)), math.ceil(h * size / (y1 - y0))))
    fx, fy = img.size[0] / w, img.size[1] / h
    return img.convert("RGB"), (x0 * fx, y0 * fy, x1 * fx, y1 * fy)


class ResNet(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), width=64, num_classes=1000, init="gpulab", **stem):
        super().__init__()
        self.trunk = V.ResNetTrunk(V.Bottleneck, layers, width, zero_init=init != "reference", **stem)
        self.fc = nn.Linear(self.trunk.channels[-1], num_classes)
        if init == "reference":
            reference_init(self)
        else:  # the test scales: Kaiming convolutions, zero scale on each block's last norm, N(0, 0.01) classifier
            V.init_convs(self)
            nn.init.normal_(self.fc.weight, 0, 0.01)
            nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        x = self.trunk(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class WithLoss(nn.Module):
    """Model and loss in one module, so that torch.compile fuses the loss too."""

    def __init__(self, model, label_smoothing=0.0):
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, x, y):
        logits = self.model(x)
        return F.cross_entropy(logits.float(), y, label_smoothing=self.label_smoothing)


# --- data ------------------------------------------------------------------------------


def generate(cfg: dict) -> dict:
    """The generated classification set of the small and tiny scales (deterministic)."""
    rng = np.random.default_rng(DATA_SEED)
    k, s = cfg["classes"], cfg["image_size"]
    g = torch.Generator().manual_seed(DATA_SEED)
    coarse = torch.randn(k, 3, 4, 4, generator=g)
    protos = F.interpolate(coarse, size=(s, s), mode="bicubic", align_corners=False)
    protos = protos / protos.flatten(1).std(dim=1).view(k, 1, 1, 1)

    def make(n, label_noise):
        labels = rng.integers(0, k, size=n)
        shifts = rng.integers(-s // 8, s // 8 + 1, size=(n, 2))
        contrast = rng.uniform(0.6, 1.4, size=n).astype(np.float32)
        imgs = protos[torch.as_tensor(labels)].clone()
        for i in range(n):
            imgs[i] = torch.roll(imgs[i], shifts=(int(shifts[i, 0]), int(shifts[i, 1])), dims=(1, 2))
        imgs = imgs * torch.as_tensor(contrast).view(n, 1, 1, 1)
        imgs = imgs + cfg["noise"] * torch.randn(imgs.shape, generator=g)
        if label_noise > 0:
            flip = rng.uniform(size=n) < label_noise
            labels = np.where(flip, (labels + rng.integers(1, k, size=n)) % k, labels)
        return imgs.float(), torch.as_tensor(labels, dtype=torch.int64)

    xtr, ytr = make(cfg["train_images"], 0.0)
    xev, yev = make(cfg["eval_images"], cfg.get("eval_label_noise", 0.0))
    return {"train": (xtr, ytr), "eval": (xev, yev), "classes": k}


def read_classes(root: Path) -> list[str]:
    f = root / "classes.txt"
    if f.is_file():
        names = [ln.split()[0] for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if names:
            return names
    return sorted(p.name for p in (root / "train").iterdir() if p.is_dir())


def list_split(root: Path, split: str, classes: list[str]) -> tuple[list[str], np.ndarray]:
    paths, labels = [], []
    for i, wnid in enumerate(classes):
        d = root / split / wnid
        if not d.is_dir():
            raise WorkloadError(f"imagenet data: {d} is missing (classes.txt names {wnid})")
        names = sorted(e.name for e in os.scandir(d) if e.name.lower().endswith((".jpeg", ".jpg", ".png")))
        paths += [str(d / n) for n in names]
        labels += [i] * len(names)
    if not paths:
        raise WorkloadError(f"imagenet data: no images under {root / split}")
    return paths, np.asarray(labels, dtype=np.int64)


class ImageFolder(torch.utils.data.Dataset):
    """ImageNet JPEGs, uint8 HWC: the reference's distorted crop, flip and bilinear resize (train), or the
    shorter side to 256 and a centre crop (eval)."""

    def __init__(self, paths, labels, size, train, seed):
        self.paths, self.labels, self.size, self.train, self.seed = paths, labels, size, train, seed
        self.epoch = 0

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        s = self.size
        if self.train:
            rng = np.random.default_rng((self.seed * 1000003 + self.epoch * 7919 + i) % (2**63))
            img, box = open_cropped(self.paths[i], s, rng)
            img = img.resize((s, s), Image.BILINEAR, box=box)
            if rng.uniform() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
        else:
            short = int(round(s / 0.875))
            img = V.decode_rgb(self.paths[i], draft_size=short)
            w, h = img.size
            r = short / min(w, h)
            img = img.resize((max(short, round(w * r)), max(short, round(h * r))), Image.BILINEAR)
            w, h = img.size
            x0, y0 = (w - s) // 2, (h - s) // 2
            img = img.crop((x0, y0, x0 + s, y0 + s))
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()), int(self.labels[i])


class EpochSampler(torch.utils.data.Sampler):
    """This rank's share of a seeded per-epoch permutation (the same on every rank)."""

    def __init__(self, n, ctx, batch, shuffle=True):
        self.n, self.ctx, self.batch, self.shuffle = n, ctx, batch, shuffle
        self.epoch = 0

    def indices(self):
        ctx = self.ctx
        if not self.shuffle:
            per = self.n // ctx.world_size
            stop = self.n if ctx.rank == ctx.world_size - 1 else (ctx.rank + 1) * per
            return np.arange(ctx.rank * per, stop)
        perm = V.epoch_permutation(ctx.seed, self.epoch, self.n)
        mine = perm[ctx.shard(self.n)]
        return mine[: len(mine) // self.batch * self.batch]

    def __iter__(self):
        return iter(self.indices().tolist())

    def __len__(self):
        return len(self.indices())


# --- trainer -------------------------------------------------------------------------


class Trainer(TrainerContract):
    def __init__(self, ctx):
        self.ctx = ctx
        cfg = ctx.cfg
        self.image_size = cfg["image_size"]
        self.batch = cfg["batch_size"]
        if ctx.mode == "throughput":
            self.batch = ctx.throughput_batch_size(cfg["batch_size"])
        self.classes = cfg["classes"]
        self.data = None
        if ctx.mode == "ttt":
            self._load_data()
        with build_device(ctx):
            model = ResNet(cfg["layers"], cfg["width"], self.classes, cfg.get("init", "gpulab"), **V.stem_options(ctx))
        self.model = V.prepare_model(ctx, model)
        self.net = ctx.wrap(WithLoss(self.model, cfg.get("label_smoothing", 0.0)))
        self.step_model = compile_fn(ctx, self.net)
        gbs = self.batch * ctx.world_size
        # the schedule's epoch: the training set over the global batch (in throughput mode, the scale's
        # ``train_images``: ImageNet's 1,281,167 at full)
        images = self.train_samples if ctx.mode == "ttt" else cfg.get("train_images", gbs)
        self.recipe = recipe.Recipe(cfg, gbs, images)
        self.lr = self.recipe.peak
        self.optimizer = self.recipe.optimizer(self.model, ctx.fused())
        self.scaler = ctx.grad_scaler()
        self.steps_per_epoch = max(1, self.train_samples // gbs) if ctx.mode == "ttt" else 1
        self.max_epochs = int(ctx.spec.get("max_epochs") or cfg["max_epochs"])

    # --- data ---
    def _load_data(self):
        ctx, cfg = self.ctx, self.ctx.cfg
        if cfg["data"] == "generated":
            d = generate(cfg)
            self.data = "generated"
            self.xtr, self.ytr = d["train"][0].to(ctx.device), d["train"][1].to(ctx.device)
            self.xev, self.yev = d["eval"][0].to(ctx.device), d["eval"][1].to(ctx.device)
            if ctx.channels_last:
                self.xtr = self.xtr.contiguous(memory_format=torch.channels_last)
                self.xev = self.xev.contiguous(memory_format=torch.channels_last)
            self.train_samples, self.eval_samples = len(self.ytr), len(self.yev)
            return
        root = Path(ctx.data) / "imagenet"
        if not root.is_dir():
            root = Path(ctx.data)
        V.check_dataset("imagenet", str(root))
        classes = read_classes(root)
        if len(classes) != self.classes:
            raise WorkloadError(f"imagenet data at {root}: {len(classes)} classes, expected {self.classes}")
        tr_paths, tr_labels = list_split(root, "train", classes)
        ev_paths, ev_labels = list_split(root, "val", classes)
        self.data = "prepared"
        self.train_samples, self.eval_samples = len(tr_paths), len(ev_paths)
        workers = V.loader_workers(ctx)
        common = {"num_workers": workers, "pin_memory": ctx.cuda, "persistent_workers": workers > 0}
        if workers > 0:
            common["prefetch_factor"] = 4
        self.train_set = ImageFolder(tr_paths, tr_labels, self.image_size, True, ctx.seed)
        self.train_sampler = EpochSampler(len(tr_paths), ctx, self.batch)
        self.train_loader = torch.utils.data.DataLoader(
            self.train_set, batch_size=self.batch, sampler=self.train_sampler, drop_last=True, **common
        )
        ev_set = ImageFolder(ev_paths, ev_labels, self.image_size, False, ctx.seed)
        self.eval_loader = torch.utils.data.DataLoader(
            ev_set, batch_size=self.batch, sampler=EpochSampler(len(ev_paths), ctx, self.batch, False), **common
        )

    def hyperparameters(self) -> dict:
        cfg = self.ctx.cfg
        hp = self.recipe.hyperparameters(bn_span=self.batch)
        hp.update({"model_layers": list(cfg["layers"]), "model_width": cfg["width"], "image_size": self.image_size})
        return hp

    # --- steps ---
    def schedule(self, update: int) -> float:
        return self.recipe.lr(update)

    def loss(self, x, y):
        return self.step_model(x, y)

    def train_epoch(self, epoch: int) -> None:
        ctx = self.ctx
        self.model.train()
        if self.data == "generated":
            g = V.device_generator(ctx, ctx.seed * 7919 + epoch)
            n = len(self.ytr)
            perm = torch.randperm(n, device=ctx.device, generator=g)[ctx.shard(n)]
            flips = torch.rand(len(perm), device=ctx.device, generator=g) < 0.5
            for s in range(0, len(perm) - self.batch + 1, self.batch):
                idx = perm[s : s + self.batch]
                x = self.xtr[idx]
                f = flips[s : s + self.batch].view(-1, 1, 1, 1)
                x = torch.where(f, x.flip(3), x)
                self.train_step(x, self.ytr[idx])
                ctx.mark_step()
            return
        self.train_sampler.epoch = epoch
        self.train_set.epoch = epoch
        for images, labels in self.train_loader:
            x = V.to_device_images(ctx, images, REFERENCE_MEAN, REFERENCE_STD)
            self.train_step(x, labels.to(ctx.device, non_blocking=True))
            ctx.mark_step()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        ctx = self.ctx
        self.model.eval()
        correct = total = 0
        if self.data == "generated":
            n = len(self.yev)
            per = n // ctx.world_size
            sl = slice(ctx.rank * per, n if ctx.rank == ctx.world_size - 1 else (ctx.rank + 1) * per)
            xev, yev = self.xev[sl], self.yev[sl]
            batches = [(xev[s : s + 256], yev[s : s + 256]) for s in range(0, len(yev), 256)]
        else:
            batches = (
                (V.to_device_images(ctx, im, REFERENCE_MEAN, REFERENCE_STD), lb.to(ctx.device))
                for im, lb in self.eval_loader
            )
        for x, y in batches:
            with ctx.autocast():
                logits = self.model(x)
            correct += int((logits.argmax(1) == y).sum())
            total += int(y.numel())
        c, t = ctx.all_sum([correct, total])
        self.model.train()
        return c / max(1.0, t)

    # --- throughput mode ---
    def throughput_batch(self) -> int:
        return self.batch

    def synthetic_batches(self, g):
        ctx = self.ctx
        x = V.synthetic_images(ctx, self.batch, self.image_size, g)
        return [(x, torch.randint(0, self.classes, (self.batch,), device=ctx.device, generator=g))]


SPEC = WorkloadSpec(Trainer)
build = SPEC.build
