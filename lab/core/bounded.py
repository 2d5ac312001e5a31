"""The one reader of files that came from elsewhere: run directories, sweep state, result trees, data files.

A file read back is input. Only a regular file is read, and with ``root`` only
one whose real path lies inside that root (a symbolic link to /dev/zero or to
a file outside the run directory is refused before it is opened). Nothing
else is opened, so a FIFO cannot block and a device cannot be read forever;
the file is opened with O_NONBLOCK and O_NOFOLLOW and checked again after the
open, and never more than a cap (lab.core.limits) is read. What cannot be read is
``Unreadable`` (``Missing`` when it does not exist) with a one-line reason;
callers turn that into a skipped run or a ConfigError naming the file.

A tree is searched by ``walk``: os.walk's order and pruning, without its recursion (Python 3.11's os.walk
raises RecursionError some thousand folders down) and at most ``limits.WALK_DEPTH`` folders deep.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from lab.core import limits
from lab.core import paths
from lab.core import plaindata

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
    stat.S_IFLNK: "a symbolic link",
}


class Unreadable(Exception):
    """A file that is not read; ``reason`` is one line without the path."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


class Missing(Unreadable):
    """The file does not exist."""


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def kind(path: str | Path) -> str:
    """What ``path`` is, as the reasons above say it ("a FIFO", "a character device"), links followed."""
    try:
        mode = os.stat(path).st_mode
        return "a file" if stat.S_ISREG(mode) else _kind(mode)
    except OSError as exc:
        return f"not readable ({exc.strerror or exc})"


def _open(path: Path, root) -> tuple[int, os.stat_result]:
    if root is not None and not paths.inside(path, root):
        raise Unreadable(path, f"leads outside {root} (a symbolic link); not read")
    real = os.path.realpath(path)
    try:
        before = os.stat(real)
    except FileNotFoundError:
        raise Missing(path, "does not exist") from None
    except OSError as exc:
        raise Unreadable(path, f"cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(before.st_mode):
        raise Unreadable(path, f"is {_kind(before.st_mode)}, not a regular file; not read")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Missing(path, "does not exist") from None
    except OSError as exc:
        raise Unreadable(path, f"cannot read ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise Unreadable(path, "changed while it was opened; not read")
    return fd, st


def _too_big(path, size: int, limit: int) -> Unreadable:
    return Unreadable(path, f"is {size} bytes, more than the {limit} bytes read of such a file")


def read_bytes(path: str | Path, *, root: str | Path | None = None, limit: int = limits.JSON_BYTES) -> bytes:
    """The bytes of a regular file (inside ``root`` when given), at most ``limit`` of them."""
    fd, st = _open(Path(path), root)
    try:
        if st.st_size > limit:
            raise _too_big(path, st.st_size, limit)
        chunks, total = [], 0
        while True:
            block = os.read(fd, min(1 << 20, limit + 1 - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
            if total > limit:  # grew after the check
                raise _too_big(path, total, limit)
        return b"".join(chunks)
    except OSError as exc:
        raise Unreadable(path, f"cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_head(path: str | Path, *, root: str | Path | None = None, limit: int = 64 << 10) -> bytes:
    """The first ``limit`` bytes (or fewer) of a regular file (inside ``root`` when given)."""
    fd, _st = _open(Path(path), root)
    try:
        chunks, total = [], 0
        while total < limit:
            block = os.read(fd, min(1 << 20, limit - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
        return b"".join(chunks)
    except OSError as exc:
        raise Unreadable(path, f"cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_text(
    path: str | Path, *, root: str | Path | None = None, limit: int = limits.JSON_BYTES, errors: str = "strict"
) -> str:
    """UTF-8 text of a regular file; with errors="strict" a byte that is not UTF-8 is Unreadable."""
    data = read_bytes(path, root=root, limit=limit)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise Unreadable(path, f"is not UTF-8 text (byte {exc.start})") from None


def read_json(path: str | Path, *, root: str | Path | None = None, limit: int = limits.JSON_BYTES):
    """The JSON document of a regular file; Unreadable when it is not JSON."""
    text = read_text(path, root=root, limit=limit)
    try:
        return plaindata.loads(text)
    except ValueError as exc:
        raise Unreadable(path, f"is not JSON ({exc})") from None
    except RecursionError:
        raise Unreadable(path, "is not JSON (nested too deep)") from None


def read_or(read, path: str | Path, *, root: str | Path | None, limit: int, missing, unreadable):
    """``read(path, root=root, limit=limit)`` with its failures turned into the caller's own: the exception
    ``missing()`` gives when the file is not there, ``unreadable(reason)`` when it cannot be read."""
    try:
        return read(path, root=root, limit=limit)
    except Missing:
        raise missing() from None
    except Unreadable as exc:
        raise unreadable(exc.reason) from None


def sha256(path: str | Path, *, root: str | Path | None = None, limit: int = limits.HASH_BYTES) -> str:
    """sha256 of a regular file, streamed; Unreadable past ``limit`` bytes."""
    fd, st = _open(Path(path), root)
    try:
        if st.st_size > limit:
            raise _too_big(path, st.st_size, limit)
        h, total = hashlib.sha256(), 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > limit:
                raise _too_big(path, total, limit)
            h.update(block)
        return h.hexdigest()
    except OSError as exc:
        raise Unreadable(path, f"cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def walk(root: str | Path, *, skip=None, depth: int = limits.WALK_DEPTH):
    """os.walk(root) top-down, symbolic links to folders listed but not followed, without recursion: yields
    (folder, dirnames, filenames), and only the names left in ``dirnames`` are visited. A folder that cannot
    be listed, or lies more than ``depth`` folders below ``root``, is not; ``skip(folder, reason)`` hears of it."""
    pending = [(os.fspath(root), 0)]
    while pending:
        top, level = pending.pop()
        try:
            with os.scandir(top) as found:
                entries = list(found)
        except OSError as exc:
            if skip:
                skip(top, f"cannot list folder ({exc.strerror or exc})")
            continue
        dirnames, filenames = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirnames if is_dir else filenames).append(entry.name)
        yield top, dirnames, filenames
        for name in reversed(dirnames):
            below = os.path.join(top, name)
            if os.path.islink(below):
                continue
            if level >= depth:
                if skip:
                    skip(below, f"more than {depth} folders below {os.fspath(root)}: not searched")
                continue
            pending.append((below, level + 1))
