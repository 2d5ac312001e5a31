"""Pretrained backbones (``kind: weights`` in the catalogue): put in place as published.

Each artifact (already fetched and verified by the datasets role) is checked
once more against the catalogue's sum, the sha256 or, where the publisher gives
none, the md5, and copied under its own name into the dataset's folder:

    resnet34-torchvision/resnet34-333f7ec4.pth, r50-msra/R-50.pkl

The manifest records each file's size and the sha256 found, so that ``check``
sees a truncated or replaced file. Workloads read these files at full scale
(runner/artifacts.py names them and checks their published sums).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from runner.artifacts import digest as file_digest
from runner.datasets.common import PrepareError, sha256_file


def verify_file(path: Path, artifact: dict) -> None:
    """PrepareError naming the file when it does not have the catalogue's sum."""
    algo, want = ("sha256", artifact["sha256"]) if artifact.get("sha256") else ("md5", artifact.get("md5"))
    if not want:
        raise PrepareError(f"{path}: the catalogue gives neither a sha256 nor an md5 for it")
    found = file_digest(path, algo)
    if found != want:
        raise PrepareError(f"{path}: {algo} mismatch: expected {want}, found {found}")


def prepare(spec: dict, archives: Path, dest: Path) -> tuple[dict, dict]:
    dest.mkdir(parents=True, exist_ok=True)
    sums = {}
    for a in spec["artifacts"]:
        src = Path(archives) / a["file"]
        verify_file(src, a)
        shutil.copyfile(src, dest / a["file"])
        sums[a["file"]] = sha256_file(dest / a["file"])
    return {"files": len(sums)}, sums
