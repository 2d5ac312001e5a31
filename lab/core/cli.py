"""How the invoke command line ends for gpulab: parse errors and bad environment variables exit 2, one line.

The README's commands run Invoke's own program (``.venv/bin/invoke``, or
``python -m invoke``: the one ``invoke.main.program``). It prints a parse error
(``invoke sweep --stak``) and exits 1, and an ``INVOKE_GPULAB_*`` variable
that does not fit its setting's type ends in a traceback. tasks.py calls
``install()`` when Invoke loads it, which is before the task arguments are
parsed and before the environment is read: from then on a parse error is
``gpulab: <what>`` and exit 2, and a bad variable is one line naming it and
exit 2, as every other bad input. Core options Invoke parses before it loads
tasks.py (``invoke -f`` without its file) keep Invoke's own handling.
"""

from __future__ import annotations

import os
import sys

from invoke import Exit
from invoke.exceptions import AmbiguousEnvVar, ParseError, UncastableEnvVar

from lab.core import config

BAD_INPUT = 2


def _as_exit(fn):
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ParseError as exc:
            raise Exit(f"gpulab: {' '.join(str(exc).split())} (see `invoke --help` and `invoke --list`)",
                       code=BAD_INPUT) from None
        except Exit as exc:   # `invoke --list NOSUCH`: Invoke says so and exits 1
            if exc.code != 1 or not exc.message:
                raise
            raise Exit(f"gpulab: {' '.join(str(exc.message).split())}", code=BAD_INPUT) from None

    return wrapped


def _env_checked(cfg, load_shell_env):
    def wrapped(*args, **kwargs):
        problem = config.env_problem(cfg.get("gpulab", {}), os.environ)
        if problem:
            raise Exit(f"gpulab: {problem}", code=BAD_INPUT)
        try:
            return load_shell_env(*args, **kwargs)
        except (ValueError, UncastableEnvVar, AmbiguousEnvVar) as exc:
            raise Exit(f"gpulab: environment: {' '.join(str(exc).split())}", code=BAD_INPUT) from None

    return wrapped


def install(program=None) -> None:
    """Hook gpulab's handling into the running Invoke program (once; harmless when none runs)."""
    if program is None:
        program = getattr(sys.modules.get("invoke.main"), "program", None)
    if program is None or getattr(program, "_gpulab_hooks", False):
        return
    program._gpulab_hooks = True
    program.parse_tasks = _as_exit(program.parse_tasks)
    program.parse_cleanup = _as_exit(program.parse_cleanup)
    cfg = getattr(program, "config", None)
    if cfg is not None:
        cfg.load_shell_env = _env_checked(cfg, cfg.load_shell_env)
