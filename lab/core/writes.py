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
it are checked. The file itself is written by runner.rundir.new_file, the one
function that writes a whole file without following a link, for the runner
and the controller alike (lab.core may import that contract module; the
runner may not import lab).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from lab.core.errors import ConfigError, RunError, excerpt
from runner import rundir


def _lstat(path: Path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ENAMETOOLONG, ELOOP in a parent, EACCES
        raise ConfigError(f"{excerpt(str(path), 120)}: cannot be written ({exc.strerror or exc})") from None


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


def writable_folder(path: str | Path, what: str = "output folder") -> Path:
    """``path`` when it is a real folder or does not exist yet (no link, no file in its place)."""
    return _existing(path, what, stat.S_ISDIR, "a folder", "gpulab writes only into real folders")


def writable_file(path: str | Path, what: str = "output") -> Path:
    """``path`` when it is a regular file (to be replaced) or does not exist yet."""
    return _existing(path, what, stat.S_ISREG, "a regular file", "gpulab does not write through links")


def writable(root: str | Path, files=(), folders=(), what: str = "output") -> None:
    """Refuse an output root, or a file or subfolder to be written below it, that gpulab may not write (before any is written)."""
    root = writable_folder(root, what)
    for f in folders:
        writable_folder(root / f, what)
    for f in files:
        writable_file(root / f, what)


def folder(path: str | Path, what: str = "output folder", root: str | Path | None = None) -> Path:
    """Make ``path`` (and its missing parents), refusing a link or a file at any component made, at ``path``,
    and at every component below ``root`` (the folders above ``root`` are the user's)."""
    path = Path(path)
    writable_folder(path, what)
    missing = []
    p = path.absolute()
    while _lstat(p) is None and p != p.parent:
        missing.append(p)
        p = p.parent
    if root is not None:
        top = Path(root).absolute()
        while p != top and top in p.parents:
            writable_folder(p, what)
            p = p.parent
    for p in reversed(missing):
        try:
            os.mkdir(p)
        except FileExistsError:
            pass  # made meanwhile: checked below like any other
        except OSError as exc:
            raise ConfigError(f"{what}: {path} cannot be made ({exc.strerror or exc})") from None
        writable_folder(p, what)
    return writable_folder(path, what)


def write_bytes(path: str | Path, data: bytes, what: str = "output", mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` as a new file renamed into place (runner.rundir.new_file, the one such writer);
    ConfigError if a link or non-file is there."""
    path = Path(path)
    writable_folder(path.parent, what)
    writable_file(path, what)
    try:
        rundir.write_new(path, data, mode, sync=False)
    except OSError as exc:
        raise ConfigError(f"{what}: {path} cannot be written ({exc.strerror or exc})") from None
    return path


class TooBig(RunError):
    """A copy past its ``limit`` (new_file): a host's endless or oversized file is not taken whole."""


class _Capped:
    """A binary file object that takes at most ``limit`` bytes; TooBig past them."""

    def __init__(self, fh, limit: int, what: str):
        self.fh, self.left, self.limit, self.what = fh, limit, limit, what

    def write(self, data) -> int:
        self.left -= len(data)
        if self.left < 0:
            raise TooBig(f"{self.what}: more than {self.limit:,} bytes; not copied")
        return self.fh.write(data)


@contextlib.contextmanager
def new_file(path: str | Path, what: str = "output", limit: int | None = None):
    """A binary file object whose content becomes ``path`` when the block ends (runner.rundir.new_file: never
    through a link, whole or absent); ConfigError if a link or non-file is there or it cannot be made; with
    ``limit``, TooBig (and no file) once more than ``limit`` bytes are written to it."""
    path = Path(path)
    writable_folder(path.parent, what)
    writable_file(path, what)
    try:
        with rundir.new_file(path, sync=False) as fh:
            yield fh if limit is None else _Capped(fh, limit, what)
    except OSError as exc:
        raise ConfigError(f"{what}: {path} cannot be written ({exc.strerror or exc})") from None


def write_text(path: str | Path, text: str, what: str = "output") -> Path:
    return write_bytes(path, text.encode("utf-8"), what)


def remove(path: str | Path) -> None:
    """Remove what is at ``path``, never opening it: a folder with what it holds, anything else (a file, a
    symbolic link, a FIFO) unlinked. shutil.rmtree opens its path first, and a FIFO there blocks that open
    forever; on a file it fails, and the folder meant to replace it could not."""
    import shutil

    found = _lstat(Path(path))
    if found is None:
        return
    if stat.S_ISDIR(found.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.unlink(path)
