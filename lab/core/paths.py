"""Paths built from values: each part one plain name, the result inside its root.

Whatever names a folder under results/ or under a host's workdir (a sweep
name, a host name, a run id read back from sweep.json) goes through ``child``,
so that no value, from the command line or from a file, can reach outside its
root: not by ``..``, not by ``/``, not by a symbolic link already there.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from lab.core.errors import ConfigError, RunError, excerpt, shown

MAX_NAME = 255


def is_component(name) -> bool:
    """One plain file name: not empty, no '/', no NUL, not '.' or '..'."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NAME
        and "/" not in name
        and "\0" not in name
        and name not in (".", "..")
    )


def utf8(name: str | Path) -> bool:
    """Is ``name`` text a UTF-8 file (a report, a table) can hold? A name of bytes of another encoding comes
    from the file system as lone surrogates (\\udcff), which no UTF-8 writer takes."""
    try:
        str(name).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def real(path: str | Path) -> Path:
    """``path`` with its links resolved as far as they go: a link loop stays as it is, never an error
    (``Path.resolve`` raises RuntimeError on a loop before Python 3.13)."""
    return Path(os.path.realpath(path))


def existing(path: str | Path) -> bool:
    """Whether ``path`` exists (links followed); ConfigError '<path>: cannot read (<why>)' where that cannot be
    told: a folder on the way that may not be searched (pathlib's exists() raises PermissionError there)."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return True


def inside(path: str | Path, root: str | Path) -> bool:
    """Does ``path`` (symbolic links resolved) lie in ``root`` (resolved)?"""
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip("/") + "/")


def apart(out: str | Path, inputs, what: str, advice: str = "give a folder apart from what is read") -> Path:
    """``out``, a folder a command writes into, when it lies apart from every one of ``inputs`` (the files and
    folders the command reads): not one of them, not inside one (a report written into the runs it reads, and
    read as a run by the next report) and holding none; symbolic links resolved. ConfigError '<what>: ...'
    naming both and ``advice`` otherwise, before anything is read or written (invoke report's --out, invoke
    tune's study folder)."""
    for given in inputs:
        if not str(given).strip():
            continue
        shown_out, shown_in = excerpt(str(out), 200), excerpt(str(given), 200)
        if real(out) == real(given):
            problem = f"{shown_out} is the input {shown_in}"
        elif inside(out, given):
            problem = f"{shown_out} lies inside the input {shown_in}"
        elif inside(given, out):
            problem = f"{shown_out} holds the input {shown_in}"
        else:
            continue
        raise ConfigError(f"{what}: {problem}; {advice} (nothing was written)")
    return Path(out)


def child(root: str | Path, *parts: str, what: str = "path") -> Path:
    """``root/part/...`` when every part is one plain name and the result stays in ``root``."""
    for part in parts:
        if not is_component(part):
            raise ConfigError(f"{what}: {part!r} is not a plain name (no '/', not '..')")
    path = Path(root).joinpath(*parts)
    if not inside(path, root):
        raise ConfigError(f"{what}: {path} leads outside {root} (a symbolic link)")
    return path


MAX_PATH = 4095


def usable(path: str | Path, what: str, *, local: bool = True) -> Path:
    """A path given as an option or setting, checked where it enters: text without NUL, every name at most
    255 bytes, the whole at most 4095, and (``local``) no symbolic-link loop on the way. A path that does not
    exist passes: whoever reads or makes it says so."""
    text = str(path)
    if not text or "\0" in text:
        raise ConfigError(f"{what}: {excerpt(repr(text), 60)} is not a path")
    raw = os.fsencode(text)
    if len(raw) > MAX_PATH:
        raise ConfigError(f"{what}: {excerpt(text, 60)} is longer than {MAX_PATH} bytes")
    if any(len(part) > MAX_NAME for part in raw.split(b"/")):
        raise ConfigError(f"{what}: {excerpt(text, 60)} holds a name longer than {MAX_NAME} bytes")
    if local:
        try:
            os.stat(text)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfigError(f"{what}: {excerpt(text, 60)}: a symbolic link loop") from None
            if exc.errno == errno.ENAMETOOLONG:  # pragma: no cover - the byte counts come first
                raise ConfigError(f"{what}: {excerpt(text, 60)}: name too long") from None
    return Path(text)


# folders no output of gpulab may be, or (SYSTEM_TREES) lie in: a typo of --out or gpulab.results must not
# spread report files over the system or fill /proc with sweeps
SYSTEM_FOLDERS = frozenset(
    {
        "/",
        "/etc",
        "/usr",
        "/var",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/boot",
        "/dev",
        "/proc",
        "/sys",
        "/run",
        "/root",
        "/home",
        "/opt",
        "/srv",
        "/tmp",
        "/var/lib",
        "/usr/local",
    }
)
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/dev", "/proc", "/sys")


def output_root(path: str | Path, what: str, *, local: bool = True) -> Path:
    """``path`` as a folder gpulab writes into: not a system folder (/, /etc, ...) nor inside /etc, /usr, /proc,
    /sys, /dev, ... (``local``: as the path resolves here; otherwise as written, for a folder on a host)."""
    usable(path, what, local=local)
    text = os.path.realpath(path) if local else os.path.normpath(str(path))
    text = "/" + text.strip("/") if text.startswith("/") else text
    if text in SYSTEM_FOLDERS or any(text == t or text.startswith(t + "/") for t in SYSTEM_TREES):
        raise ConfigError(f"{what}: {excerpt(str(path), 60)} is a system folder; give a folder of its own")
    return Path(path)


def folder(path: str | Path, what: str) -> Path:
    """``path`` when it is a folder or can be made one (its nearest existing parent is a writable folder).

    Checked before anything starts, so that a results or output path that is a
    file, or lies below one, is one ConfigError line and not a traceback after
    the work was done. Nothing is created here.
    """
    path = Path(path)  # os.path's tests: pathlib's raise PermissionError below a folder that may not be searched
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise ConfigError(f"{what}: {path} exists and is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"{what}: {path} is not writable")
        return path
    parent = next((p for p in path.absolute().parents if os.path.exists(p)), None)
    if parent is None or not os.path.isdir(parent):
        raise ConfigError(f"{what}: {path} cannot be made: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {path} cannot be made: {parent} is not writable")
    return path


def host_home(host: str, said) -> str:
    """A host's home folder from its answer to ``printf %s "$HOME"`` (``said``: its code and stdout): an absolute
    path of printable text, else RunError naming the host. An empty answer, or one cut by a timeout, would put
    ``~/...`` (its gpulab_workdir) at the host's ``/``."""
    home = said.stdout.strip()
    if said.code != 0 or not home.startswith("/") or not home.isprintable() or len(os.fsencode(home)) > MAX_PATH:
        raise RunError(
            f"{host}: its home folder ($HOME) is {shown(home)} (exit {said.code}), not an absolute path; "
            f"a path under ~ cannot be placed there"
        )
    return home
