"""The input pipelines of the TensorFlow ResNet-50 (runner.workloads.resnet50_tf): the generated
classification set of the small and tiny scales (the PyTorch workload's recipe: class patterns, shifts,
contrast, noise, noisy evaluation labels) and ImageNet's JPEGs through tf.data at full scale, each distributed
over the run's strategy. Imports neither torch nor TensorFlow itself (``tf`` is handed in).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DATA_SEED = 20190502
MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


def generate(cfg):
    """The generated classification set (numpy; same recipe as the PyTorch workload)."""
    rng = np.random.default_rng(DATA_SEED)
    k, s = cfg["classes"], cfg["image_size"]
    coarse = rng.standard_normal((k, 4, 4, 3)).astype(np.float32)
    reps = s // 4
    protos = np.repeat(np.repeat(coarse, reps, axis=1), reps, axis=2)
    # smooth the blocky upsampling with a box filter along both axes
    ker = np.ones(reps, np.float32) / reps
    for ax in (1, 2):
        protos = np.apply_along_axis(
            lambda v: np.convolve(np.pad(v, reps // 2, mode="wrap"), ker, "valid")[:s], ax, protos
        )
    protos /= protos.reshape(k, -1).std(axis=1).reshape(k, 1, 1, 1)

    def make(n, label_noise):
        labels = rng.integers(0, k, size=n)
        shifts = rng.integers(-s // 8, s // 8 + 1, size=(n, 2))
        contrast = rng.uniform(0.6, 1.4, size=n).astype(np.float32)
        imgs = np.stack([np.roll(protos[labels[i]], tuple(shifts[i]), axis=(0, 1)) for i in range(n)])
        imgs = imgs * contrast[:, None, None, None] + cfg["noise"] * rng.standard_normal(imgs.shape)
        if label_noise > 0:
            flip = rng.uniform(size=n) < label_noise
            labels = np.where(flip, (labels + rng.integers(1, k, size=n)) % k, labels)
        return imgs.astype(np.float32), labels.astype(np.int32)

    return make(cfg["train_images"], 0.0), make(cfg["eval_images"], cfg.get("eval_label_noise", 0.0))


def imagenet(tf, root: Path, cfg, batch, seed):
    """(train, val, n_train, n_eval, classes found): tf.data pipelines over a prepared ImageNet tree
    (random-resized crop and flip for training; resize and centre crop for evaluation)."""
    f = root / "classes.txt"
    classes = (
        [ln.split()[0] for ln in f.read_text().splitlines() if ln.strip()]
        if f.is_file()
        else sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    )
    size = cfg["image_size"]

    def files(split):
        paths, labels = [], []
        for i, c in enumerate(classes):
            d = root / split / c
            names = sorted(e.name for e in os.scandir(d) if e.name.lower().endswith((".jpeg", ".jpg", ".png")))
            paths += [str(d / n) for n in names]
            labels += [i] * len(names)
        return paths, labels

    def train_map(path, label):
        raw = tf.io.read_file(path)
        shape = tf.io.extract_jpeg_shape(raw)
        bbox = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])
        begin, csize, _ = tf.image.sample_distorted_bounding_box(
            shape,
            bbox,
            min_object_covered=0.1,
            aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0),
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        oy, ox, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(csize)
        img = tf.image.decode_and_crop_jpeg(raw, tf.stack([oy, ox, h, w]), channels=3)
        img = tf.image.resize(img, (size, size))
        img = tf.image.random_flip_left_right(img)
        return (img - MEAN) / STD, label

    def eval_map(path, label):
        img = tf.image.decode_jpeg(tf.io.read_file(path), channels=3)
        short = tf.cast(tf.reduce_min(tf.shape(img)[:2]), tf.float32)
        r = (size / 0.875) / short
        hw = tf.cast(tf.round(tf.cast(tf.shape(img)[:2], tf.float32) * r), tf.int32)
        img = tf.image.resize(img, hw)
        img = tf.image.resize_with_crop_or_pad(img, size, size)
        return (img - MEAN) / STD, label

    tp, tl = files("train")
    vp, vl = files("val")
    auto = tf.data.AUTOTUNE
    train = (
        tf.data.Dataset.from_tensor_slices((tp, tl))
        .shuffle(len(tp), seed=seed, reshuffle_each_iteration=True)
        .map(train_map, num_parallel_calls=auto)
        .batch(batch, drop_remainder=True)
        .prefetch(auto)
    )
    val = (
        tf.data.Dataset.from_tensor_slices((vp, vl)).map(eval_map, num_parallel_calls=auto).batch(batch).prefetch(auto)
    )
    return train, val, len(tp), len(vp), len(classes)


def ttt_data(tf, spec, cfg, gbs: int, seed: int, strategy):
    """``(distributed (train, val), n_train, n_eval)``: the generated set, or the prepared ImageNet."""
    classes = cfg["classes"]
    if cfg["data"] == "generated":
        (xtr, ytr), (xev, yev) = generate(cfg)
        train = (
            tf.data.Dataset.from_tensor_slices((xtr, ytr)).shuffle(len(ytr), seed=seed).batch(gbs, drop_remainder=True)
        )
        val = tf.data.Dataset.from_tensor_slices((xev, yev)).batch(256)
        n_train, n_eval = len(ytr), len(yev)
    else:
        root = Path(spec["data"]) / "imagenet"
        root = root if root.is_dir() else Path(spec["data"])
        try:
            from runner.datasets import check
        except ImportError:
            check = None
        if check is not None:
            check("imagenet", str(root))
        train, val, n_train, n_eval, found = imagenet(tf, root, cfg, gbs, seed)
        if found != classes:
            raise ValueError(f"imagenet data at {root}: {found} classes, expected {classes}")
    return (
        (strategy.experimental_distribute_dataset(train), strategy.experimental_distribute_dataset(val)),
        n_train,
        n_eval,
    )
