"""Stand-in framework wheels (torch, tensorflow) at the stack profiles' versions.

Tiny pure-Python wheels with the real project names and versions: importing
them gives ``__version__`` and nothing else. Built by the tests into a
wheelhouse (``build(dest)``), so that the python environment role installs
pinned frameworks offline from the lab's index.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

# torch 2.13.0 is the real CPU build of the hosts' Python layer (and of the wheelhouse)
FRAMEWORKS = {"torch": ["1.0.0", "2.5.1"], "tensorflow": ["1.12.0", "2.18.0", "2.21.0"]}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(project: str, version: str, dest: Path) -> Path:
    """``<dest>/<project>-<version>-py3-none-any.whl``, byte-identical on every build."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{project}-{version}-py3-none-any.whl"
    info = f"{project}-{version}.dist-info"
    files = {
        f"{project}/__init__.py": (
            f'"""gpulab test lab stand-in for {project} {version} (not the real framework)."""\n'
            f'__version__ = "{version}"\n'
        ).encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
            f"Summary: gpulab test lab stand-in for {project}\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: gpulab-testlab\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": f"{project}\n".encode(),
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)
    tmp.rename(path)
    return path


def build(dest: Path | str) -> list[Path]:
    """Every stand-in framework wheel into ``dest``."""
    return [build_wheel(p, v, Path(dest)) for p, versions in FRAMEWORKS.items() for v in versions]
