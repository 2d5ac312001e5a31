"""The prepared MLPerf datasets: preparation on the host, checks and readers.

``check(name, root)`` is what a workload calls before it reads data: it returns
the dataset's manifest or raises ``NotPrepared`` with a one-line message.
``name`` is a dataset (imagenet, coco, wmt16, wmt17, ml-20m, and the pretrained
backbones resnet34-torchvision and r50-msra) or a benchmark
(resnet50, ssd, maskrcnn, gnmt, transformer, ncf); ``root`` is the data root
(``--data``) or the dataset's own folder. Layout and formats: runner/README.md,
section "Datasets". Standard library and numpy only (scipy for the ImageNet
devkit's meta.mat, which mlperf-logging brings).
"""

from __future__ import annotations

from pathlib import Path

from runner.datasets.common import MANIFEST, NotPrepared, PrepareError, read_manifest, sha256_file

__all__ = ["check", "resolve", "dataset_dir", "NotPrepared", "PrepareError", "DATASETS", "BENCHMARKS", "MANIFEST"]

# dataset -> (title, preparation module)
DATASETS = {
    "imagenet": ("ImageNet ILSVRC2012", "runner.datasets.imagenet"),
    "coco": ("COCO 2017", "runner.datasets.coco"),
    "wmt16": ("WMT16 En-De", "runner.datasets.wmt"),
    "wmt17": ("WMT17 En-De", "runner.datasets.wmt"),
    "ml-20m": ("MovieLens-20M", "runner.datasets.movielens"),
    "resnet34-torchvision": ("ResNet-34 ImageNet weights (torchvision)", "runner.datasets.weights"),
    "r50-msra": ("MSRA ResNet-50 ImageNet weights (Detectron R-50.pkl)", "runner.datasets.weights"),
}
BENCHMARKS = {
    "resnet50": "imagenet",
    "ssd": "coco",
    "maskrcnn": "coco",
    "gnmt": "wmt16",
    "transformer": "wmt17",
    "ncf": "ml-20m",
}


def resolve(name: str) -> str:
    """The dataset a dataset or benchmark name stands for; ValueError for an unknown name."""
    if name in DATASETS:
        return name
    if name in BENCHMARKS:
        return BENCHMARKS[name]
    raise ValueError(f"unknown dataset {name!r} (datasets: {', '.join(DATASETS)}; benchmarks: {', '.join(BENCHMARKS)})")


def dataset_dir(name: str, root: Path | str) -> Path:
    """``root/<dataset>``, or ``root`` itself when it is that dataset's folder."""
    ds = resolve(name)
    root = Path(root)
    doc = None
    try:
        doc = read_manifest(root)
    except NotPrepared:
        pass
    if root.name == ds or (doc and doc.get("dataset") == ds):
        return root
    return root / ds


def module(ds: str):
    import importlib

    return importlib.import_module(DATASETS[ds][1])


def check(name: str, root: Path | str, deep: bool = False) -> dict:
    """The manifest of a complete prepared dataset, else NotPrepared (one line, what is missing)."""
    ds = resolve(name)
    title = DATASETS[ds][0]
    d = dataset_dir(ds, root)
    if not d.is_dir():
        raise NotPrepared(
            f"{ds} ({title}) is not prepared: {d} does not exist (prepare it with `invoke datasets --names {ds}`)"
        )
    doc = read_manifest(d)
    if doc is None:
        raise NotPrepared(
            f"{ds} ({title}) is not prepared at {d}: no {MANIFEST} "
            f"(preparation never finished; run `invoke datasets --names {ds}`)"
        )
    if doc.get("kind") != "gpulab-dataset" or doc.get("dataset") != ds:
        raise NotPrepared(f"{d / MANIFEST}: not the manifest of {ds} (it names {doc.get('dataset')!r})")
    for rel, meta in (doc.get("files") or {}).items():
        path = d / rel
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise NotPrepared(f"{ds} ({title}) at {d} is incomplete: {rel} is missing") from None
        if size != meta["size"]:
            raise NotPrepared(
                f"{ds} ({title}) at {d} is incomplete: {rel} has {size} bytes, the manifest says {meta['size']}"
            )
        if deep and sha256_file(path) != meta["sha256"]:
            raise NotPrepared(f"{ds} ({title}) at {d}: {rel} does not match its sha256 in the manifest")
    verify = getattr(module(ds), "verify", None)
    if verify is not None:
        try:
            verify(d, doc)
        except NotPrepared as exc:
            raise NotPrepared(f"{ds} ({title}) at {d} is incomplete: {exc}") from None
    return doc
