"""The runner's source: which files make the runner, and their one digest.

One rule for every way the runner reaches a host (lab.hosts.runnerdist builds the
sweep's tarball, provisioning's wheel and the datasets role's tree from
``files()``) and for what the runner reports about itself
(``python -m runner --version`` ends in ``src=<digest()>``): the same checkout
gives the same 12 hex digits on the controller, in the provisioned wheel's
folder name and on every host. Standard library only (this file runs on hosts).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# what the runner is made of: its code, its catalogues, its README (the wheel's package data)
SUFFIXES = (".py", ".yml", ".md")


def files(root: Path = ROOT) -> list[Path]:
    """The runner's files under ``root`` (the ``runner`` package folder), in digest order."""
    return sorted(
        p for p in Path(root).rglob("*") if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
    )


def digest(root: Path = ROOT) -> str:
    """12 hex digits over the runner's files: their paths relative to ``root`` and their bytes."""
    root = Path(root)
    h = hashlib.sha256()
    for path in files(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:12]
