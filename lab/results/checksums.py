"""The controller's one SHA256SUMS verifier, for sweep, collect and report.

The grammar is the runner's (runner.rundir.SUMS_LINE, the run-directory
contract): ``<sha256> <space or *><relative path>``, what ``sha256sum`` writes
in text or binary (``-b``) mode. The sums file and every file it lists are
read through lab.core.bounded: regular files inside the run directory only, with a
size cap; and the files listed hold at most limits.HASH_BYTES in all, counted before any is hashed (one
sparse file listed under many names, ``x`` and ``./x``, or hard links to it, would be hashed once per name).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from lab.core import bounded
from lab.core import limits
from lab.core import paths
from runner.rundir import STATUS, SUMS, SUMS_LINE, sums_entry

__all__ = ["SUMS", "SUMS_LINE", "Missing", "Compared", "sha256", "parse", "read", "compare", "verify", "run_key"]


class Missing(ValueError):
    """The run directory has no SHA256SUMS (an incomplete run)."""


@dataclass
class Compared:
    """What ``compare`` found: problems (empty when the directory verifies) and
    the verified bytes of the files it was asked to keep."""

    problems: list[str] = field(default_factory=list)
    kept: dict[str, bytes] = field(default_factory=dict)
    missing: bool = False  # no SHA256SUMS at all


def sha256(path: Path, root: Path | None = None) -> str:
    """sha256 of a regular file (inside ``root`` when given); bounded.Unreadable otherwise."""
    return bounded.sha256(path, root=root)


def parse(text: str, source: str = SUMS) -> dict[str, str]:
    """Map relative path -> sha256 from SHA256SUMS text, in file order; ValueError on a malformed line."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        entry = sums_entry(line)
        if entry is None:
            raise ValueError(f"{source}: line {n}: not '<sha256>  <relative path>'")
        out[entry[1]] = entry[0]
    return out


def read(run_dir: Path) -> dict[str, str]:
    """The parsed SHA256SUMS of ``run_dir``; Missing, or ValueError (one line) when unreadable or malformed."""
    path = Path(run_dir) / SUMS
    text = bounded.read_or(
        bounded.read_text,
        path,
        root=run_dir,
        limit=limits.SUMS_BYTES,
        missing=lambda: Missing(f"{SUMS} is missing"),
        unreadable=lambda why: ValueError(f"{SUMS} {why}"),
    )
    return parse(text, str(path))


def compare(run_dir: Path, keep: dict[str, int] | None = None) -> Compared:
    """Every listed file of ``run_dir`` against its SHA256SUMS.

    ``keep`` maps listed names to a size cap: their bytes are read once, hashed
    and returned in ``Compared.kept`` (only when the whole directory verifies).
    """
    run_dir, keep = Path(run_dir), keep or {}
    try:
        listed = read(run_dir)
    except Missing as exc:
        return Compared([str(exc)], missing=True)
    except ValueError as exc:
        return Compared([str(exc)])
    total = _listed_bytes(run_dir, listed)
    if total > limits.HASH_BYTES:
        return Compared(
            [
                f"the files {SUMS} lists hold {total} bytes, more than the {limits.HASH_BYTES} verified of one run "
                "directory; not read"
            ]
        )
    out = Compared()
    for name, digest in listed.items():
        target = run_dir / name
        try:
            if name in keep:
                data = bounded.read_bytes(target, root=run_dir, limit=keep[name])
                found = hashlib.sha256(data).hexdigest()
                out.kept[name] = data
            else:
                found = sha256(target, root=run_dir)
        except bounded.Missing:
            out.problems.append(f"{name} is listed in {SUMS} but missing")
            continue
        except bounded.Unreadable as exc:
            out.problems.append(f"{name} {exc.reason}")
            continue
        if found != digest:
            out.problems.append(f"{name} does not match {SUMS} (changed after the run)")
    if out.problems:
        out.kept = {}
    return out


def _listed_bytes(run_dir: Path, listed: dict[str, str]) -> int:
    """The bytes of the regular files inside ``run_dir`` that ``listed`` names, each name counted (what hashing
    them all would read)."""
    total = 0
    for name in listed:
        target = run_dir / name
        try:
            st = os.stat(target)
        except OSError:
            continue  # missing or unreadable: compare says so, reading nothing
        if stat.S_ISREG(st.st_mode) and paths.inside(target, run_dir):
            total += st.st_size
    return total


def verify(run_dir: Path) -> list[str]:
    """Problems found in ``run_dir`` against its SHA256SUMS; empty when it verifies."""
    return compare(run_dir).problems


def run_key(run_dir: Path) -> str:
    """What one run is known by, wherever its directory lies (a copy under another name is the same run): the
    sha256 of its SHA256SUMS; where SHA256SUMS does not list status.json (it lists nothing, say), of it and
    status.json together, so that two runs with an empty list are two runs, not one. bounded.Unreadable when
    either cannot be read."""
    run_dir = Path(run_dir)
    sums = bounded.read_bytes(run_dir / SUMS, root=run_dir, limit=limits.SUMS_BYTES)
    listed = any(line.split()[-1:] in ([STATUS.encode()], [b"*" + STATUS.encode()]) for line in sums.splitlines())
    if listed:
        return hashlib.sha256(sums).hexdigest()
    status = bounded.read_bytes(run_dir / STATUS, root=run_dir, limit=limits.JSON_BYTES)
    return hashlib.sha256(sums + b"\0" + STATUS.encode() + b"\0" + status).hexdigest()
