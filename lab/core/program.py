"""gpulab's Invoke program: how ``invoke TASK`` and ``gpulab TASK`` read their settings and end on bad input.

Both run the tasks of the project folder's tasks.py, with the same layers of
settings (README "Settings") and the same endings: a parse error
(``invoke sweep --stak``), an ``INVOKE_GPULAB_*`` variable that does not fit
its setting, a config file that cannot be read or whose ``gpulab:`` section
does not fit the schema are one line, ``gpulab: <what>``, and exit 2;
``invoke TASK --help`` is Invoke's help for the task even where the task
takes a value first; help or a listing into a closed pipe ends quietly, 141.

What does it is Invoke's documented way to change its program: a ``Program`` subclass (GpulabProgram:
``parse_tasks``, ``parse_cleanup``, ``execute``) with a ``Config`` subclass (GpulabConfig: ``merge``,
``load_shell_env``, ``load_runtime`` and the file loaders), both with Invoke's own ``prefix``, so that the files
and variables are the ones ``invoke`` reads. gpulab's defaults are the collection's configuration (tasks.py).

- ``gpulab`` (pyproject's console script, ``main``) is that Program, made with Invoke's own arguments (``name``,
  ``binary``, ``config_class``); it loads tasks.py from the folder it runs in, as ``invoke`` does.
- ``invoke`` and ``python -m invoke`` run Invoke's own program, so tasks.py calls ``adopt()``, THE ADAPTER: the
  running program and its config become GpulabProgram and GpulabConfig from there on. /etc/invoke.yaml and
  ~/.invoke.yaml are the only difference: Invoke reads them in ``Program.create_config``, before it imports
  tasks.py, and each of its extension points is either chosen by whoever makes the program (``Program``,
  ``config_class``) or read after tasks.py (the collection's configuration, the project's invoke.yaml, ``-f``).
  One that is not YAML, JSON or Python, not a mapping, or gives one of Invoke's keys the wrong shape (``run: 5``)
  is Invoke's traceback under ``invoke``, one line and exit 2 under ``gpulab`` (the test holds both).

Beyond Invoke's documented API this module relies on RELIES_ON below, each held by
tests/unit/test_invoke_program.py; pyproject pins the Invoke releases it was checked with.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Mapping
from importlib import import_module

from invoke import Config, Exit, Program
from invoke.config import AmbiguousMergeError, merge_dicts
from invoke.env import Environment
from invoke.exceptions import AmbiguousEnvVar, ParseError, UncastableEnvVar, UnknownFileType

from lab.core import config
from lab.core.errors import ConfigError, excerpt, printable

BAD_INPUT = 2
PIPE_GONE = 141  # a reader that left the pipe, as a shell reports SIGPIPE
HELP = "--help"

# what the adapter and the subclasses use that Invoke does not document (tests/unit/test_invoke_program.py)
RELIES_ON = {
    "invoke.main.program": "the program `invoke` runs, adopted when tasks.py loads",
    "Program.run": "calls parse_tasks, parse_cleanup, update_config and execute on self after loading tasks.py",
    "Config._config, Config._set(_env=...)": "the merged data and the environment layer (Invoke's load_shell_env)",
    "Config._load_yaml/_load_yml/_load_json/_load_py(path)": "the loader of each config file, by suffix",
    "Config._<layer> and Config._<file layer>_path": "each layer's data (_defaults, _collection, _system, ...) and "
    "file, in the order Config.merge reads them",
    "Program.core[0].args['help']": "the core --help value parse_cleanup prints a task's help from",
    "ParseError.context": "the task context a parse error happened in",
}


def _reason(exc: BaseException, limit: int = 160) -> str:
    return printable(excerpt(str(exc) or type(exc).__name__, limit))


def _file_loaded(load, path):
    """``load(path)``, Invoke's loader for the file's suffix; a file that cannot be used is one line, exit 2."""
    try:
        data = load(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise  # Invoke's "no such file": that layer is empty
        raise Exit(
            f"gpulab: config file {path}: cannot be read ({exc.strerror or _reason(exc)})", code=BAD_INPUT
        ) from None
    except Exception as exc:  # any parse failure of a user's file (RecursionError too)
        raise Exit(
            f"gpulab: config file {path}: not readable as a config file ({_reason(exc)})", code=BAD_INPUT
        ) from None
    if data is not None and not isinstance(data, dict):
        raise Exit(
            f"gpulab: config file {path}: holds a {type(data).__name__}, not a mapping of settings", code=BAD_INPUT
        )
    return data


# Invoke's layers above the collection's, lowest first (Config.merge): name, what a user knows it as (files)
LAYERS = (
    ("system", "/etc/invoke.yaml"),
    ("user", "~/.invoke.yaml"),
    ("project", "invoke.yaml"),
    ("env", None),
    ("runtime", "invoke -f FILE"),
    ("overrides", None),
)


def layers(cfg: Config) -> list[tuple[str, str, object]]:
    """``cfg``'s layers above gpulab's defaults, lowest first: (name, its file or what it is known as, its data)."""
    found = vars(cfg)  # Config keeps its layers as real attributes, not settings
    return [
        (name, str(found.get(f"_{name}_path") or known_as or name), found.get(f"_{name}")) for name, known_as in LAYERS
    ]


INVOKE_TEXT = ("collection_name", "search_root", "executor_class")  # Invoke's tasks.* its Program takes as text


def layer_problem(cfg: Config) -> str | None:
    """The first file layer whose ``gpulab:`` section does not fit the schema (or that gives Invoke's ``tasks.``
    INVOKE_TEXT a value that is not text), as one line naming the file; None if all fit. Each is checked on its
    own, before Invoke merges them."""
    for name, where, data in layers(cfg):
        if dict(LAYERS)[name] is None or not isinstance(data, Mapping):
            continue
        tasks = data.get("tasks") if isinstance(data.get("tasks"), Mapping) else {}
        for key in INVOKE_TEXT:
            if tasks.get(key) is not None and not isinstance(tasks[key], str):
                return f"config file {where}: tasks.{key}: {excerpt(repr(tasks[key]), 40)} is not a text"
        if "gpulab" not in data:
            continue
        try:
            config.conform_layer(data["gpulab"], where)
        except ConfigError as exc:
            return exc.message
    return None


def _clash(below: dict, data: dict, prefix: str = ""):
    """The first key that is a mapping on one side and a value on the other (what Invoke's merge refuses)."""
    for key, value in data.items():
        if key not in below:
            continue
        if isinstance(value, dict) and isinstance(below[key], dict):
            found = _clash(below[key], value, f"{prefix}{key}.")
            if found:
                return found
        elif isinstance(value, dict) != isinstance(below[key], dict):
            return f"{prefix}{key}", below[key], value
    return None


def merge_clash(cfg: Config) -> str | None:
    """Why Invoke's merge fails (AmbiguousMergeError), as one line naming the layer's file and the key
    (``run: 5`` over Invoke's ``run`` settings); None if no layer clashes. The layers are merged in Config.merge's
    order with Invoke's own merge_dicts."""
    found = vars(cfg)
    merged: dict = {}
    base = [
        ("defaults", "Invoke's defaults", found.get("_defaults")),
        ("collection", "tasks.py's configuration", found.get("_collection")),
    ]
    for name, where, data in [*base, *layers(cfg)]:
        if not isinstance(data, Mapping):
            continue
        clash = _clash(merged, data)
        if clash:
            key, below, value = clash
            kind = "config file" if dict(LAYERS).get(name) else "config"
            said = (
                f"{printable(excerpt(repr(value), 40))} where Invoke's {key} is a mapping of settings (set "
                f"the keys inside it)"
                if isinstance(below, dict)
                else f"a mapping where Invoke's {key} is a value ({printable(excerpt(repr(below), 40))})"
            )
            return f"{kind} {where}: {key}: {said}"
        merge_dicts(merged, data)
    return None


def set_in(cfg: Config, parts: tuple) -> str | None:
    """The file (or ``INVOKE_<PARTS>`` variable) of the highest layer above the defaults that sets the key at
    ``parts`` (("gpulab", "results")), whatever its value; None where none does."""
    for name, where, node in reversed(layers(cfg)):
        for part in parts:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            return f"INVOKE_{'_'.join(parts).upper()}" if name == "env" else where
    return None


def set_by(cfg: Config, key: str) -> str | None:
    """``set_in`` for ``gpulab.<key>`` (dotted)."""
    return set_in(cfg, ("gpulab", *key.split(".")))


def load_env(cfg: Config, environ) -> None:
    """Invoke's environment layer, with the ``gpulab`` variables typed by lab.core.config.env_section."""
    cfg.merge()
    prefix = f"{(type(cfg).env_prefix or type(cfg).prefix).upper()}_"  # as Invoke's Config.__init__ makes it
    try:
        gpulab = config.env_section(cfg._config.get("gpulab", {}), environ)
        others = {k: v for k, v in cfg._config.items() if k != "gpulab"}
        env = Environment(config=others, prefix=prefix).load()
    except ConfigError as exc:
        raise Exit(f"gpulab: {exc.message}", code=BAD_INPUT) from None
    except (ValueError, UncastableEnvVar, AmbiguousEnvVar) as exc:
        raise Exit(f"gpulab: environment: {_reason(exc)}", code=BAD_INPUT) from None
    if gpulab:
        env["gpulab"] = gpulab
    cfg._set(_env=env)
    cfg.merge()


class GpulabConfig(Config):
    """Invoke's Config, the same files and variables, each layer's ``gpulab:`` section checked before a merge."""

    prefix = "invoke"  # /etc/invoke.yaml, ~/.invoke.yaml, invoke.yaml beside tasks.py, INVOKE_*

    def merge(self) -> None:
        problem = layer_problem(self)
        if problem:
            raise Exit(f"gpulab: {problem}", code=BAD_INPUT)
        try:
            super().merge()
        except AmbiguousMergeError as exc:  # a key gpulab does not own (run:, tasks:, ...)
            raise Exit(f"gpulab: {merge_clash(self) or 'config: ' + _reason(exc)}", code=BAD_INPUT) from None

    def load_shell_env(self) -> None:
        load_env(self, os.environ)

    def load_runtime(self, merge: bool = True) -> None:
        try:
            super().load_runtime(merge=merge)
        except UnknownFileType as exc:  # `invoke -f settings.txt`
            raise Exit(f"gpulab: config: {_reason(exc, 200)}", code=BAD_INPUT) from None

    def _load_yaml(self, path):
        return _file_loaded(super()._load_yaml, path)

    def _load_yml(self, path):
        return _file_loaded(super()._load_yml, path)

    def _load_json(self, path):
        return _file_loaded(super()._load_json, path)

    def _load_py(self, path):
        return _file_loaded(super()._load_py, path)


def _one_line(step, command: str) -> None:
    """Run a parse step of Invoke's; what it cannot parse is ``gpulab: <what>``, exit 2."""
    try:
        step()
    except ParseError as exc:
        raise Exit(
            f"gpulab: {_reason(exc, 300)} (see `{command} --help` and `{command} --list`)", code=BAD_INPUT
        ) from None
    except ValueError as exc:  # Invoke's int() of a 5,000-digit option value
        raise Exit(
            f"gpulab: an option's value is not a number this command takes ({_reason(exc, 120)})", code=BAD_INPUT
        ) from None
    except Exit as exc:  # `invoke --list NOSUCH`: Invoke says so and exits 1
        if exc.code != 1 or not exc.message:
            raise
        raise Exit(f"gpulab: {' '.join(str(exc.message).split())}", code=BAD_INPUT) from None


class GpulabProgram(Program):
    """Invoke's Program, its parse errors one line and exit 2, TASK --help always the task's help."""

    def run(self, argv=None, exit: bool = True) -> None:
        global _running
        _running = self
        super().run(argv, exit)

    def parse_collection(self) -> None:
        """Invoke's, with no tasks.py in reach (``gpulab`` run outside the checkout) one line, exit 2. Under
        ``invoke`` this step has run before tasks.py adopts the program: Invoke's own message, exit 1."""
        _one_line(super().parse_collection, self.binary_names[0])

    def parse_tasks(self) -> None:
        _one_line(self._parse_tasks_for_help, self.binary_names[0])

    def _parse_tasks_for_help(self) -> None:
        """Invoke's parser gives a task's missing positional argument (``invoke report --help``) or a flag
        waiting for its value (``invoke sweep --name --help``) the next word, ``--help`` included, and the task
        would run with it. Such a value is turned back into what the user asked for: Invoke's help for the task,
        asked as its parser asks it for ``--help`` after a task (the core ``help`` argument holds the task's
        name; parse_cleanup prints it and exits 0)."""
        try:
            super().parse_tasks()
        except ParseError as exc:  # `invoke report --out --help`: the positional is missing after all
            if self._help_asked(getattr(exc, "context", None)):
                self.tasks = []
                return
            raise
        any(self._help_asked(ctx) for ctx in self.tasks)

    def _help_asked(self, ctx) -> bool:
        if ctx is None or not any(arg.value == HELP for arg in ctx.args.values()):
            return False
        self.core[0].args["help"].value = ctx.name
        return True

    def parse_cleanup(self) -> None:
        _one_line(self._cleanup_flushed, self.binary_names[0])

    def execute(self) -> None:
        """Invoke's, with a ``tasks.executor_class`` (Invoke's setting: ``module.Class``, imported here) that names
        no class one line, exit 2, naming the file that set it."""
        path = self.config.tasks.executor_class
        if path is not None:
            module, _, name = path.rpartition(".")
            try:
                found = getattr(import_module(module), name)
            except Exception as exc:  # the user's module: whatever it raises, or no such name
                found = exc
            if not isinstance(found, type):
                where = set_in(self.config, ("tasks", "executor_class"))
                raise Exit(
                    f"gpulab: config tasks.executor_class: {printable(excerpt(repr(path), 60))} names no class "
                    f"Invoke can run tasks with" + (f" ({where})" if where else ""),
                    code=BAD_INPUT,
                )
        super().execute()

    def _cleanup_flushed(self) -> None:
        """Help and --list with their output flushed: a reader that left the pipe (``invoke validate --help |
        head``) ends it quietly, exit 141, as a task ends (lab.core.cli.task_errors)."""
        try:
            try:
                super().parse_cleanup()
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            quiet_stdout()
            raise Exit(code=PIPE_GONE) from None


def quiet_stdout() -> None:
    """Point stdout at /dev/null (its reader is gone), so that the last flush at exit raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


_running: Program | None = None  # the program running the tasks: gpulab's, or Invoke's own once adopted


def adopt(program: Program | None = None) -> None:
    """THE ADAPTER (tasks.py calls it as Invoke loads it): Invoke's own running program (``invoke``,
    ``python -m invoke``: ``invoke.main.program``) and its config go on as GpulabProgram and GpulabConfig.
    Invoke's exact classes only, and only a program that runs (it has made its config): anything else, gpulab's
    own program included, is left as it is."""
    global _running
    if program is None:
        program = getattr(sys.modules.get("invoke.main"), "program", None)
    cfg = vars(program).get("config") if isinstance(program, Program) else None
    if type(program) is not Program or type(cfg) is not Config:
        return
    program.__class__ = GpulabProgram
    object.__setattr__(cfg, "__class__", GpulabConfig)  # Config's own __setattr__ would make it a setting
    _running = program


def config_flag_file() -> str | None:
    """The file of the running program's ``-f/--config`` (Program.args), else None (no program: a library call)."""
    try:
        value = _running.args.config.value
    except (AttributeError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) and value else None


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("gpulab")
    except metadata.PackageNotFoundError:
        return None


def main() -> None:
    """``gpulab``: the tasks of the project folder's tasks.py, as ``invoke`` runs them, through gpulab's
    Program and Config from the start (the files Invoke reads first included)."""
    GpulabProgram(
        name="gpulab", binary="gpulab", binary_names=["gpulab"], version=_version(), config_class=GpulabConfig
    ).run()


if __name__ == "__main__":
    main()
