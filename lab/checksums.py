"""SHA256SUMS of run directories, as the runner writes them (``sha256sum -c`` format).

The controller verifies every fetched run directory with ``verify``; the
format is part of the runner contract (runner/README.md). A line is
``<sha256> <space or *><relative path>`` (what ``sha256sum`` writes in text
or binary mode). The sums file and every file it lists are read through
lab.bounded: regular files inside the run directory only, with a size cap.
"""

from __future__ import annotations

import re
from pathlib import Path

from lab import bounded, limits

SUMS = "SHA256SUMS"
LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def sha256(path: Path, root: Path | None = None) -> str:
    """sha256 of a regular file (inside ``root`` when given); bounded.Unreadable otherwise."""
    return bounded.sha256(path, root=root)


def parse(text: str, source: str = SUMS) -> dict[str, str]:
    """Map relative path -> sha256 from SHA256SUMS text; ValueError on a malformed line."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = LINE.match(line)
        name = m.group(2) if m else ""
        if not m or name.startswith("/") or ".." in Path(name).parts or "\0" in name:
            raise ValueError(f"{source}: line {n}: not '<sha256>  <relative path>'")
        out[name] = m.group(1).lower()
    return out


def read(run_dir: Path) -> dict[str, str]:
    """The parsed SHA256SUMS of ``run_dir``; ValueError (one line) when missing, unreadable or malformed."""
    path = Path(run_dir) / SUMS
    try:
        text = bounded.read_text(path, root=run_dir, limit=limits.SUMS_BYTES)
    except bounded.Missing:
        raise ValueError(f"{SUMS} is missing") from None
    except bounded.Unreadable as exc:
        raise ValueError(f"{SUMS} {exc.reason}") from None
    return parse(text, str(path))


def verify(run_dir: Path) -> list[str]:
    """Problems found in ``run_dir`` against its SHA256SUMS; empty when it verifies."""
    try:
        listed = read(run_dir)
    except ValueError as exc:
        return [str(exc)]
    problems = []
    for name, digest in sorted(listed.items()):
        try:
            if sha256(Path(run_dir) / name, root=Path(run_dir)) != digest:
                problems.append(f"{name}: sha256 mismatch")
        except bounded.Missing:
            problems.append(f"{name}: listed in {SUMS} but missing")
        except bounded.Unreadable as exc:
            problems.append(f"{name}: {exc.reason}")
    return problems
