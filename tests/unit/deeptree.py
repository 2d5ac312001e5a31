"""A folder chain deeper than Python recurses, for the tests of the readers that search trees (the report's,
the history's): made and removed through folder descriptors, so that no path handed to the kernel is ever
that long, and removed by the test itself (shutil.rmtree, which pytest's tmp_path clean-up uses, recurses too
on Python 3.11)."""

from __future__ import annotations

import contextlib
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
