"""The invoke command line: tasks, their help, config layering and exit codes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKS = {"provision", "sweep", "collect", "report", "validate", "audit", "demo", "datasets", "tune"}


def invoke(*args, env=None):
    full_env = dict(
        os.environ, INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"), **(env or {})
    )  # the example lab (never contacted)
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, env=full_env, timeout=120
    )


def test_list_shows_every_task_with_one_line_help():
    out = invoke("--list").stdout
    listed = {
        line.split()[0]
        for line in out.splitlines()[1:]
        if line.strip() and line.startswith("  ") and not line.startswith("    ")
    }
    assert TASKS <= listed


def test_every_task_argument_has_help_in_every_load_of_tasks_py():
    """Each load of tasks.py (Invoke's loader, as a Program run or a test loads it) has every task with a one-line
    docstring and help for each argument, also after an earlier load's namespace was parsed. Invoke's
    get_arguments pops each argument's help from the Task it builds a parser for (Collection.to_contexts), so
    tasks.py makes new Task objects each time it loads: the host and history tasks too, whose functions live in
    lab.commands (made once at import, a second load had them without help)."""
    from invoke import FilesystemLoader

    for load in (1, 2):
        module, _ = FilesystemLoader(start=str(ROOT)).load("tasks")
        names = set(module.ns.task_names)
        assert TASKS | {"history.import", "history.show", "quarantine.add"} <= names
        for ctx in module.ns.to_contexts():  # as Invoke builds its parser
            bare = sorted(arg.name for arg in ctx.args.values() if not arg.help)
            assert not bare, f"load {load}, task {ctx.name}: no help for {bare}"
            doc = module.ns[ctx.name].__doc__
            assert doc and len(doc.strip().splitlines()) == 1, (ctx.name, doc)


@pytest.mark.parametrize(
    "args, message",
    [
        (["sweep", "--device", "a100", "--dry-run"], "unknown device group 'a100'"),
        (["sweep", "--host", "r740-09", "--dry-run"], "unknown host 'r740-09'"),
        (["sweep", "--device", "t4", "--gpus", "5", "--dry-run"], "--gpus: 5 GPUs asked but r740-01 has 4"),
        (["sweep", "--limit", "nothing*", "--dry-run"], "pattern 'nothing*' matches no host"),
        (["sweep", "--inventory", "inventory/missing.yml", "--dry-run"], "inventory/missing.yml: inventory not found"),
        (["sweep", "--workloads", "ncf;reboot", "--dry-run"], "is not a workload name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = invoke(*args)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("gpulab: ")
    assert "Traceback" not in r.stderr


def test_defaults_come_from_invoke_config_and_env_overrides():
    # the declared defaults: the reference study (all six, auto seeds: one run each in throughput mode, every GPU count);
    # throughput mode reads no prepared data, so the dry run contacts no host
    plan = invoke("sweep", "--device", "v100", "--mode", "throughput", "--dry-run").stdout
    assert "  transformer  GPUs 1,2,3    x   1 seed(s)     3 runs" in plan
    throughput = {"INVOKE_GPULAB_MODE": "throughput", "INVOKE_GPULAB_WORKLOADS": "ncf"}
    plan = invoke("sweep", "--device", "v100", "--dry-run", env={"INVOKE_GPULAB_SEEDS": "2", **throughput}).stdout
    assert "  ncf          GPUs 1,2,3    x   2 seed(s)     6 runs" in plan and "resnet50" not in plan
    plan = invoke(
        "sweep", "--device", "v100", "--dry-run", "--seeds", "3", env={"INVOKE_GPULAB_SEEDS": "2", **throughput}
    ).stdout
    assert "x   3 seed(s)" in plan  # the command line beats the environment


@pytest.mark.parametrize(
    "args, message",
    [
        (["tune", "ncf", "--trials", "abc"], "--trials: 'abc' is not a whole number"),
        (["tune", "ncf", "--device", "t4", "--gpus", "9"], "--gpus: 9 GPUs asked but r740-01 has 4"),  # tune's last
        (["sweep", "--device", "t4", "--gpus", "5"], "--gpus: 5 GPUs asked but r740-01 has 4"),  # run_sweep's plan
    ],
)
def test_bad_tune_and_sweep_options_are_refused_before_optuna_and_sqlalchemy_load(tmp_path, args, message):
    """`invoke tune` and `invoke sweep` check their options before they load Optuna and SQLAlchemy (0.3-0.5 CPU s
    of every refusal; a sweep opens the history's side once run_sweep accepted its plan and preflight): one line,
    exit 2, nothing written, and neither module imported (Python's -X importtime list)."""
    env = dict(
        os.environ,
        INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"),
        INVOKE_GPULAB_RESULTS=str(tmp_path / "results"),
    )
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "invoke", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    lines = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("import time:")]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr[-2000:]
    assert f"lab.commands.{args[0]}" in imported and not imported & {"optuna", "sqlalchemy", "alembic"}, r.stderr[-300:]
    assert list(tmp_path.iterdir()) == []
