"""How the invoke command line ends for gpulab: parse errors and bad environment variables exit 2, one line.

The README's commands run Invoke's own program (``.venv/bin/invoke``, or
``python -m invoke``: the one ``invoke.main.program``). It prints a parse error
(``invoke sweep --stak``) and exits 1, and an ``INVOKE_GPULAB_*`` variable
that does not fit its setting's type ends in a traceback. tasks.py calls
``install()`` when Invoke loads it, which is before the task arguments are
parsed and before the environment is read: from then on a parse error is
``gpulab: <what>`` and exit 2, a bad variable is one line naming it and
exit 2, and so is a config file whose ``gpulab:`` section does not fit the
schema (checked layer by layer before each of Invoke's merges) or that Invoke
cannot read, as every other bad input. A user's ~/.invoke.yaml and
/etc/invoke.yaml are read before tasks.py loads: lab.core.invokeguard (a
``.pth`` line `.ci/setup` installs) makes one that is not YAML or not a
mapping one line and exit 2. Core options Invoke parses before it loads
tasks.py (``invoke -f`` without its file) keep Invoke's own handling.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys

from invoke import Exit, Task
from invoke import task as invoke_task
import yaml
from invoke.config import AmbiguousMergeError

try:   # Invoke 2 reads its files with a vendored PyYAML
    from invoke.vendor.yaml import YAMLError as _InvokeYAMLError
except ImportError:   # pragma: no cover - an Invoke that uses PyYAML itself
    _InvokeYAMLError = yaml.YAMLError
from invoke.env import Environment
from invoke.exceptions import AmbiguousEnvVar, ParseError, UncastableEnvVar

from lab.core import advice, config
from lab.core.errors import ConfigError, GpulabError, excerpt, printable

BAD_INPUT = 2


def _as_exit(fn):
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ParseError as exc:
            raise Exit(f"gpulab: {printable(excerpt(exc, 300))} (see `invoke --help` and `invoke --list`)",
                       code=BAD_INPUT) from None
        except ValueError as exc:   # Invoke's int() of a 5,000-digit option value
            raise Exit(f"gpulab: an option's value is not a number this command takes "
                       f"({printable(excerpt(exc, 120))})", code=BAD_INPUT) from None
        except Exit as exc:   # `invoke --list NOSUCH`: Invoke says so and exits 1
            if exc.code != 1 or not exc.message:
                raise
            raise Exit(f"gpulab: {' '.join(str(exc.message).split())}", code=BAD_INPUT) from None

    return wrapped


def load_env(cfg, environ=None) -> None:
    """Invoke's Config.load_shell_env, with the ``gpulab`` variables read by lab.core.config.env_section."""
    environ = os.environ if environ is None else environ
    cfg.merge()
    try:
        gpulab = config.env_section(cfg._config.get("gpulab", {}), environ)
        others = {k: v for k, v in cfg._config.items() if k != "gpulab"}
        env = Environment(config=others, prefix=cfg._env_prefix).load()
    except ConfigError as exc:
        raise Exit(f"gpulab: {exc.message}", code=BAD_INPUT) from None
    except (ValueError, UncastableEnvVar, AmbiguousEnvVar) as exc:
        raise Exit(f"gpulab: environment: {excerpt(exc, 160)}", code=BAD_INPUT) from None
    if gpulab:
        env["gpulab"] = gpulab
    cfg._set(_env=env)
    cfg.merge()


HELP = "--help"


def _help_not_a_value(program, parse_tasks):
    """Invoke's parser gives a task's missing positional argument (``invoke report --help``) or a flag waiting
    for its value (``invoke sweep --name --help``) the next word, ``--help`` included, and the task would then
    run with it. After Invoke's own parse, such a value is turned back into what the user asked for: Invoke's
    per-task help, set as its parser sets it for ``--help`` after a task (the core ``help`` argument holds the
    task's name; ``parse_cleanup`` prints it and exits 0). tests/unit/test_task_help.py holds Invoke to this."""

    def asked(ctx) -> bool:
        if ctx is None or not any(arg.value == HELP for arg in ctx.args.values()):
            return False
        program.core[0].args["help"].value = ctx.name
        return True

    def wrapped(*args, **kwargs):
        try:
            parse_tasks(*args, **kwargs)
        except ParseError as exc:   # `invoke report --out --help`: the positional is missing after all
            if asked(getattr(exc, "context", None)):
                program.tasks = []
                return
            raise
        any(asked(ctx) for ctx in program.tasks)

    return wrapped


def _flushed(fn):
    """``fn`` (Invoke's parse_cleanup: help, --list), its output flushed: a reader that left the pipe
    (``invoke validate --help | head``) ends it quietly, exit 141, as a task ends (task_errors)."""

    def wrapped(*args, **kwargs):
        try:
            try:
                return fn(*args, **kwargs)
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            quiet_stdout()
            raise Exit(code=141) from None

    return wrapped


def _layers_checked(cfg, merge):
    def wrapped(*args, **kwargs):
        problem = config.layer_problem(cfg)
        if problem:
            raise Exit(f"gpulab: {problem}", code=BAD_INPUT)
        try:
            return merge(*args, **kwargs)
        except AmbiguousMergeError as exc:   # a key gpulab does not own (run:, tasks:, ...)
            raise Exit(f"gpulab: config: {excerpt(exc, 160)}", code=BAD_INPUT) from None

    return wrapped


def _file_checked(load):
    def wrapped(*args, **kwargs):
        try:
            return load(*args, **kwargs)
        except (yaml.YAMLError, _InvokeYAMLError, ValueError, TypeError, OSError) as exc:  # a malformed file
            raise Exit(f"gpulab: config: {excerpt(exc, 160)}", code=BAD_INPUT) from None

    return wrapped


def install(program=None) -> None:
    """Hook gpulab's handling into the running Invoke program (once; harmless when none runs)."""
    if program is None:
        program = getattr(sys.modules.get("invoke.main"), "program", None)
    if program is None or getattr(program, "_gpulab_hooks", False):
        return
    program._gpulab_hooks = True
    program.parse_tasks = _as_exit(_help_not_a_value(program, program.parse_tasks))
    program.parse_cleanup = _as_exit(_flushed(program.parse_cleanup))
    cfg = getattr(program, "config", None)
    if cfg is not None:
        cfg.load_shell_env = functools.partial(load_env, cfg)
        cfg.merge = _layers_checked(cfg, cfg.merge)
        cfg.load_project = _file_checked(cfg.load_project)
        cfg.load_runtime = _file_checked(cfg.load_runtime)


def quiet_stdout() -> None:
    """Point stdout at /dev/null (its reader is gone), so that the last flush at exit raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# the task options and settings that name a path: each checked where it enters (lab.core.paths)
PATH_OPTIONS = {"path": True, "out": True, "compare": True, "references": True, "catalogue": True,
                "inventory": True, "root": False}   # --root is a folder on the hosts
PATH_SETTINGS = ("inventory", "results", "artifacts", "stacks", "references", "datasets_catalogue",
                 "demo.inventory")


def check_paths(setting, arguments: dict) -> None:
    """ConfigError for a task's path option (``arguments``) or path setting (``setting(key)``) with a name over
    255 bytes or a link loop, and for a folder tasks write into that is a system folder (lab.core.paths)."""
    from lab.core import paths

    for name, local in PATH_OPTIONS.items():
        value = arguments.get(name)
        if isinstance(value, str):
            for part in (value.split(",") if name == "path" else [value]):
                if part.strip():
                    paths.usable(part, f"--{name}" if name != "path" else "PATH", local=local)
    for key in PATH_SETTINGS:
        if isinstance(setting(key), str):
            paths.usable(setting(key), f"config gpulab.{key}")
    for key in ("results", "artifacts"):   # the folders tasks write into
        if isinstance(setting(key), str):
            paths.output_root(setting(key), f"config gpulab.{key}")
    for name, local in (("out", True), ("root", False)):
        if isinstance(arguments.get(name), str) and arguments[name]:
            paths.output_root(arguments[name], f"--{name}", local=local)


# --------------------------------------------------------------------------- what every task shares

# One short flag per option, the same in every task (Invoke would give each task's options the first free
# letter of their names, so that -u was --url in one task and --until in another); an option not named here
# has its long form only.
SHORT_FLAGS = {"host": "h", "device": "d", "limit": "l", "inventory": "i", "url": "u", "name": "n",
               "workloads": "w", "gpus": "g", "seeds": "s", "mode": "m", "out": "o", "format": "f", "json": "j",
               "check": "c", "dry_run": "r", "timeout": "t"}


class GpulabTask(Task):
    """Invoke's Task (given to ``@task`` as its documented ``klass``) with gpulab's short flags: SHORT_FLAGS
    for every task, nothing else (tests/unit/test_task_help.py holds Invoke to ``arg_opts``)."""

    def __init__(self, *args, **kwargs):
        kwargs["auto_shortflags"] = False
        super().__init__(*args, **kwargs)

    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        letter = SHORT_FLAGS.get(name)
        if letter and not opts.get("positional") and letter not in taken_names:
            opts["names"] = [*opts["names"], letter]
        return opts


task = functools.partial(invoke_task, klass=GpulabTask)


def setting(c, key, value=None):
    """The task argument if given, else gpulab.<key> (dotted) from the Invoke config; None only where neither
    has it (0, false and "" are values)."""
    if value is not None:
        return value
    node = c.config.get("gpulab", {})
    for part in key.split("."):
        node = node.get(part) if hasattr(node, "get") else None
    return node


def _config_file() -> str | None:
    """The file of Invoke's ``-f/--config`` (Program.args, the core arguments it parsed), else None."""
    program = getattr(sys.modules.get("invoke.main"), "program", None)
    try:
        value = program.args.config.value
    except (AttributeError, KeyError, TypeError):   # no program ran (a task called as a library)
        return None
    return value if isinstance(value, str) and value else None


def task_errors(fn):
    """Check the config section and the path options, run the task, and end it as gpulab ends every command:
    a GpulabError is one line and its exit code (2 bad input, 1 a failed run or check), Ctrl-C is 130, a
    reader that left the pipe is 141, quietly. No traceback for a user's mistake."""

    @functools.wraps(fn)
    def wrapper(c, *args, **kwargs):
        try:
            config.check(c.config.get("gpulab"))
            arguments = inspect.signature(fn).bind_partial(c, *args, **kwargs).arguments
            check_paths(lambda key: setting(c, key), arguments)
            advice.remember(config=_config_file(), inventory=arguments.get("inventory"))   # what pasting needs again
            result = fn(c, *args, **kwargs)
            sys.stdout.flush()   # here, not at exit: a reader that left is a BrokenPipeError handled below
            return result
        except GpulabError as exc:
            raise Exit(f"gpulab: {printable(advice.carry(exc.message))}", code=exc.exit_code) from None
        except KeyboardInterrupt:
            raise Exit("gpulab: interrupted; state saved", code=130) from None
        except BrokenPipeError:   # `invoke sweep --dry-run | head`: the reader left; stop quietly as a pipe does
            quiet_stdout()
            raise Exit(code=141) from None

    return wrapper
