"""The hosts' Python layer and the lab's wheelhouse, fetched for the hosts' own Python.

The lab hosts run Debian bookworm's ``/usr/bin/python3`` (3.11), whatever Python
the controller has (3.10 to 3.13): so nothing here installs with the
controller's interpreter.

1. ``pip download`` (the controller's pip, with the controller's pip
   configuration: indexes, mirrors, find-links) fetches binary wheels for the
   hosts' platform and Python (``--python-version 3.11 --abi cp311 --platform
   manylinux_2_36_x86_64 ... --only-binary :all:``) into the wheelhouse: the
   runner's dependencies (pyproject ``dependencies`` and the ``runner`` extra),
   the ``controller`` extra (a new user's set-up on a bare host installs it)
   and the build requirements. PyTorch is pinned to its CPU build
   (``torch==2.13.0+cpu``): taken from the configured sources when they hold it,
   else from PyTorch's CPU index (``GPULAB_TESTLAB_TORCH_INDEX_URL``, default
   https://download.pytorch.org/whl/cpu); ``GPULAB_TESTLAB_TORCH_WHEEL`` names a
   wheel file to use instead.
2. The hosts' own pip installs the layer, offline, from that wheelhouse: inside
   the lab's Debian root filesystem (a chroot over an overlay whose upper
   directory becomes the layer), so that environment markers, byte-code and
   script shebangs are the hosts' Python's. pip evaluates markers with the
   interpreter that runs it, not with ``--python-version``; a dependency that
   only the hosts' Python needs is therefore missing from step 1, and the hosts'
   pip names it: it is fetched for the hosts and the install runs again.

The layer is ``/usr/local/lib/python3.11/dist-packages`` and ``/usr/local/bin``.
"""

from __future__ import annotations

import inspect
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

from tests.testlab.util import REPO, LabError, cache_dir, digest, flock, run

try:
    import tomllib
except ImportError:  # Python 3.10: the test extra brings tomli
    import tomli as tomllib

HOST_PYTHON = "3.11"  # Debian bookworm's python3: the layer's wheels must fit it
HOST_GLIBC = (2, 36)  # bookworm's glibc: the newest manylinux tag its pip accepts
PYTHON = f"python{HOST_PYTHON}"
TORCH_PIN = "torch==2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
MAX_ROUNDS = 20  # dependencies only the hosts' markers ask for, fetched one round each

# A clean environment for the hosts' pip: nothing of the controller's pip settings.
CHROOT_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
              "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
              "PIP_NO_CACHE_DIR": "1", "PIP_ROOT_USER_ACTION": "ignore"}

# In a private mount namespace: the rootfs (read-only lower) under an upper directory that
# becomes the layer; the wheelhouse on /mnt (an empty directory of the rootfs: mounting on it
# leaves no trace in the upper directory), proc, /dev and a tmpfs /tmp; then the hosts' pip.
INSTALL_SCRIPT = r"""
set -eu
root=$1 upper=$2 work=$3 wheels=$4; shift 4
m=$work/merged
mkdir -p "$m" "$work/w"
mount -t overlay overlay -o "lowerdir=$root,upperdir=$upper,workdir=$work/w" "$m"
mount --bind "$wheels" "$m/mnt"
mount -t proc proc "$m/proc"
mount --rbind /dev "$m/dev"
mount -t tmpfs -o size=2g tmpfs "$m/tmp"
exec chroot "$m" /usr/bin/python3 -m pip install --quiet --break-system-packages --no-index \
    --find-links /mnt "$@"
"""


def target_args() -> list[str]:
    """pip options that select wheels for the hosts' Python and platform."""
    machine = platform.machine()
    tags = [f"manylinux_{HOST_GLIBC[0]}_{minor}_{machine}" for minor in range(HOST_GLIBC[1], 16, -1)]
    tags += [f"manylinux2014_{machine}"]
    if machine == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    tags += [f"linux_{machine}"]
    abi = "cp" + HOST_PYTHON.replace(".", "")
    out = ["--only-binary=:all:", "--python-version", HOST_PYTHON, "--implementation", "cp", "--abi", abi]
    for tag in tags:
        out += ["--platform", tag]
    return out


def requirements() -> dict[str, list[str]]:
    """From pyproject.toml: ``layer`` (the runner's, torch pinned to the CPU build), ``controller``, ``build``."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = project["project"].get("optional-dependencies", {})
    layer = list(project["project"]["dependencies"])
    for req in extras.get("runner", []):
        layer.append(TORCH_PIN if re.match(r"torch\b", req) else req)
    return {"layer": layer, "controller": list(extras.get("controller", [])),
            "build": list(project["build-system"]["requires"]) + ["wheel"]}


def torch_source() -> str:
    """What the torch wheel comes from: a file (the override) or the pin."""
    return os.environ.get("GPULAB_TESTLAB_TORCH_WHEEL") or TORCH_PIN


def pylayer_key(rootfs_key: str) -> str:
    reqs = requirements()
    return digest(inspect.getsource(sys.modules[__name__]), rootfs_key, platform.machine(),
                  *(" ".join(reqs[k]) for k in sorted(reqs)), Path(torch_source()).name)


def _pip(*args: str, timeout: float = 1800, check: bool = True):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return run([sys.executable, "-m", "pip", *args], timeout=timeout, env=env, check=check)


def _log(msg: str) -> None:
    print(f"[testlab] {msg}", file=sys.stderr, flush=True)


def fetch_torch(wheelhouse: Path) -> None:
    """The torch CPU wheel for the hosts: the override file, else the configured sources, else PyTorch's CPU index."""
    override = os.environ.get("GPULAB_TESTLAB_TORCH_WHEEL")
    if override:
        if not os.path.isfile(override):
            raise LabError(f"GPULAB_TESTLAB_TORCH_WHEEL={override}: no such file")
        shutil.copy2(override, wheelhouse / Path(override).name)
        return
    base = ["download", "--quiet", "--no-deps", "--dest", str(wheelhouse), *target_args(), TORCH_PIN]
    if _pip(*base, check=False).returncode == 0:
        return
    index = os.environ.get("GPULAB_TESTLAB_TORCH_INDEX_URL") or TORCH_CPU_INDEX
    res = _pip(*base, "--extra-index-url", index, check=False)
    if res.returncode != 0:
        why = " / ".join((res.stderr or "").strip().splitlines()[-2:])
        raise LabError(f"cannot fetch {TORCH_PIN} for the lab hosts (Python {HOST_PYTHON}) from pip's sources "
                       f"or {index}: {why}. Set GPULAB_TESTLAB_TORCH_INDEX_URL to a mirror of PyTorch's CPU "
                       f"index, or GPULAB_TESTLAB_TORCH_WHEEL to a {TORCH_PIN} cp311 wheel")


def fetch(wheelhouse: Path, reqs: list[str], *, no_deps: bool = False) -> None:
    """Binary wheels of ``reqs`` (and their dependencies) for the hosts, into the wheelhouse."""
    _pip("download", "--quiet", "--dest", str(wheelhouse), "--find-links", str(wheelhouse),
         *(["--no-deps"] if no_deps else []), *target_args(), *reqs)


def install(rootfs_tree: Path, layer: Path, wheelhouse: Path, reqs: list[str], *, dry_run: bool = False) -> None:
    """The hosts' pip installs ``reqs`` from the wheelhouse into ``layer`` (an overlay upper directory).

    With ``dry_run`` it only resolves them (``--ignore-installed``): the wheelhouse then holds
    everything a host needs to install them.
    """
    work = layer.with_name(layer.name + ".work")
    if dry_run:
        reqs = ["--dry-run", "--ignore-installed", *reqs]
    for _ in range(MAX_ROUNDS):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        res = run(["unshare", "--mount", "--propagation", "private", "sh", "-c", INSTALL_SCRIPT, "install",
                   str(rootfs_tree), str(layer), str(work), str(wheelhouse), *reqs],
                  env=CHROOT_ENV, timeout=1800, check=False)
        shutil.rmtree(work, ignore_errors=True)
        if res.returncode == 0:
            return
        missing = re.findall(r"No matching distribution found for (.+)", res.stderr or "")
        if not missing:
            tail = " / ".join((res.stderr or "").strip().splitlines()[-4:])
            raise LabError(f"installing the hosts' Python layer failed: {tail}")
        _log(f"the hosts' Python also needs {missing[0].strip()}: fetching it for Python {HOST_PYTHON}")
        fetch(wheelhouse, [missing[0].strip()])
    raise LabError(f"installing the hosts' Python layer: still missing dependencies after {MAX_ROUNDS} rounds")


def build(tarball: Path, wheelhouse: Path, rootfs_tree: Path) -> None:
    """Fetch the wheelhouse, install the layer with the hosts' pip, pack it as ``tarball``."""
    t0 = time.monotonic()
    reqs = requirements()
    _log(f"building {tarball.name} for Python {HOST_PYTHON}: {' '.join(reqs['layer'])}")
    wh_tmp = wheelhouse.with_name(f".{wheelhouse.name}.tmp")
    layer = cache_dir() / f".{tarball.name}.{os.getpid()}.layer"
    tmp_out = tarball.with_name(f".{tarball.name}.{os.getpid()}.tmp")
    for path in (wh_tmp, layer):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()
    try:
        fetch_torch(wh_tmp)
        fetch(wh_tmp, reqs["layer"] + reqs["controller"] + reqs["build"])
        install(rootfs_tree, layer, wh_tmp, reqs["layer"])
        install(rootfs_tree, layer, wh_tmp, reqs["layer"] + reqs["controller"] + reqs["build"], dry_run=True)
        # the layer is /usr/local only (pip's own traces elsewhere are dropped)
        for entry in layer.iterdir():
            if entry.name != "usr":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        for entry in (layer / "usr").iterdir():
            if entry.name != "local":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        if not (layer / "usr/local/lib" / PYTHON / "dist-packages").is_dir():
            raise LabError(f"the hosts' pip installed nothing into /usr/local/lib/{PYTHON}/dist-packages")
        run(f"tar --numeric-owner --owner=0 --group=0 -C {layer} -cf - . | zstd -q -T0 -3 -o {tmp_out}",
            timeout=1200)
        tmp_out.rename(tarball)
        shutil.rmtree(wheelhouse, ignore_errors=True)
        wh_tmp.rename(wheelhouse)
    finally:
        shutil.rmtree(layer, ignore_errors=True)
        shutil.rmtree(wh_tmp, ignore_errors=True)
        tmp_out.unlink(missing_ok=True)
    size = tarball.stat().st_size / 2**20
    _log(f"built {tarball.name} ({size:.0f} MiB) in {time.monotonic() - t0:.0f}s")


def ensure(rootfs_key: str, rootfs_tree: Path) -> tuple[str, Path, Path]:
    """(layer name, tarball, wheelhouse) of the current key, built when missing."""
    key = pylayer_key(rootfs_key)
    name = f"pylayer-{key}"
    tarball = cache_dir() / f"{name}.tar.zst"
    wheelhouse = cache_dir() / f"wheelhouse-{key}"
    if not (tarball.exists() and wheelhouse.is_dir()):
        with flock(cache_dir() / "locks" / "pylayer.lock", "building the python layer"):
            if not (tarball.exists() and wheelhouse.is_dir()):
                build(tarball, wheelhouse, rootfs_tree)
    return name, tarball, wheelhouse
