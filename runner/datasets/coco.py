"""COCO 2017 (for SSD and Mask R-CNN) in its own layout.

Inputs: ``train2017.zip`` and ``val2017.zip`` (``<split>/<12 digits>.jpg``) and
``annotations_trainval2017.zip`` (``annotations/instances_<split>.json``;
the captions and keypoints files are left out). Written:

    train2017/*.jpg, val2017/*.jpg, annotations/instances_{train,val}2017.json

Every image an instances file lists must be in its folder and vice versa.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from runner import boundjson
from runner.datasets.common import CHUNK, NotPrepared, PrepareError, sha256_file, tree_digest, zip_open

SPLITS = ("train2017", "val2017")


def _artifact(spec: dict, archives: Path, name: str) -> Path:
    for a in spec["artifacts"]:
        if a["file"] == name:
            return archives / name
    raise PrepareError(f"coco: the catalogue entry names no artifact {name}")


def prepare(spec: dict, archives: Path, dest: Path) -> tuple[dict, dict]:
    counts, sums = {}, {}
    ann_dir = dest / "annotations"
    ann_dir.mkdir(parents=True, exist_ok=True)
    ann_zip = _artifact(spec, archives, "annotations_trainval2017.zip")
    with zip_open(ann_zip) as zf:
        members = {n.rsplit("/", 1)[-1]: n for n in zf.namelist()}
        for split in SPLITS:
            want = f"instances_{split}.json"
            if want not in members:
                raise PrepareError(f"{ann_zip}: no annotations/{want}")
            with zf.open(members[want]) as src, open(ann_dir / want, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
    for split in SPLITS:
        ann = ann_dir / f"instances_{split}.json"
        try:
            doc = boundjson.read(ann, boundjson.ANNOTATION_CHARS)
            listed = {im["file_name"] for im in doc["images"]}
            n_ann, n_cat = len(doc["annotations"]), len(doc["categories"])
        except (ValueError, KeyError, TypeError) as exc:
            raise PrepareError(f"{ann_zip}: annotations/{ann.name} is not a COCO instances file ({exc})") from None
        img_zip = _artifact(spec, archives, f"{split}.zip")
        out_dir = dest / split
        out_dir.mkdir(parents=True, exist_ok=True)
        files = []
        with zip_open(img_zip) as zf:
            for info in zf.infolist():
                base = info.filename.rsplit("/", 1)[-1]
                if info.is_dir() or not base.lower().endswith(".jpg"):
                    continue
                with zf.open(info) as src, open(out_dir / base, "wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
                files.append((f"{split}/{base}", info.file_size))
        names = {f.rsplit("/", 1)[-1] for f, _ in files}
        if names != listed:
            extra, missing = sorted(names - listed), sorted(listed - names)
            what = (
                f"{len(missing)} listed image(s) missing, e.g. {missing[0]}"
                if missing
                else f"{len(extra)} image(s) not in the annotations, e.g. {extra[0]}"
            )
            raise PrepareError(f"{img_zip}: does not match annotations/{ann.name}: {what}")
        counts[f"{split}_images"] = len(files)
        counts[f"{split}_annotations"] = n_ann
        counts["categories"] = n_cat
        sums[f"{split}_tree"] = tree_digest(files)
        sums[f"annotations/{ann.name}"] = sha256_file(ann)
    return counts, sums


def verify(dest: Path, manifest: dict) -> None:
    counts = manifest.get("counts", {})
    for split in SPLITS:
        ann = dest / "annotations" / f"instances_{split}.json"
        if not ann.is_file():
            raise NotPrepared(f"{ann} is missing")
        if ann.stat().st_size == 0:
            raise NotPrepared(f"{ann} is empty")
        d = dest / split
        try:
            n = sum(1 for e in os.scandir(d) if e.name.endswith(".jpg"))
        except FileNotFoundError:
            raise NotPrepared(f"{d} is missing") from None
        if n != counts.get(f"{split}_images"):
            raise NotPrepared(f"{d} holds {n} images, the manifest says {counts.get(f'{split}_images')}")
