"""Every file and folder gpulab writes, made without following a symbolic link planted where an output belongs.

Report outputs, sweep.json, validate's verdicts and references go through
here. A folder is made one component at a time with ``mkdir`` (which never
follows a link) and checked with ``lstat`` as it goes; a file is written to a
fresh temporary name opened with O_CREAT | O_EXCL | O_NOFOLLOW beside it and
renamed over its place (a rename replaces the name, it never writes through a
link). A link, a FIFO or any non-regular file where an output file belongs,
and a link or a file where an output folder belongs, is bad input: a
ConfigError line (exit 2), raised by ``check`` before anything is written.

The folders above an output root are the user's (a results folder may well
be a link to a data disk); the root itself and everything gpulab makes below
it are checked.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from lab.core.errors import ConfigError

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _lstat(path: Path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:   # ENAMETOOLONG, ELOOP in a parent, EACCES
        raise ConfigError(f"{path}: cannot be written ({exc.strerror or exc})") from None


def _existing(path: str | Path, what: str, is_kind, kind: str, link_says: str) -> Path:
    """``path`` when nothing is there yet or what is there is of ``kind`` (never a link)."""
    path = Path(path)
    st = _lstat(path)
    if st is None:
        return path
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"{what}: {path} is a symbolic link; {link_says}")
    if not is_kind(st.st_mode):
        raise ConfigError(f"{what}: {path} exists and is not {kind}")
    return path


def check_folder(path: str | Path, what: str = "output folder") -> Path:
    """``path`` when it is a real folder or does not exist yet (no link, no file in its place)."""
    return _existing(path, what, stat.S_ISDIR, "a folder", "gpulab writes only into real folders")


def check_file(path: str | Path, what: str = "output") -> Path:
    """``path`` when it is a regular file (to be replaced) or does not exist yet."""
    return _existing(path, what, stat.S_ISREG, "a regular file", "gpulab does not write through links")


def check(root: str | Path, files=(), folders=(), what: str = "output") -> None:
    """Check an output root and the files and subfolders that will be written below it, before any is written."""
    root = check_folder(root, what)
    for f in folders:
        check_folder(root / f, what)
    for f in files:
        check_file(root / f, what)


def folder(path: str | Path, what: str = "output folder", root: str | Path | None = None) -> Path:
    """Make ``path`` (and its missing parents), refusing a link or a file at any component made, at ``path``,
    and at every component below ``root`` (the folders above ``root`` are the user's)."""
    path = Path(path)
    check_folder(path, what)
    missing = []
    p = path.absolute()
    while _lstat(p) is None and p != p.parent:
        missing.append(p)
        p = p.parent
    if root is not None:
        top = Path(root).absolute()
        while p != top and top in p.parents:
            check_folder(p, what)
            p = p.parent
    for p in reversed(missing):
        try:
            os.mkdir(p)
        except FileExistsError:
            pass   # made meanwhile: checked below like any other
        except OSError as exc:
            raise ConfigError(f"{what}: {path} cannot be made ({exc.strerror or exc})") from None
        check_folder(p, what)
    return check_folder(path, what)


def write_bytes(path: str | Path, data: bytes, what: str = "output", mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` as a new file renamed into place; ConfigError if a link or non-file is there."""
    path = Path(path)
    check_folder(path.parent, what)
    check_file(path, what)
    for _ in range(16):
        tmp = path.parent / f".{path.name[:200]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, _FLAGS, mode)
        except FileExistsError:   # a name planted there (a link, a file): take another
            continue
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                continue
            raise ConfigError(f"{what}: {path} cannot be written ({exc.strerror or exc})") from None
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return path
    raise ConfigError(f"{what}: {path}: no free temporary name beside it")


def write_text(path: str | Path, text: str, what: str = "output") -> Path:
    return write_bytes(path, text.encode("utf-8"), what)
