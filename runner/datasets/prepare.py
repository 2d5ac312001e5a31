"""Prepare one dataset from its verified archives: ``python -m runner prepare NAME ...``.

The catalogue entry (``--spec``, JSON written by the datasets role) names the
archives, their sums, the parameters and the counts the result must have.
Preparation goes to a temporary folder beside the dataset and replaces it only
when complete, so an interrupted preparation never leaves a half dataset that
looks finished. When the manifest there already matches the entry (same
archives, parameters, expected counts and catalogue version) and the data
checks out, nothing is done and ``changed`` is false.

Prints one JSON line: ``{"dataset", "changed", "path", "counts"}``. Exit codes:
0 done (or nothing to do), 1 the archives cannot be prepared (one line naming
the file), 2 bad input.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from runner import boundjson
from runner.datasets import DATASETS, check, module, resolve
from runner.datasets.common import (
    MANIFEST,
    NotPrepared,
    PrepareError,
    expect_counts,
    manifest_doc,
    read_manifest,
    spec_digest,
    write_json_atomic,
)


def load_spec(path: Path | str) -> dict:
    try:
        spec = boundjson.read(path)
    except FileNotFoundError:
        raise ValueError(f"{path}: spec file not found") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a JSON dataset spec ({exc})") from None
    for key in ("name", "artifacts"):
        if key not in spec:
            raise ValueError(f"{path}: the dataset spec has no {key!r}")
    return spec


def prepare(spec: dict, archives: Path | str, root: Path | str, force: bool = False) -> tuple[bool, dict]:
    """Prepare ``spec['name']`` under ``root``; returns (changed, manifest)."""
    ds = resolve(spec["name"])
    archives, root = Path(archives), Path(root)
    dest = root / ds
    if not force:
        doc = read_manifest(dest) if dest.is_dir() else None
        if doc and doc.get("spec_sha256") == spec_digest(spec):
            try:
                return False, check(ds, root)
            except NotPrepared:
                pass  # prepare again
    for a in spec["artifacts"]:
        path = archives / a["file"]
        if not path.is_file():
            raise PrepareError(f"{path}: archive missing (fetch it first)")
        if a.get("size") is not None and path.stat().st_size != a["size"]:
            raise PrepareError(f"{path}: {path.stat().st_size} bytes, the catalogue says {a['size']}")
    root.mkdir(parents=True, exist_ok=True)
    work = root / f".{ds}.partial"
    shutil.rmtree(work, ignore_errors=True)
    try:
        counts, sums = module(ds).prepare(spec, archives, work)
        expect_counts(ds, counts, spec.get("expect"), f"catalogue {spec.get('catalogue_version')}")
        files = {
            rel: {"sha256": digest, "size": (work / rel).stat().st_size}
            for rel, digest in sums.items()
            if (work / rel).is_file()
        }
        doc = manifest_doc(ds, spec, counts, sums, {"files": files, "title": DATASETS[ds][0]})
        write_json_atomic(work / MANIFEST, doc)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    old = root / f".{ds}.old"
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        os.replace(dest, old)
    os.replace(work, dest)
    shutil.rmtree(old, ignore_errors=True)
    return True, doc


def add_arguments(p) -> None:
    p.add_argument("name", help=f"dataset ({', '.join(DATASETS)}) or benchmark")
    p.add_argument("--spec", required=True, help="the dataset's catalogue entry as JSON")
    p.add_argument("--archives", required=True, help="folder holding the verified archives")
    p.add_argument("--data", required=True, help="data root: the dataset goes to DATA/<dataset>")
    p.add_argument("--force", action="store_true", help="prepare again even when the manifest matches")


def main(args) -> int:
    try:
        spec = load_spec(args.spec)
        if resolve(args.name) != resolve(spec["name"]):
            raise ValueError(f"{args.spec}: spec is for {spec['name']!r}, not {args.name!r}")
    except ValueError as exc:
        print(f"runner prepare: {exc}", file=sys.stderr)
        return 2
    try:
        changed, doc = prepare(spec, args.archives, args.data, force=args.force)
    except (PrepareError, NotPrepared) as exc:
        print(f"runner prepare: {spec['name']}: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "dataset": doc["dataset"],
                "changed": changed,
                "path": str(Path(args.data) / doc["dataset"]),
                "counts": doc["counts"],
            },
            sort_keys=True,
        )
    )
    return 0
