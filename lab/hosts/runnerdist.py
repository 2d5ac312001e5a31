"""The runner as it reaches hosts: one file set, one source digest, three carriers.

``runner.source`` decides which files make the runner and their digest (the
``src=`` of ``python -m runner --version``). Everything that puts the runner on
a host is built here from that file set, so the digest the host reports is the
one the controller computed:

* ``tarball()``: the sweep's and validate's copy on PYTHONPATH
  (``<workdir>/runner/<digest>``, lab.hosts.remote.ensure_runner);
* ``build_wheel()``: provisioning's wheel, in ``<cache>/<wheel_id>/``, where
  the wheel id is ``<digest>-<6 hex of pyproject.toml>`` (a change of the
  runner's dependencies alone also makes a new install). The wheel holds the
  ``runner`` package only, never ``lab``;
* ``stage()``: the same tarball as a file, which the datasets role unpacks
  into its tools folder (``python -m runner.datasets``).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from runner import source

from lab.core import writes
from lab.core.errors import RunError

REPO = Path(__file__).resolve().parents[2]
RUNNER_DIR = REPO / "runner"


def files() -> list[Path]:
    """The runner's files of this checkout (runner.source.files)."""
    return source.files(RUNNER_DIR)


def digest() -> str:
    """The runner's source digest of this checkout (runner.source.digest)."""
    return source.digest(RUNNER_DIR)


@functools.lru_cache(maxsize=1)
def local_version() -> str:
    """``python -m runner --version`` of this checkout, through the runner's own CLI."""
    p = subprocess.run([sys.executable, "-m", "runner", "--version"], cwd=REPO, capture_output=True, text=True)
    if p.returncode != 0:
        raise RunError(f"{RUNNER_DIR}: `python -m runner --version` failed: {p.stderr.strip()}")
    return p.stdout.strip()


def _copy_tree(dest: Path) -> Path:
    """The runner's files under ``dest/runner``; returns that folder."""
    out = Path(dest) / "runner"
    for f in files():
        target = out / f.relative_to(RUNNER_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
    return out


def tarball() -> bytes:
    """The runner's files as a .tar.gz with the ``runner/`` folder at its top; the same files give
    the same bytes (no time stamps, owners or gzip date)."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in files():
            info = tar.gettarinfo(str(path), arcname="runner/" + path.relative_to(RUNNER_DIR).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


def health_files() -> list[Path]:
    """What a Slurm node's health check runs (python -m lab.validate.nodehealth, the slurm_node role):
    the runner's files, gpulab's ``lab`` package (its Python files, data and schemas) and the GPU references."""
    lab_dir = REPO / "lab"
    own = [
        p
        for p in sorted(lab_dir.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".yml", ".yaml", ".json")
    ]
    return files() + own + [REPO / "inventory" / "references" / "gpus.yml"]


def health_bundle(dest: Path) -> Path:
    """``dest/gpulab-health-<digest>.tar.gz`` of health_files() (paths from the checkout's top), the same
    files giving the same bytes; built once per content."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in health_files():
            info = tar.gettarinfo(str(path), arcname=path.relative_to(REPO).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    data = buf.getvalue()
    out = Path(dest) / f"gpulab-health-{hashlib.sha256(data).hexdigest()[:12]}.tar.gz"
    # a file there that is not this bundle (cut) is replaced; a link or folder is refused in one line
    if out.is_symlink() or not out.is_file() or out.read_bytes() != data:
        out.parent.mkdir(parents=True, exist_ok=True)
        writes.write_bytes(out, data, "the Slurm health check's bundle")  # the one writer: whole, never via a link
    return out


def stage(dest: Path) -> Path:
    """``dest/runner.tar.gz``, the tarball that the datasets role unpacks on each host; returns its path."""
    out = Path(dest) / "runner.tar.gz"
    out.write_bytes(tarball())
    return out


def wheel_id() -> str:
    """``<digest>-<6 hex of pyproject.toml>``: what identifies a build of the runner's wheel."""
    meta = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:6]
    return f"{digest()}-{meta}"


def build_wheel(cache_dir: Path | str) -> Path:
    """The runner's wheel of this checkout (the ``runner`` package, no ``lab``), built once per
    wheel id into ``cache_dir/<wheel_id>/``."""
    out = Path(cache_dir) / wheel_id()
    found = [p for p in sorted(out.glob("gpulab-*.whl")) if _whole_wheel(p)]
    if found:
        return found[0].resolve()
    with tempfile.TemporaryDirectory(prefix="gpulab-wheel-") as tmp:
        src = Path(tmp) / "src"
        _copy_tree(src)
        for name in ("pyproject.toml", "README.md"):  # the package's metadata
            shutil.copyfile(REPO / name, src / name)
        env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "-q",
                "-w",
                str(Path(tmp) / "dist"),
                str(src),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        wheels = sorted((Path(tmp) / "dist").glob("gpulab-*.whl"))
        if res.returncode != 0 or not wheels:
            raise RunError(f"building the runner wheel failed: {' '.join((res.stderr or res.stdout).split())[-300:]}")
        writes.folder(out, "the runner's wheel cache")
        # whole or absent (an interrupted copy left a cut wheel that every later provisioning shipped); never
        # through a link planted in the cache
        writes.write_bytes(out / wheels[0].name, wheels[0].read_bytes(), "the runner's wheel")
    return (out / wheels[0].name).resolve()


def _whole_wheel(path: Path) -> bool:
    """A cached wheel that may be used: a regular file (no link), a zip whose members all read back whole,
    holding the runner."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with zipfile.ZipFile(path) as z:
            return "runner/__init__.py" in z.namelist() and z.testzip() is None
    except (OSError, zipfile.BadZipFile, EOFError, ValueError):
        return False


def wheel_version(wheel: Path) -> str:
    return Path(wheel).name.split("-")[1]
