"""The read-only layers every lab host is made of, built once and cached.

* ``rootfs``: Debian bookworm minbase (debootstrap) with sshd and Python, cleaned
  (no host keys, no apt lists, no docs), cached as ``rootfs-<key>.tar.zst``.
* ``pylayer``: the runner's Python dependencies (torch CPU, numpy,
  mlperf-logging, nvidia-ml-py and their dependencies) installed by the hosts'
  own pip into ``/usr/local/lib/python3.11/dist-packages``, cached as
  ``pylayer-<key>.tar.zst`` (tests/testlab/pylayer.py).
* ``wheelhouse-<key>/``: the wheels the layer was installed from, plus the
  controller's and the build requirements of the project, for the hosts'
  Python and platform, served to the hosts over HTTP.

Each key is a hash of this file and of the inputs (package list, mirror,
requirements), so editing the builder rebuilds. Tarballs are unpacked once into
``trees/<name>/`` and used as overlayfs lower directories by every host of every
lab; a lock file keeps two sessions from building or unpacking the same thing
at once.
"""

from __future__ import annotations

import glob
import inspect
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.testlab import pylayer
from tests.testlab.util import cache_dir, digest, flock, run

SUITE = "bookworm"
# openssh-server, python3, python3-apt, procps, iproute2: what Ansible and the
# notes need. tini: PID 1 of each host (reaps orphans, so sshd can be stopped
# and restarted on its own). python3-venv, python3-pip: the provisioning
# installs the runner into a venv with pip from the served wheelhouse; a real
# host gets them from its distribution, a lab host cannot reach one.
# build-essential, cmake, libboost-program-options-dev: what the build_tools role installs
# (its vars/Debian.yml) to build nccl-tests and nvbandwidth from source; present here
# because a lab host reaches no Debian mirror (the role finds them installed).
INCLUDE = [
    "openssh-server",
    "python3",
    "python3-apt",
    "procps",
    "iproute2",
    "tini",
    "python3-venv",
    "python3-pip",
    "build-essential",
    "cmake",
    "libboost-program-options-dev",
]

CLEAN_SCRIPT = r"""
set -eu
cd "$1"
rm -f etc/ssh/ssh_host_*
printf '#!/bin/sh\n# test lab host: no service starts on package installation\nexit 101\n' > usr/sbin/policy-rc.d
chmod 755 usr/sbin/policy-rc.d
: > etc/apt/sources.list
rm -rf etc/apt/sources.list.d/*
: > etc/machine-id
printf '# test lab host: no DNS\n' > etc/resolv.conf
rm -rf var/cache/apt/* var/lib/apt/lists/* usr/share/doc/* usr/share/man/* usr/share/info/* \
       usr/share/locale/* usr/share/lintian var/cache/debconf/*-old var/lib/dpkg/*-old tmp/* root/.cache
mkdir -p var/lib/apt/lists/partial var/cache/apt/archives/partial
find var/log -type f -exec truncate -s 0 {} +
touch -d @0 var/lib/apt/lists
"""


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses (GPULAB_TESTLAB_MIRROR overrides)."""
    if os.environ.get("GPULAB_TESTLAB_MIRROR"):
        return os.environ["GPULAB_TESTLAB_MIRROR"]
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in Path(path).read_text().split("\n\n"):
            fields = dict(
                (k.strip().lower(), v.strip())
                for k, _, v in (ln.partition(":") for ln in stanza.splitlines() if not ln.startswith("#"))
                if _
            )
            if SUITE in fields.get("suites", "").split() and "deb" in fields.get("types", "").split():
                if fields.get("enabled", "yes").lower() != "no":
                    return fields["uris"].split()[0]
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        if not os.path.exists(path):
            continue
        for line in Path(path).read_text().splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+" + SUITE + r"\s", line + " ")
            if m:
                return m.group(1)
    return "http://deb.debian.org/debian"


@dataclass(frozen=True)
class Layer:
    name: str  # e.g. rootfs-0123456789abcdef
    tarball: Path
    tree: Path


def _tree_dir() -> Path:
    path = cache_dir() / "trees"
    path.mkdir(exist_ok=True)
    return path


def _unpack(name: str, tarball: Path) -> Path:
    """Unpack a layer tarball once into trees/<name> (shared, read-only by convention)."""
    os.utime(tarball)  # last use, for prune()
    tree = _tree_dir() / name
    ok = _tree_dir() / f"{name}.ok"
    if ok.exists() and tree.is_dir():
        return tree
    with flock(cache_dir() / "locks" / f"{name}.lock", f"unpacking {name}"):
        if ok.exists() and tree.is_dir():
            return tree
        tmp = _tree_dir() / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        run(["tar", "--zstd", "--numeric-owner", "-xpf", str(tarball), "-C", str(tmp)])
        shutil.rmtree(tree, ignore_errors=True)
        tmp.rename(tree)
        ok.touch()
    return tree


def _log(msg: str) -> None:
    print(f"[testlab] {msg}", file=sys.stderr, flush=True)


# -- rootfs -------------------------------------------------------------------


def rootfs_key() -> str:
    return digest(inspect.getsource(_build_rootfs), SUITE, " ".join(INCLUDE), apt_mirror(), CLEAN_SCRIPT)


def ensure_rootfs() -> Layer:
    key = rootfs_key()
    name = f"rootfs-{key}"
    tarball = cache_dir() / f"{name}.tar.zst"
    if not tarball.exists():
        with flock(cache_dir() / "locks" / "rootfs.lock", "building the rootfs"):
            if not tarball.exists():
                _build_rootfs(tarball)
    return Layer(name, tarball, _unpack(name, tarball))


def _build_rootfs(tarball: Path) -> None:
    """debootstrap onto a tmpfs inside a private mount namespace (nothing stays mounted on a crash)."""
    t0 = time.monotonic()
    mirror = apt_mirror()
    _log(f"building {tarball.name} from {mirror} (about a minute)")
    debs = cache_dir() / "debs"
    debs.mkdir(exist_ok=True)
    work = Path(f"/tmp/gpulab-testlab-build-{os.getpid()}")
    work.mkdir(exist_ok=True)
    tmp_out = tarball.with_name(f".{tarball.name}.{os.getpid()}.tmp")
    clean = CLEAN_SCRIPT.replace("'", "'\\''")
    script = f"""
set -eu
mount -t tmpfs -o size=4g,mode=755 gpulab-testlab-build "{work}"
debootstrap --variant=minbase --include={",".join(INCLUDE)} --cache-dir="{debs}" \\
    {SUITE} "{work}/root" "{mirror}" > "{work}.log" 2>&1 || {{ tail -20 "{work}.log" >&2; exit 1; }}
sh -c '{clean}' clean "{work}/root"
tar --numeric-owner -C "{work}/root" -cf - . | zstd -q -T0 -6 -o "{tmp_out}"
"""
    try:
        run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], timeout=1200)
        tmp_out.rename(tarball)
    finally:
        tmp_out.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        Path(f"{work}.log").unlink(missing_ok=True)
    size = tarball.stat().st_size / 2**20
    _log(f"built {tarball.name} ({size:.0f} MiB) in {time.monotonic() - t0:.0f}s")


# -- python layer and wheelhouse (tests/testlab/pylayer.py) ----------------------


def ensure_pylayer() -> tuple[Layer, Path]:
    """(the python layer, the wheelhouse directory), built for the hosts' Python over the rootfs."""
    rootfs = ensure_rootfs()
    name, tarball, wheelhouse = pylayer.ensure(rootfs_key(), rootfs.tree)
    return Layer(name, tarball, _unpack(name, tarball)), wheelhouse


def prune(keep: set[str], in_use: set[str], max_age_days: float = 3.0) -> list[str]:
    """Remove cached layers, trees and wheelhouses of other keys, unused for max_age_days.

    Other worktrees or branches on the same machine may build other keys: an entry is
    only removed when no live lab uses it and nobody has used it for days.
    """
    removed = []
    root = cache_dir()
    cutoff = time.time() - max_age_days * 86400
    candidates = list(root.glob("*.tar.zst")) + list(root.glob("wheelhouse-*")) + list(root.glob("apt-*"))
    candidates += list(_tree_dir().iterdir())
    for path in candidates:
        stem = path.name.removesuffix(".tar.zst").removesuffix(".ok").replace("wheelhouse-", "pylayer-")
        if stem in keep or stem in in_use or not re.fullmatch(r"(rootfs|pylayer|apt)-[0-9a-f]{16}", stem):
            continue
        stamp = root / f"{stem}.tar.zst"
        last_use = stamp.stat().st_mtime if stamp.exists() else path.stat().st_mtime
        if last_use > cutoff:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed
