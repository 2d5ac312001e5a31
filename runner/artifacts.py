"""The pretrained backbone a workload loads at full scale: where it lies and the check of its sum.

A scale's ``pretrained`` entry in workloads.yml names the catalogue dataset
that holds it (inventory/datasets.yml; ``invoke datasets --names ssd`` fetches
it with the data), the file, its format and the sum its publisher gives: the
sha256 (and size) or, where only that is published, the md5. A unit test keeps
the two catalogues equal. The file lies at ``<data>/<dataset>/<file>``.

In ttt mode at that scale the supervisor checks the file before anything is
written (``check``): a missing file, a wrong size or a wrong sum is bad input,
one line naming the file and what is wrong, never a run from scratch. Standard
library only (the supervisor imports no deep-learning framework).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

CHUNK = 1 << 20
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # a file or folder name, never a path
FORMATS = ("torchvision", "detectron-pkl")  # how runner/workloads/pretrained.py reads the file


class ArtifactError(Exception):
    """A pretrained file is missing or is not the published one: one line naming it."""


def path(entry: dict, data) -> Path:
    """Where the workload reads the file: ``<data>/<dataset>/<file>``."""
    return Path(data) / entry["dataset"] / entry["file"]


def digest(p: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def check(entry: dict, data) -> Path:
    """The file's path when it is there with its published size and sum, else ArtifactError."""
    p = path(entry, data)
    fetch = f"fetch it with `invoke datasets --names {entry['dataset']}`"
    if not p.is_file():
        raise ArtifactError(f"{p}: missing: {entry['title']} (the full scale starts from it; {fetch})")
    size = p.stat().st_size
    if entry.get("size") is not None and size != entry["size"]:
        raise ArtifactError(f"{p}: {size} bytes, the published file has {entry['size']} ({fetch} again)")
    algo = "sha256" if entry.get("sha256") else "md5"
    want, found = entry[algo], digest(p, algo)
    if found != want:
        raise ArtifactError(f"{p}: {algo} {found} is not the published {want} ({fetch} again)")
    return p


def check_entry(entry) -> str | None:
    """What is wrong with a workloads.yml ``pretrained`` entry, or None."""
    if not isinstance(entry, dict):
        return "'pretrained' must be a mapping"
    for key in ("dataset", "file", "title", "format"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            return f"'pretrained.{key}' must be a non-empty string"
    if entry["format"] not in FORMATS:
        return f"'pretrained.format' must be one of {', '.join(FORMATS)}"
    if not all(_PLAIN.fullmatch(entry[k]) for k in ("file", "dataset")):
        return "'pretrained.file' and 'pretrained.dataset' must be plain names"
    sha, md5 = entry.get("sha256"), entry.get("md5")
    if not (isinstance(sha, str) and len(sha) == 64) and not (isinstance(md5, str) and len(md5) == 32):
        return "'pretrained' needs its published sha256 (64 hex digits) or md5 (32)"
    return None
