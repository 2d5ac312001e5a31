"""What every dataset preparation shares: sums, safe archive extraction, the manifest.

Only the standard library and numpy: this runs on GPU hosts before any
framework is installed, possibly under an old Python 3.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tarfile
import time
import zipfile
from pathlib import Path

from runner import boundjson, rundir

MANIFEST = "gpulab-dataset.json"
MANIFEST_SCHEMA = 1
CHUNK = 1 << 20


class NotPrepared(Exception):
    """A dataset is missing or incomplete at the given root: one-line message."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class PrepareError(Exception):
    """Preparation cannot proceed (bad archive, wrong counts): one-line message naming the file."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


def sha256_file(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def write_json_atomic(path: Path, doc) -> None:
    rundir.write_new(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def _safe_member(root: Path, name: str) -> Path:
    target = (root / name).resolve()
    if not str(target).startswith(str(root.resolve()) + os.sep) and target != root.resolve():
        raise PrepareError(f"archive member {name!r} points outside {root}")
    return target


def tar_members(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise PrepareError(f"{path}: not a readable tar archive ({exc})") from None


def extract_tar_flat(tf: tarfile.TarFile, dest: Path, source: str, keep=None) -> list[str]:
    """Regular files of ``tf`` into ``dest`` by base name (those ``keep(name)`` accepts); returns names."""
    names = []
    dest.mkdir(parents=True, exist_ok=True)
    for m in tf:
        if not m.isfile():
            continue
        base = os.path.basename(m.name)
        if not base or (keep is not None and not keep(base)):
            continue
        src = tf.extractfile(m)
        if src is None:
            raise PrepareError(f"{source}: member {m.name} cannot be read")
        out = _safe_member(dest, base)
        with open(out, "wb") as f:
            shutil.copyfileobj(src, f, CHUNK)
        names.append(base)
    return names


def zip_open(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise PrepareError(f"{path}: not a readable zip archive ({exc})") from None


def tree_digest(paths: list[tuple[str, int]]) -> str:
    """sha256 over sorted (relative path, size) pairs: cheap fingerprint of an unpacked tree."""
    h = hashlib.sha256()
    for rel, size in sorted(paths):
        h.update(f"{rel}\0{size}\n".encode())
    return h.hexdigest()


def tool_versions() -> dict:
    versions = {"python": platform.python_version()}
    try:
        import numpy

        versions["numpy"] = numpy.__version__
    except ImportError:  # pragma: no cover - numpy is a runner dependency
        pass
    try:
        from runner import __version__

        versions["runner"] = __version__
    except ImportError:  # pragma: no cover
        pass
    return versions


def manifest_doc(name: str, spec: dict, counts: dict, sums: dict, extra: dict | None = None) -> dict:
    doc = {
        "schema": MANIFEST_SCHEMA,
        "kind": "gpulab-dataset",
        "dataset": name,
        "catalogue_version": spec.get("catalogue_version"),
        "spec_sha256": spec_digest(spec),
        "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "prepared_on": platform.node(),
        "artifacts": {a["file"]: {"sha256": a["sha256"], "size": a["size"]} for a in spec.get("artifacts", [])},
        "counts": counts,
        "sums": sums,
        "tools": tool_versions(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv[1:]) if sys.argv else "",
    }
    if extra:
        doc.update(extra)
    return doc


def spec_digest(spec: dict) -> str:
    """What decides the prepared result: artifacts (sums), parameters, expected counts, catalogue version."""
    keep = {k: spec.get(k) for k in ("catalogue_version", "params", "expect")}
    keep["artifacts"] = sorted((a["file"], a["sha256"]) for a in spec.get("artifacts", []))
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


def read_manifest(ds_dir: Path) -> dict | None:
    path = ds_dir / MANIFEST
    try:
        doc = boundjson.read(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise NotPrepared(f"{path}: unreadable manifest ({exc})") from None
    return doc if isinstance(doc, dict) else None


def expect_counts(name: str, counts: dict, expect: dict | None, source: str) -> None:
    """Compare measured counts with the catalogue's expected ones; one line naming the first difference."""
    for key, want in (expect or {}).items():
        got = counts.get(key)
        if got != want:
            raise PrepareError(f"{name}: {key} is {got}, the catalogue expects {want} ({source})")
