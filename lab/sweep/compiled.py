"""Compiled artifacts shared between the hosts of a sweep (runner/README "Compiled kernels").

A compiled run's rank 0 writes ``<workdir>/cache/artifacts/<key>.bin`` on its host (runner.compilecache;
the key names the GPU model, PyTorch build, workload, scale, mode, precision and process count). After
each run the controller copies the files its first host has and the controller lacks into
``<sweep folder>/.compiled/<group>/`` (a dot folder: collection skips it), and before each run it
copies that group's files the host lacks to the host. The group is the host's stack and GPU model,
so artifacts only travel between hosts of the same GPU model and stack; the runner loads only the
file of its own key, so a file another configuration wrote is never used.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path

from lab.core import limits, writes
from lab.core.errors import GpulabError
from lab.hosts import remote as rmt

REMOTE_DIR = "cache/artifacts"  # under the host's workdir: the runner's --cache-dir is <workdir>/cache
STORE = ".compiled"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,250}\.bin$")


def group(stack: str, gpu_model: str) -> str:
    """The store folder's name of hosts with this stack and GPU model."""
    return re.sub(r"[^A-Za-z0-9.+_-]+", "_", f"{stack}--{gpu_model}").strip("_") or "none"


def store_dir(sweep_root: Path, stack: str, gpu_model: str) -> Path:
    return Path(sweep_root) / STORE / group(stack, gpu_model)


def _names(items) -> set[str]:
    return {n for n in items if _NAME.fullmatch(n)}


def pull(remote: rmt.Remote, workdir: str, store: Path) -> list[str]:
    """Copy the host's artifact files that ``store`` lacks into it; the names copied."""
    src = f"{workdir.rstrip('/')}/{REMOTE_DIR}"
    have = _names(os.listdir(store)) if store.is_dir() else set()
    new = sorted(_names(remote.listdir(src)) - have)
    done = []
    for name in new:
        writes.folder(store, "compiled artifacts", root=store.parent.parent)  # <sweep>/.compiled/<group>
        try:  # whole or absent (lab.core.writes.new_file), never through a link planted in the store
            remote.get(f"{src}/{name}", store / name, limits.FETCH_BYTES)
            done.append(name)
        except (GpulabError, OSError):
            pass  # gone or unreadable meanwhile: that run compiles, nothing more
    return done


def _open_plain(path: Path):
    """``path`` opened for reading when it is a regular file, never following a link (a link planted in the
    store is not shipped: the file it points to may be anything of the controller's); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def push(remote: rmt.Remote, workdir: str, store: Path) -> list[str]:
    """Copy the files of ``store`` the host lacks into its artifacts folder; the names copied."""
    if not store.is_dir():
        return []
    dst = f"{workdir.rstrip('/')}/{REMOTE_DIR}"
    missing = sorted(_names(os.listdir(store)) - _names(remote.listdir(dst)))
    if not missing:
        return []
    remote.run(["mkdir", "-p", dst], timeout=60)
    done = []
    for name in missing:
        fh = _open_plain(store / name)
        if fh is None:
            continue
        tmp = f"{dst}/.{name}.{secrets.token_hex(4)}.tmp"
        with fh:
            remote.put(fh, tmp)
        remote.run(["mv", "-f", tmp, f"{dst}/{name}"], timeout=60)
        done.append(name)
    return done


def matches(name: str, key) -> bool:
    """Whether an artifacts file (named by runner.compilecache.key: workload.scale.mode.precision.x<processes>.
    ...) holds the graphs of compile group ``key`` (lab.sweep.pilot.Key; the store folder fixes stack and GPU)."""
    parts = name.split(".")
    if len(parts) < 6 or parts[:3] != [key.workload, key.scale, key.mode]:
        return False
    return key.gpus < 0 or parts[4] == f"x{max(1, key.gpus) * key.nodes}"  # a CPU run is one process a node


def held(sweep_root: Path, key) -> bool:
    """Whether the sweep's store holds artifacts of compile group ``key``."""
    store = store_dir(sweep_root, key.stack, key.gpu_model)
    try:
        return any(matches(n, key) for n in _names(os.listdir(store)))
    except OSError:
        return False
