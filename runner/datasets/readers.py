"""Readers of the prepared datasets, for the workloads (``--data ROOT``).

Each reader first calls ``check``: data that is missing or incomplete raises
``NotPrepared`` with one line before anything is loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from runner.datasets import check, dataset_dir


def ncf(root) -> dict:
    """MovieLens-20M in NCF form: int64 arrays as the ncf workload trains and evaluates on them."""
    doc = check("ml-20m", root)
    d = dataset_dir("ml-20m", root)
    train = np.load(d / "train.npy")
    test = np.load(d / "test.npy")
    neg = np.load(d / "test_negatives.npy")
    return {
        "users": int(doc["counts"]["users"]),
        "items": int(doc["counts"]["items"]),
        "train_users": train[:, 0].astype(np.int64),
        "train_items": train[:, 1].astype(np.int64),
        "test_users": test[:, 0].astype(np.int64),
        "test_items": test[:, 1].astype(np.int64),
        "test_negatives": neg.astype(np.int64),
    }


@dataclass
class Sentences:
    """Token-id sentences of one split and language: ``len(s)``, ``s[i]`` (int32 array)."""

    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


class WMT:
    """A prepared WMT dataset: ``wmt.split('train', 'en')``, ``wmt.bpe.decode(ids)``, special ids."""

    PAD, UNK, BOS, EOS = 0, 1, 2, 3

    def __init__(self, name: str, root, mmap: bool = True):
        from runner.datasets.bpe import BPE

        self.manifest = check(name, root)
        self.dir = dataset_dir(name, root)
        self.bpe = BPE.load(self.dir / "vocab.json")
        self.vocab_size = len(self.bpe.vocab)
        self._mmap = "r" if mmap else None

    def split(self, split: str, lang: str) -> Sentences:
        return Sentences(
            np.load(self.dir / f"{split}.{lang}.ids.npy", mmap_mode=self._mmap),
            np.load(self.dir / f"{split}.{lang}.offsets.npy"),
        )

    def pairs(self, split: str, src: str = "en", tgt: str = "de") -> tuple[Sentences, Sentences]:
        return self.split(split, src), self.split(split, tgt)


def wmt(name: str, root) -> WMT:
    """``wmt('wmt16', root)`` (GNMT) or ``wmt('wmt17', root)`` (Transformer); benchmark names work too."""
    return WMT(name, root)


def imagenet(root) -> dict:
    """Class names (label = index) and per split the image paths and labels."""
    check("imagenet", root)
    d = dataset_dir("imagenet", root)
    wnids = [ln.split()[0] for ln in (d / "classes.txt").read_text(encoding="utf-8").splitlines() if ln.strip()]
    out = {"classes": wnids}
    for split in ("train", "val"):
        paths, labels = [], []
        for i, w in enumerate(wnids):
            names = sorted(e.name for e in os.scandir(d / split / w) if e.is_file())
            paths += [str(d / split / w / n) for n in names]
            labels += [i] * len(names)
        out[split] = (paths, np.asarray(labels, np.int64))
    return out


def coco(root) -> dict:
    """Per split (train2017, val2017) the image folder and the instances JSON path."""
    check("coco", root)
    d = dataset_dir("coco", root)
    return {
        split: {"images": d / split, "annotations": d / "annotations" / f"instances_{split}.json"}
        for split in ("train2017", "val2017")
    }
