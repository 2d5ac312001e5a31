"""ImageNet (ILSVRC2012) into class folders.

Inputs (licensed: from a lab path or mirror, never a public site):
``ILSVRC2012_img_train.tar`` (one ``<wnid>.tar`` per class holding
``<wnid>_<n>.JPEG``), ``ILSVRC2012_img_val.tar`` (``ILSVRC2012_val_<8 digits>.JPEG``)
and ``ILSVRC2012_devkit_t12.tar.gz`` (``data/meta.mat``: the synsets with their
ILSVRC2012_ID; ``data/ILSVRC2012_validation_ground_truth.txt``: the ID of each
validation image in file-number order). Written:

    train/<wnid>/*.JPEG, val/<wnid>/*.JPEG
    classes.txt      one line per class, sorted by wnid: "<wnid> <words>" (line number = label)
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

from runner.datasets.common import PrepareError, extract_tar_flat, tar_members, tree_digest

_VAL = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG\Z")
_WNID = re.compile(r"n\d{8}\Z")


def _find(spec: dict, archives: Path, pattern: str) -> Path:
    for a in spec["artifacts"]:
        if re.search(pattern, a["file"]):
            return archives / a["file"]
    raise PrepareError(f"imagenet: the catalogue entry names no artifact like {pattern!r}")


def read_devkit(path: Path) -> tuple[dict[int, tuple[str, str]], list[int]]:
    """ILSVRC2012_ID -> (wnid, words) of the 1000 classes, and the validation ground truth IDs."""
    try:
        from scipy.io import loadmat
    except ImportError:
        raise PrepareError(
            "reading the ImageNet devkit's meta.mat needs scipy (it comes with mlperf-logging)"
        ) from None
    import io

    meta = truth = None
    with tar_members(path) as tf:
        for m in tf:
            if not m.isfile():
                continue
            base = m.name.rsplit("/", 1)[-1]
            if base == "meta.mat":
                meta = tf.extractfile(m).read()
            elif base == "ILSVRC2012_validation_ground_truth.txt":
                truth = tf.extractfile(m).read().decode("ascii", "replace")
    if meta is None or truth is None:
        raise PrepareError(f"{path}: data/meta.mat or data/ILSVRC2012_validation_ground_truth.txt is missing")
    try:
        syn = loadmat(io.BytesIO(meta), squeeze_me=True)["synsets"]
    except Exception as exc:  # scipy raises several kinds for a bad file
        raise PrepareError(f"{path}: meta.mat cannot be read ({exc})") from None
    classes = {}
    for rec in syn:
        ident, wnid = int(rec["ILSVRC2012_ID"]), str(rec["WNID"])
        if int(rec["num_children"]) == 0 and 1 <= ident <= 1000:
            classes[ident] = (wnid, str(rec["words"]))
    try:
        labels = [int(x) for x in truth.split()]
    except ValueError:
        raise PrepareError(f"{path}: the validation ground truth holds a non-number") from None
    return classes, labels


def prepare(spec: dict, archives: Path, dest: Path) -> tuple[dict, dict]:
    train_tar = _find(spec, archives, r"img_train\.tar$")
    val_tar = _find(spec, archives, r"img_val\.tar$")
    devkit = _find(spec, archives, r"devkit.*\.tar(\.gz)?$")
    classes, truth = read_devkit(devkit)
    wnids = sorted(w for w, _ in classes.values())
    dest.mkdir(parents=True, exist_ok=True)
    train_dir, val_dir = dest / "train", dest / "val"
    train_files: list[tuple[str, int]] = []
    with tar_members(train_tar) as outer:
        for m in outer:
            if not m.isfile():
                continue
            wnid = m.name.rsplit("/", 1)[-1][:-4] if m.name.endswith(".tar") else None
            if not wnid or not _WNID.match(wnid):
                raise PrepareError(f"{train_tar}: member {m.name} is not a <wnid>.tar class archive")
            if wnid not in wnids:
                raise PrepareError(f"{train_tar}: class {wnid} is not one of the devkit's classes")
            with tarfile.open(fileobj=outer.extractfile(m), mode="r|") as inner:
                names = extract_tar_flat(
                    inner, train_dir / wnid, f"{train_tar}:{m.name}", keep=lambda n: n.upper().endswith(".JPEG")
                )
            train_files += [(f"train/{wnid}/{n}", (train_dir / wnid / n).stat().st_size) for n in names]
    val_files: list[tuple[str, int]] = []
    by_id = {i: w for i, (w, _) in classes.items()}
    with tar_members(val_tar) as tf:
        for m in tf:
            if not m.isfile():
                continue
            base = m.name.rsplit("/", 1)[-1]
            mm = _VAL.match(base)
            if not mm:
                raise PrepareError(f"{val_tar}: member {m.name} is not ILSVRC2012_val_<number>.JPEG")
            k = int(mm.group(1))
            if not 1 <= k <= len(truth) or truth[k - 1] not in by_id:
                raise PrepareError(f"{val_tar}: {base} has no label in the devkit's ground truth")
            wnid = by_id[truth[k - 1]]
            (val_dir / wnid).mkdir(parents=True, exist_ok=True)
            with open(val_dir / wnid / base, "wb") as f:
                f.write(tf.extractfile(m).read())
            val_files.append((f"val/{wnid}/{base}", m.size))
    for w in wnids:  # every class has a folder in both splits, even an empty one
        (train_dir / w).mkdir(parents=True, exist_ok=True)
        (val_dir / w).mkdir(parents=True, exist_ok=True)
    words = {w: t for w, t in classes.values()}
    (dest / "classes.txt").write_text("".join(f"{w} {words[w]}\n" for w in wnids), encoding="utf-8")
    counts = {"classes": len(wnids), "train_images": len(train_files), "val_images": len(val_files)}
    sums = {"train_tree": tree_digest(train_files), "val_tree": tree_digest(val_files)}
    return counts, sums


def verify(dest: Path, manifest: dict) -> None:
    from runner.datasets.common import NotPrepared

    classes = dest / "classes.txt"
    if not classes.is_file():
        raise NotPrepared(f"{classes} is missing")
    wnids = [ln.split()[0] for ln in classes.read_text(encoding="utf-8").splitlines() if ln.strip()]
    counts = manifest.get("counts", {})
    if len(wnids) != counts.get("classes"):
        raise NotPrepared(f"{classes} lists {len(wnids)} classes, the manifest {counts.get('classes')}")
    for split in ("train", "val"):
        n = 0
        for w in wnids:
            d = dest / split / w
            try:
                n += sum(1 for e in os.scandir(d) if e.is_file())
            except FileNotFoundError:
                raise NotPrepared(f"{d} is missing") from None
        want = counts.get(f"{split}_images")
        if n != want:
            raise NotPrepared(f"{dest / split} holds {n} images, the manifest says {want}")
