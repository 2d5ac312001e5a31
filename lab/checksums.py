"""SHA256SUMS of run directories, as the runner writes them (``sha256sum -c`` format).

The controller verifies every fetched run directory with ``verify``; the
format is part of the runner contract (runner/README.md).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SUMS = "SHA256SUMS"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def parse(text: str, source: str = SUMS) -> dict[str, str]:
    """Map relative path -> sha256 from SHA256SUMS text; ValueError on a malformed line."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        name = name.lstrip("*")
        if not sep or len(digest) != 64 or not name or name.startswith("/") or ".." in Path(name).parts:
            raise ValueError(f"{source}: line {n}: not '<sha256>  <relative path>'")
        out[name] = digest.lower()
    return out


def verify(run_dir: Path) -> list[str]:
    """Problems found in ``run_dir`` against its SHA256SUMS; empty when it verifies."""
    sums_path = Path(run_dir) / SUMS
    if not sums_path.is_file():
        return [f"{SUMS} is missing"]
    try:
        listed = parse(sums_path.read_text(), str(sums_path))
    except (ValueError, UnicodeDecodeError) as exc:
        return [str(exc)]
    problems = []
    for name, digest in sorted(listed.items()):
        path = Path(run_dir) / name
        if not path.is_file():
            problems.append(f"{name}: listed in {SUMS} but missing")
        elif sha256(path) != digest:
            problems.append(f"{name}: sha256 mismatch")
    return problems
