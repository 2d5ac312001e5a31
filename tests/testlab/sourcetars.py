"""Stand-in release tarballs of the tools the bwtools role builds from source (nccl-tests,
nvbandwidth), served by the lab's mirror the way GitHub serves a tag's tarball.

Each tool's stand-in source is ``toolsrc/<tool>/``: the real project's layout and build interface
(nccl-tests: Makefile, src/Makefile, src/common.mk; nvbandwidth: CMakeLists.txt with Boost
program_options) around a small C or C++ program that prints the real tool's output forms. The
tarball is written where the profile's URL points under the mirror
(``<www>/NVIDIA/nccl-tests/archive/refs/tags/v2.19.6.tar.gz``), with one top folder
``<repo>-<version>/`` as GitHub's are, byte-for-byte reproducible, and ``<tarball>.sha256`` beside it
(``sha256sum`` form), which is what the role checks it against where the profile has no sum.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path
from urllib.parse import urlsplit

TOOLSRC = Path(__file__).resolve().parent / "toolsrc"


def tarball(tool: str, version: str, top: str) -> bytes:
    """The stand-in source of ``tool`` at ``version`` (``@VERSION@`` replaced), as a .tar.gz under ``top/``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(p for p in (TOOLSRC / tool).rglob("*") if p.is_file()):
            data = path.read_bytes().replace(b"@VERSION@", version.encode())
            info = tarfile.TarInfo(f"{top}/{path.relative_to(TOOLSRC / tool).as_posix()}")
            info.size, info.mode, info.mtime = len(data), 0o644, 1700000000
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def build(www: Path, tools: dict) -> dict[str, str]:
    """Write each tool of a profile's ``tools`` ({name: {version, url}}) under ``www`` at its URL's
    path, with its .sha256; returns {name: sha256}."""
    sums = {}
    for name, spec in tools.items():
        path = urlsplit(spec["url"]).path.lstrip("/")
        dest = www / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        data = tarball(name, spec["version"], f"{name}-{spec['version']}")
        dest.write_bytes(data)
        sums[name] = hashlib.sha256(data).hexdigest()
        dest.with_name(dest.name + ".sha256").write_text(f"{sums[name]}  {dest.name}\n")
    return sums
