"""Controllers under every supported Python: an interpreter of each version 3.10-3.13 with gpulab's packages.

The controller (`invoke sweep`, ...) must behave the same on each Python that
pyproject.toml admits; Ctrl-C handling differs between them (CPython 3.11
changed what a KeyboardInterrupt inside ``Thread.join`` does), so the SSH-lab
tests run it under each. An interpreter is looked for where this kind of
machine has one: the running one, pyenv's ``~/.pyenv/versions/X.Y.*``,
``pythonX.Y`` on PATH, ``/usr/bin`` and ``/usr/local/bin`` (Debian's apt
offers only its own 3.11; the others come with the machine's pyenv). For a
version other than the running one a virtual environment is made in the test
lab's cache (keyed on that interpreter and pyproject.toml), with the base and
``controller`` packages pip installs from the configured index; gpulab itself
comes from PYTHONPATH (the checkout under test).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

from tests.testlab.util import REPO, LabError, cache_dir, digest, flock

try:
    import tomllib
except ImportError:  # Python 3.10: the test extra brings tomli
    import tomli as tomllib

VERSIONS = ("3.10", "3.11", "3.12", "3.13")


class NoInterpreter(LabError):
    """This machine has no interpreter of the version: a fact of the machine (the test skips, and says so)."""


def _version_of(python: str) -> str | None:
    try:
        p = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def find(version: str) -> str | None:
    """A working interpreter of ``version`` ("3.12"), or None when this machine has none."""
    candidates = sorted(
        glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")), reverse=True
    )
    candidates += [
        shutil.which(f"python{version}") or "",
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ]
    for c in candidates:
        if c and os.access(c, os.X_OK) and _version_of(c) == version:
            return c
    return None


def requirements() -> list[str]:
    """pyproject's base dependencies and its ``controller`` extra."""
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = doc["project"]
    return list(project["dependencies"]) + list(project["optional-dependencies"]["controller"])


def python_for(version: str) -> str:
    """An interpreter of ``version`` that can run the controller; NoInterpreter when this machine has none
    of that version, LabError when its environment cannot be made (venv, pip)."""
    if "%d.%d" % sys.version_info[:2] == version:
        return sys.executable
    base = find(version)
    if base is None:
        raise NoInterpreter(
            f"no Python {version} on this machine (looked in ~/.pyenv/versions, PATH, /usr/bin, /usr/local/bin)"
        )
    venv = cache_dir() / "controllers" / f"py{version}-{digest(base, REPO / 'pyproject.toml')}"
    py = venv / "bin" / "python"
    with flock(cache_dir() / "locks" / f"controller-py{version}.lock", f"the Python {version} controller"):
        if (venv / ".ready").is_file():
            return str(py)
        shutil.rmtree(venv, ignore_errors=True)
        steps = [
            [base, "-m", "venv", str(venv)],
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", *requirements()],
        ]  # no byte-compiling: Python compiles the few modules the test imports
        for argv in steps:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=1500, stdin=subprocess.DEVNULL)
            if p.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                tail = " ".join((p.stderr or p.stdout).split())[-400:]
                raise LabError(f"Python {version} controller: {' '.join(argv[:4])} failed: {tail}")
        (venv / ".ready").write_text(base + "\n")
    return str(py)
