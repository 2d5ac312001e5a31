"""Trees of hostile shapes for the tests of the readers that search them (the report's, the history's).

``nested``: a folder chain deeper than Python recurses, made and removed through folder descriptors, so that
no path handed to the kernel is ever that long, and removed by the test itself (shutil.rmtree, which pytest's
tmp_path clean-up uses, recurses too on Python 3.11).

``listed_not_searched``: a folder whose names may be listed but whose files may not be looked at (mode r--
for whoever runs gpulab), as a user other than root meets it. The tests run as root, whom no mode stops, so
the stat calls below that folder fail as the kernel would fail them (PermissionError).
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

LINK = "d"


@contextlib.contextmanager
def nested(top: Path, depth: int, name: str = "x.log", text: bytes = b"hello\n"):
    """``top/d/d/.../d``, ``depth`` folders down, its deepest folder holding file ``name``; gone afterwards."""
    fds = [os.open(top, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(depth):
            os.mkdir(LINK, dir_fd=fds[-1])
            fds.append(os.open(LINK, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        leaf = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
        os.write(leaf, text)
        os.close(leaf)
        yield top.joinpath(*[LINK] * depth)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fds[-1])
        while len(fds) > 1:
            os.close(fds.pop())
            os.rmdir(LINK, dir_fd=fds[-1])
        os.close(fds.pop())


def listed_not_searched(monkeypatch, folder: Path) -> None:
    """Every os.stat and os.lstat of a path below ``folder`` fails with EACCES (pathlib's tests use them too)."""
    below = str(folder).rstrip("/") + "/"
    for name in ("stat", "lstat"):
        real = getattr(os, name)

        def denied(path, *args, _real=real, **kwargs):
            if isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(below):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, denied)
