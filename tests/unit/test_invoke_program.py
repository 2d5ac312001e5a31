"""gpulab's Invoke program (lab/core/program.py): one behaviour under ``invoke`` and ``gpulab``, and what it relies on.

A small tasks.py in a temporary folder (one task, gpulab's defaults as its collection's configuration, adopt()
called as the project's tasks.py calls it) is run by Invoke's own program (``python -m invoke``) and by gpulab's
(``python -m lab.core.program``, the ``gpulab`` script): the same bad input is the same one line and exit 2 in
both. The last tests hold the Invoke release in use to each thing of RELIES_ON, so that an Invoke that changes
one fails here (pyproject pins the releases checked) rather than in a user's terminal.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Collection, Config, Program, task
from invoke.exceptions import ParseError

from lab.core import program as gp

ROOT = Path(__file__).resolve().parents[2]

TASKS = '''
from invoke import Collection
from lab.core import config
from lab.core.cli import setting, task, task_errors
from lab.core.program import adopt

adopt()


@task(help={"word": "a word"})
@task_errors
def hello(c, word, times=1):
    """Print the config class, a setting and the word."""
    print(type(c.config).__name__, setting(c, "workloads"), word * int(times))


ns = Collection(hello)
ns.configure(config.defaults())
'''

PROGRAMS = {"invoke": [sys.executable, "-m", "invoke"], "gpulab": [sys.executable, "-m", "lab.core.program"]}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("project")
    (folder / "tasks.py").write_text(TASKS)
    return folder


def run(which: str, project: Path, *args: str, home: Path, env=None, project_file: str | None = None):
    (project / "invoke.yaml").unlink(missing_ok=True)
    if project_file is not None:
        (project / "invoke.yaml").write_text(project_file)
    full = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    full.update(PYTHONPATH=str(ROOT), HOME=str(home), **(env or {}))
    return subprocess.run([*PROGRAMS[which], *args], cwd=project, capture_output=True, text=True, env=full, timeout=120)


def one_line(p, code: int = 2) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == code and len(lines) == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert lines[0].startswith("gpulab: ") and len(lines[0]) < 400 and p.stdout == "", lines[0]
    return lines[0]


@pytest.mark.parametrize("which", sorted(PROGRAMS))
def test_both_programs_run_the_task_with_gpulabs_config_and_endings(which, project, tmp_path):
    home = tmp_path
    r = run(which, project, "hello", "ab", "--times", "2", home=home)
    assert r.returncode == 0 and r.stdout == "GpulabConfig all abab\n", r.stdout + r.stderr
    r = run(which, project, "hello", "x", home=home, project_file="gpulab: {workloads: ncf}\n")
    assert r.stdout == "GpulabConfig ncf x\n", r.stderr  # invoke.yaml beside tasks.py, read after adopt()
    usage = {"invoke": "inv[oke]", "gpulab": "gpulab"}[which]
    r = run(which, project, "hello", "--help", home=home)  # the positional would take "--help"
    assert r.returncode == 0 and r.stdout.startswith(f"Usage: {usage} [--core-opts] hello"), r.stdout + r.stderr
    assert "'--stak'" in one_line(run(which, project, "hello", "x", "--stak", home=home))
    line = one_line(run(which, project, "hello", "x", "--times", "9" * 5000, home=home))
    assert line.startswith("gpulab: an option's value is not a number this command takes"), line
    assert one_line(run(which, project, "--list", "nosuch", home=home)) == "gpulab: Sub-collection 'nosuch' not found!"
    line = one_line(run(which, project, "hello", "x", home=home, env={"INVOKE_GPULAB_NOSUCH": "1"}))
    assert line.startswith("gpulab: INVOKE_GPULAB_NOSUCH: names no gpulab setting"), line
    line = one_line(run(which, project, "hello", "x", home=home, project_file="gpulab: {sweep: [1, 2]}\n"))
    assert "config gpulab.sweep: [1, 2] is not of type 'object'" in line, line
    line = one_line(run(which, project, "hello", "x", home=home, project_file="gpulab: [unclosed\n"))
    assert line.startswith(f"gpulab: config file {project / 'invoke.yaml'}: not readable as a config file"), line
    line = one_line(run(which, project, "hello", "x", home=home, project_file="run: 5\n"))  # Invoke's own key
    assert (
        line == f"gpulab: config file {project / 'invoke.yaml'}: run: 5 where Invoke's run is a mapping of "
        "settings (set the keys inside it)"
    ), line
    line = one_line(run(which, project, "hello", "x", home=home, project_file="tasks: {executor_class: nosuch.X}\n"))
    assert (
        line == "gpulab: config tasks.executor_class: 'nosuch.X' names no class Invoke can run tasks with "
        f"({project / 'invoke.yaml'})"
    ), line  # Program.execute would import it: a traceback
    (tmp_path / "run.txt").write_text("gpulab: {}\n")
    line = one_line(run(which, project, "-f", str(tmp_path / "run.txt"), "hello", "x", home=home))
    assert line.startswith("gpulab: config: ") and "run.txt" in line, line


def test_invokes_text_settings_that_are_not_text_are_one_line_naming_the_file(tmp_path):
    """Invoke's Program takes tasks.search_root, collection_name and executor_class as text (``5`` is a traceback
    in its loader); each file layer is checked before the merge."""
    for key in gp.INVOKE_TEXT:
        (tmp_path / "run.yaml").write_text(f"tasks: {{{key}: [5]}}\n")
        cfg = Config(lazy=True, runtime_path=str(tmp_path / "run.yaml"))
        cfg.load_runtime()
        assert gp.layer_problem(cfg) == f"config file {tmp_path / 'run.yaml'}: tasks.{key}: [5] is not a text"
        assert key in Config.global_defaults()["tasks"]


def test_only_gpulab_reaches_the_files_invoke_reads_before_tasks_py(project, tmp_path):
    """~/.invoke.yaml is read as Invoke's program starts: gpulab's Config reads it under ``gpulab``. Under
    ``invoke`` it is read before tasks.py is imported, so no gpulab code is there to make it one line (README
    "Settings"): if an Invoke release reads it later, or offers a hook before it, this fails and says so."""
    (tmp_path / ".invoke.yaml").write_text("- a\n- b\n")
    line = one_line(run("gpulab", project, "hello", "x", home=tmp_path))
    assert line == f"gpulab: config file {tmp_path / '.invoke.yaml'}: holds a list, not a mapping of settings"
    plain = run("invoke", project, "hello", "x", home=tmp_path)
    assert plain.returncode == 1 and "gpulab" not in plain.stderr and "'list' object" in plain.stderr, plain.stderr
    (tmp_path / ".invoke.yaml").write_text("run: {echo: {a: 1}}\n")
    line = one_line(run("gpulab", project, "hello", "x", home=tmp_path))
    assert (
        line == f"gpulab: config file {tmp_path / '.invoke.yaml'}: run.echo: a mapping where Invoke's run.echo "
        "is a value (False)"
    ), line
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    line = one_line(run("gpulab", empty, "--search-root", str(empty), "--list", home=empty))
    assert line == "gpulab: Can't find any collection named 'tasks'!", line


# ------------------------------------------------------------------------- what lab/core/program.py relies on


def test_invokes_own_program_is_a_plain_program_made_with_the_documented_arguments():
    import invoke.main

    assert type(invoke.main.program) is Program
    params = inspect.signature(Program.__init__).parameters
    assert {"name", "binary", "binary_names", "version", "namespace", "config_class"} <= set(params)


def test_program_run_calls_its_steps_on_self_in_order():
    seen = []

    class Recording(Program):
        pass

    for step in (
        "create_config",
        "parse_core",
        "parse_collection",
        "parse_tasks",
        "parse_cleanup",
        "update_config",
        "execute",
    ):

        def wrapped(self, *a, _step=step, **k):
            seen.append(_step)
            return getattr(Program, _step)(self, *a, **k)

        setattr(Recording, step, wrapped)

    @task
    def t(c):
        seen.append("task")

    Recording(namespace=Collection(t)).run(["invoke", "t"], exit=False)
    assert seen == [
        "create_config",
        "parse_core",
        "parse_collection",
        "parse_tasks",
        "parse_cleanup",
        "update_config",
        "execute",
        "task",
    ]
    # a collection loaded from disk is imported before the project file is read (adopt() runs first)
    source = inspect.getsource(Program.load_collection)
    assert source.index("loader.load(") < source.index("self.config.load_project()")


def test_config_keeps_its_data_environment_layer_and_prefixes_where_load_env_finds_them():
    cfg = Config(lazy=True)
    assert isinstance(object.__getattribute__(cfg, "_config"), dict)
    cfg._set(_env={"gpulab": {"x": 1}})
    cfg.merge()
    assert cfg["gpulab"]["x"] == 1 and cfg._config["gpulab"] == {"x": 1}
    assert (Config.prefix, Config.env_prefix, gp.GpulabConfig.prefix) == ("invoke", None, "invoke")
    assert object.__getattribute__(cfg, "_env_prefix") == "INVOKE_"  # what load_env computes from the class
    assert [p for p in inspect.signature(Config.load_shell_env).parameters] == ["self"]
    assert list(inspect.signature(Config.load_runtime).parameters) == ["self", "merge"]


def test_config_keeps_each_layer_and_its_file_where_layers_reads_them(tmp_path):
    (tmp_path / "run.yaml").write_text("gpulab: {seeds: 3}\n")
    cfg = Config(lazy=True, runtime_path=str(tmp_path / "run.yaml"), overrides={"gpulab": {"gpus": "1"}})
    cfg.load_runtime()
    cfg._set(_env={"gpulab": {"nodes": 2}})
    got = {name: (where, data) for name, where, data in gp.layers(cfg)}
    assert got["runtime"] == (str(tmp_path / "run.yaml"), {"gpulab": {"seeds": 3}})
    assert got["env"][1] == {"gpulab": {"nodes": 2}} and got["overrides"][1] == {"gpulab": {"gpus": "1"}}
    assert got["user"][0] == "~/.invoke.yaml"  # not read (lazy): named as the user knows it
    assert (gp.set_by(cfg, "seeds"), gp.set_by(cfg, "nodes")) == (str(tmp_path / "run.yaml"), "INVOKE_GPULAB_NODES")
    assert gp.set_by(cfg, "gpus") == "overrides" and gp.set_by(cfg, "mode") is None
    # lowest first, as Config.merge applies them
    source = inspect.getsource(Config.merge)  # merge_clash takes _defaults and _collection first
    at = [
        source.index(f'"{name}"')
        if name in ("system", "user", "project", "runtime")
        else source.index(f"self._{name})")
        for name in ("defaults", "collection", *dict(gp.LAYERS))
    ]
    assert at == sorted(at) and "merge_dicts(self._config, self._defaults)" in source


@pytest.mark.parametrize("suffix", ["yaml", "yml", "json", "py"])
def test_config_files_are_read_through_the_per_suffix_loader(tmp_path, suffix):
    path = tmp_path / f"run.{suffix}"
    path.write_text({"py": "gpulab = {}\n", "json": '{"gpulab": {}}'}.get(suffix, "gpulab: {}\n"))
    used = []

    class Seeing(Config):
        pass

    base = getattr(Config, f"_load_{suffix}")

    def loader(self, p):
        used.append(p)
        return base(self, p)

    setattr(Seeing, f"_load_{suffix}", loader)
    assert list(inspect.signature(getattr(Config, f"_load_{suffix}")).parameters) == ["self", "path"]
    cfg = Seeing(lazy=True, runtime_path=str(path))
    cfg.load_runtime()
    assert used == [str(path)] and "gpulab" in cfg


def test_adopt_turns_a_running_plain_program_into_gpulabs_keeping_its_data():
    program = Program()
    gp.adopt(program)  # not running yet (no config): left alone
    assert type(program) is Program
    program.create_config()
    program.config["run"]["echo"] = True
    gp.adopt(program)
    assert type(program) is gp.GpulabProgram and type(program.config) is gp.GpulabConfig
    assert program.config.run.echo is True and "__class__" not in program.config
    assert gp.GpulabProgram.parse_tasks is not Program.parse_tasks


def test_the_help_value_and_parse_error_context_are_where_the_program_sets_and_reads_them():
    """GpulabProgram._help_asked sets ``core[0].args['help']``; a ParseError of a task names its ``context``
    (tests/unit/test_task_help.py holds Invoke's parse_cleanup to printing from that value)."""

    @task(help={"path": "a path"})
    def report(c, path):
        """Report."""

    p = gp.GpulabProgram(namespace=Collection(report))
    p.create_config()
    p.parse_core(["invoke", "report", "--help"])
    p.parse_collection()
    p.parse_tasks()
    assert p.core[0].args["help"].value == "report" and p.args.help.value == "report"
    assert "context" in inspect.signature(ParseError.__init__).parameters


def test_every_reliance_is_held_by_a_test_here():
    env = test_config_keeps_its_data_environment_layer_and_prefixes_where_load_env_finds_them
    layers = test_config_keeps_each_layer_and_its_file_where_layers_reads_them
    loaders = test_config_files_are_read_through_the_per_suffix_loader
    helped = test_the_help_value_and_parse_error_context_are_where_the_program_sets_and_reads_them
    covered = {
        "invoke.main.program": test_invokes_own_program_is_a_plain_program_made_with_the_documented_arguments,
        "Program.run": test_program_run_calls_its_steps_on_self_in_order,
        "Config._config, Config._set(_env=...)": env,
        "Config._<layer> and Config._<file layer>_path": layers,
        "Config._load_yaml/_load_yml/_load_json/_load_py(path)": loaders,
        "Program.core[0].args['help']": helped,
        "ParseError.context": helped,
    }
    assert set(covered) == set(gp.RELIES_ON)
