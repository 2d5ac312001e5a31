"""What every gpulab task shares: its short flags, its settings, its checks and how it ends.

A task is Invoke's (``@task``, given GpulabTask as its documented ``klass``);
``task_errors`` checks the config section and the path options when it starts
and ends it as gpulab ends every command: a GpulabError is one line and its
exit code. How the program around the tasks reads the settings and ends on a
parse error or a bad file is lab.core.program's.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys

from invoke import Exit, Task
from invoke import task as invoke_task

from lab.core import advice, config, settings
from lab.core.errors import ConfigError, GpulabError, excerpt, printable
from lab.core.program import PIPE_GONE, config_flag_file, quiet_stdout, set_by


# the task options and settings that name a path: each checked where it enters (lab.core.paths)
PATH_OPTIONS = {
    "path": True,
    "out": True,
    "compare": True,
    "references": True,
    "catalogue": True,
    "inventory": True,
    "recipe": True,
    "baseline": True,  # invoke tune's recipe file (validate's --baseline is a flag: not text, not checked)
    "space": True,
    "root": False,
}  # --root is a folder on the hosts
PATH_SETTINGS = ("inventory", "results", "artifacts", "stacks", "references", "datasets_catalogue", "demo.inventory")


# the tasks whose PATH is one path (invoke collect's sweep folder): a comma there is part of a name, never a list
ONE_PATH = frozenset({"collect"})


def check_paths(setting, arguments: dict, one_path: bool = False) -> None:
    """ConfigError for a task's path option (``arguments``) or path setting (``setting(key)``) with a name over
    255 bytes or a link loop, empty or blank (``--out ''``, an item of ``PATH`` 'a,,b'; ``one_path``: PATH is one
    path, commas and all), and for a folder tasks write into that is a system folder (lab.core.paths)."""
    from lab.core import paths

    for name, local in PATH_OPTIONS.items():
        value = arguments.get(name)
        if isinstance(value, str):
            parts = value.split(",") if name == "path" and not one_path else [value]
            label = f"--{name}" if name != "path" else "PATH"
            for n, part in enumerate(parts, 1):
                if part.strip():
                    paths.usable(part, label, local=local)
                elif name != "path" or len(parts) > 1 or one_path:  # --out '' or PATH 'a,,b': a typo, never a default
                    said = f": item {n} is empty" if name == "path" and not one_path else " is not a path"
                    raise ConfigError(f"{label}: {excerpt(repr(value), 60)}{said}")
    for key in PATH_SETTINGS:
        if isinstance(setting(key), str):
            paths.usable(setting(key), f"config gpulab.{key}")
    for key in ("results", "artifacts"):  # the folders tasks write into
        if isinstance(setting(key), str):
            paths.output_root(setting(key), f"config gpulab.{key}")
    for name, local in (("out", True), ("root", False)):
        if isinstance(arguments.get(name), str) and arguments[name]:
            paths.output_root(arguments[name], f"--{name}", local=local)


# --------------------------------------------------------------------------- what every task shares

# One short flag per option, the same in every task (Invoke would give each task's options the first free
# letter of their names, so that -u was --url in one task and --until in another); an option not named here
# has its long form only.
SHORT_FLAGS = {
    "host": "h",
    "device": "d",
    "limit": "l",
    "inventory": "i",
    "url": "u",
    "name": "n",
    "workloads": "w",
    "gpus": "g",
    "seeds": "s",
    "mode": "m",
    "out": "o",
    "format": "f",
    "json": "j",
    "check": "c",
    "dry_run": "r",
    "timeout": "t",
}


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


def task_options(**options):
    """``@task``'s options, kept on the task's function for ``fresh_tasks``, in a module that tasks.py takes
    tasks from. Invoke's Task.get_arguments pops each argument's help as it builds a parser from the Task: one
    made at import would be shared by every load of tasks.py in a process, without help in a load after the
    first load's namespace was parsed (Invoke's Program parses a copy; a test or a library caller the Task)."""

    def keep(fn):
        fn.task_options = options
        return fn

    return keep


def fresh_tasks(*fns) -> list[Task]:
    """A new Task for each function marked by ``task_options``: tasks.py asks for them each time it loads."""
    return [task(**fn.task_options)(fn) for fn in fns]


def setting(c, key, value=None):
    """The task argument if given, else gpulab.<key> (dotted) of the Invoke config as lab.core.settings.read gives
    it: typed, inside its declared range, its declared default where no layer sets it (0, false and "" are
    values; None only for a demo key that takes the top-level one)."""
    if value is not None:
        return value
    return settings.read(config.plain(c.config.get("gpulab", {})), key, settings.WHERE)


SETTING_SAID = re.compile(r"config gpulab\.([a-z0-9_.]+): ")


def with_source(cfg, message: str) -> str:
    """A task's error about a setting's value (``config gpulab.<key>: ...``, found where the value is used) with the
    file or variable that set it, unless the message names it already."""
    said = SETTING_SAID.match(message)
    where = set_by(cfg, said.group(1).rstrip(".")) if said else None
    return f"{message} ({where})" if where and where not in message else message


def task_errors(fn):
    """Check the config section and the path options, run the task, and end it as gpulab ends every command:
    a GpulabError is one line and its exit code (2 bad input, 1 a failed run or check), Ctrl-C is 130, a
    reader that left the pipe is 141, quietly. No traceback for a user's mistake."""

    @functools.wraps(fn)
    def wrapper(c, *args, **kwargs):
        try:
            config.conform(c.config.get("gpulab"))
            arguments = inspect.signature(fn).bind_partial(c, *args, **kwargs).arguments
            check_paths(lambda key: setting(c, key), arguments, one_path=fn.__name__ in ONE_PATH)
            # what pasting an advised command needs again
            advice.remember(config=config_flag_file(), inventory=arguments.get("inventory"))
            result = fn(c, *args, **kwargs)
            sys.stdout.flush()  # here, not at exit: a reader that left is a BrokenPipeError handled below
            return result
        except GpulabError as exc:
            said = with_source(c.config, exc.message)  # a setting's value: the file that set it
            raise Exit(f"gpulab: {printable(advice.carry(said))}", code=exc.exit_code) from None
        except KeyboardInterrupt:
            raise Exit("gpulab: interrupted; state saved", code=130) from None
        except BrokenPipeError:  # `invoke sweep --dry-run | head`: the reader left; stop quietly as a pipe does
            quiet_stdout()
            raise Exit(code=PIPE_GONE) from None

    return wrapper
