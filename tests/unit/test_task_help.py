"""`invoke TASK --help` is Invoke's help for every task and writes nothing; output into a closed pipe ends quietly.

Invoke's parser hands a task's missing positional argument the next word, ``--help`` included
(``invoke report --help`` ran the report on a path named ``--help``); lab.core.program's GpulabProgram turns
such a value back into Invoke's per-task help. The last tests hold Invoke to what that relies on, so that an Invoke release
that changes it fails here rather than in a user's terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Program
from invoke.exceptions import ParseError
from invoke.parser import Argument, Parser, ParserContext

ROOT = Path(__file__).resolve().parents[2]

# one interpreter runs `invoke TASK --help` (and `invoke TASK --OPTION --help` for a task's first value option)
# for every task, each through a fresh Program, as the `invoke` script builds it
LOOP = r"""
import contextlib, io, json, sys
import invoke.main
from invoke import Program
from invoke.main import program as first

def run(argv):
    p = Program(version=first.version, binary=first._binary, binary_names=first._binary_names)
    invoke.main.program = p
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            p.run(["invoke", "--search-root", sys.argv[1], *argv])
        except SystemExit as exc:
            code = exc.code or 0
    return {"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue()}

listing = run(["--list", "--list-format", "json"])
names = []
def walk(coll, prefix=""):
    for t in coll["tasks"]:
        names.append(prefix + t["name"])
    for sub in coll["collections"]:
        walk(sub, prefix + sub["name"] + ".")
walk(json.loads(listing["out"]))
got = [run([name, "--help"]) for name in names]
got += [run(["report", "--out", "--help"]), run(["sweep", "--name", "--help"]),
        run(["history.page", "--help", "--host", "x"])]
print(json.dumps(got))
"""


@pytest.fixture(scope="module")
def helps(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("help-cwd")
    before = git_status()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    p = subprocess.run(
        [sys.executable, "-c", LOOP, str(ROOT)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT), "HOME": str(cwd)},
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), cwd, before


def git_status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_every_task_help_is_invokes_help_and_writes_nothing(helps):
    got, cwd, before = helps
    names = [g["argv"][0] for g in got]
    assert {
        "report",
        "history.page",
        "quarantine.add",
        "quarantine.release",
        "collect",
        "sweep",
        "validate",
        "demo",
        "history.import",
    } <= set(names)
    for g in got:
        task = g["argv"][0]
        assert g["code"] == 0 and g["err"] == "", g
        assert g["out"].startswith(f"Usage: inv[oke] [--core-opts] {task} [--options]"), g["out"][:200]
        assert "Options:" in g["out"]
    assert [p.name for p in cwd.iterdir()] == []  # no report/, no file named --help
    assert git_status() == before


@pytest.mark.parametrize("args", [["validate", "--help"], ["report", "--help"], ["--list"]])
def test_a_closed_pipe_ends_quietly(tmp_path, args):
    """`invoke validate --help | head`: the reader is gone before the help is written."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------- what gpulab relies on


def test_invokes_parser_still_gives_a_missing_positional_the_help_word():
    """The behaviour lab.core.program corrects; should Invoke stop doing it, this says the correction can go."""
    ctx = ParserContext(name="report", args=[Argument(names=("path",), positional=True)])
    init = ParserContext(args=[Argument(names=("help", "h"), optional=True)])
    result = Parser(contexts=[ctx], initial=init).parse_argv(["report", "--help"])
    assert result[1].name == "report" and result[1].args["path"].value == "--help"
    # a flag before it took the word instead: the ParseError for the missing positional names its context
    ctx = ParserContext(name="report", args=[Argument(names=("path",), positional=True), Argument(names=("out",))])
    with pytest.raises(ParseError) as missing:
        Parser(contexts=[ctx], initial=init).parse_argv(["report", "--out", "--help"])
    assert missing.value.context.name == "report" and missing.value.context.args["out"].value == "--help"


def test_invokes_program_shows_task_help_from_the_core_help_value(capsys):
    """What GpulabProgram sets (the core ``help`` argument to the task's name, after parse_tasks) is what Invoke's
    parse_cleanup prints per-task help from; Program.tasks holds the parsed contexts with their args."""
    from invoke import Collection, Exit, task

    @task(help={"path": "a path"})
    def report(c, path):
        """Report."""

    program = Program(namespace=Collection(report))
    program.create_config()
    program.parse_core(["invoke", "report", "--help"])
    program.parse_collection()
    program.parse_tasks()
    assert [t.name for t in program.tasks] == ["report"] and program.tasks[0].args["path"].value == "--help"
    assert program.core[0].args["help"].value is None  # Invoke took it as the path: no help asked
    program.core[0].args["help"].value = "report"
    with pytest.raises(Exit) as done:
        program.parse_cleanup()
    assert done.value.code == 0 and "Usage: " in capsys.readouterr().out and program.args.help.value == "report"
    assert callable(Program.parse_tasks) and callable(Program.parse_cleanup) and callable(Program.print_task_help)


def test_a_short_flag_means_one_option_in_every_task():
    """-u is --url wherever it exists (it was --until in `invoke history`); every short flag is gpulab's table's,
    given through Invoke's documented ``@task(klass=...)`` and Task.arg_opts."""
    import tasksfile

    from lab.core import cli

    module = tasksfile.load("gpulab_tasks_for_flags")
    seen: dict[str, set[str]] = {}

    def walk(coll):
        for t in coll.tasks.values():
            assert isinstance(t, cli.GpulabTask), t.name
            for arg in t.get_arguments():
                long, *short = arg.names
                for s in short:
                    seen.setdefault(s, set()).add(long)
        for sub in coll.collections.values():
            walk(sub)

    walk(module.ns)
    assert all(len(longs) == 1 for longs in seen.values()), seen
    table = {s: k.replace("_", "-") for k, s in cli.SHORT_FLAGS.items()}
    assert {s: longs.pop() for s, longs in seen.items()} == {s: table[s] for s in seen}
    assert {"u", "h", "i", "n", "r"} <= set(seen) and table["u"] == "url"
