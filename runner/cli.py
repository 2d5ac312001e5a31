"""Command line of the runner: ``python -m runner COMMAND ...``.

Each command lives in its own module, which exposes ``add_arguments(parser)``
and ``main(args) -> int``. Only the chosen command's module is imported, so
``--version``, ``list`` and ``probe`` never import a deep-learning framework.
Bad input: one line on stderr, exit code 2 (``UsageError``).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from runner import __version__, source

# command -> (module, one-line help)
COMMANDS = {
    "run": ("runner.supervisor", "run a workload and leave a complete run directory"),
    "list": ("runner.workloads", "list the registered workloads"),
    "probe": ("runner.probe", "print one JSON document describing this host's GPUs and stack"),
    "health": ("runner.health", "print the quick health facts a sweep checks (GPUs through NVML, XIDs)"),
    "burnin": ("runner.burnin", "measure GPU health and performance for hardware validation"),
    "prepare": ("runner.datasets.prepare", "prepare a dataset into the form the workloads read"),
    "datasets": ("runner.datasets.cli", "check, prepare or list the prepared datasets"),
}


class UsageError(Exception):
    """Bad input to the runner: reported as one line, exit code 2."""


# kernel and system trees no folder of a run may be made in (run --out, --cache-dir)
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/etc", "/usr", "/boot", "/bin", "/sbin", "/lib", "/lib64")


def path_problem(value: str, *, made_here: bool = False) -> str | None:
    """What is wrong with a path option, as '<path>: <why>', checked where it enters: no NUL, names of at
    most 255 bytes, at most 4095 bytes in all, no symbolic-link loop; ``made_here``: a folder the runner
    makes, so not a system folder or inside one. None when it may be used."""
    shown = repr(value if len(value) <= 60 else value[:57] + "...")
    if not value or "\0" in value:
        return f"{shown}: not a path"
    raw = os.fsencode(value)
    if len(raw) > 4095 or any(len(part) > 255 for part in raw.split(b"/")):
        return f"{shown}: a name longer than 255 bytes or a path longer than 4095"
    try:
        os.stat(value)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{shown}: a symbolic link loop"
    if made_here:
        real = os.path.realpath(value)
        if real == "/" or any(real == t or real.startswith(t + "/") for t in SYSTEM_TREES):
            return f"{shown}: a system folder; give a folder of its own"
    return None


def source_digest() -> str:
    """The runner's source digest (runner.source): part of ``--version`` so that the controller
    notices a host whose runner differs from its checkout even when the version number is the same."""
    return source.digest()


def version_string() -> str:
    return f"gpulab-runner {__version__} src={source_digest()}"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _Parser(prog="runner", description="gpulab on-host runner")
    parser.add_argument("--version", action="store_true", help="print the runner version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    module = None
    for name, (modname, helptext) in COMMANDS.items():
        p = sub.add_parser(name, help=helptext, description=helptext)
        if name == chosen:
            try:
                module = importlib.import_module(modname)
            except ImportError as exc:
                print(f"runner {name}: not available here ({exc})", file=sys.stderr)
                return 2
            module.add_arguments(p)
    try:
        args = parser.parse_args(argv)
        if args.version:
            print(version_string())
            return 0
        if module is None:
            parser.print_help()
            return 2
        return int(module.main(args) or 0)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return 2
