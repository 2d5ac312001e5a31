"""The documents' command lines and tables against the code: every `invoke TASK --option` (and `gpulab TASK`)
in README.md, runner/README.md, benchmarks/recorded/README.md and playbooks/README.md names a task and options
it has; README's inventory table has a row for each gpulab_* variable of lab/schemas/hostvars.schema.json and
no other; its layout table names every lab package and every `python -m runner` command. In-process: tasks.py
is loaded once, nothing runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tasksfile

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "runner/README.md", "benchmarks/recorded/README.md", "playbooks/README.md")
README = (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def task_options() -> dict[str, set[str]]:
    """Each task's name (and its collection's default name, `invoke history`) -> its option spellings."""
    module = tasksfile.load("gpulab_tasks_for_docs")
    found: dict[str, set[str]] = {}

    def walk(coll, prefix=""):
        for name, t in coll.tasks.items():
            opts = {"--help"}
            for arg in t.get_arguments():
                opts |= {("--" if len(n) > 1 else "-") + n.replace("_", "-") for n in arg.names}
            found[prefix + name] = opts
            if coll.default == name and prefix:
                found[prefix.rstrip(".")] = opts
        for sub_name, sub in coll.collections.items():
            walk(sub, prefix + sub_name + ".")

    walk(module.ns)
    return found


def commands(text: str):
    """(task, the rest of its command line) of every `invoke TASK ...`/`gpulab TASK ...` in a document: inline
    code up to its closing backtick, a code block's line up to a comment."""
    for m in re.finditer(r"(?<![\w./-])(?:invoke|gpulab) ([a-z][a-z_.-]*)([^`\n]*)", text):
        yield m.group(1), m.group(2).split(" #")[0]


@pytest.mark.parametrize("doc", DOCS)
def test_every_documented_option_exists(doc, task_options):
    wrong = []
    for task, rest in commands((ROOT / doc).read_text()):
        if task not in task_options:
            if task in {"sweep", "validate"}:
                wrong.append(f"no task {task}")
            continue  # prose ("gpulab never picks them")
        for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", rest):
            if flag not in task_options[task]:
                wrong.append(f"invoke {task}{rest}: {flag}")
    assert not wrong, wrong


def test_documented_tasks_exist(task_options):
    """A task named after `invoke` in inline code or a code block is a task (`invoke quarantine list` was not)."""
    named = {m.group(1) for m in re.finditer(r"(?<![\w./-])invoke ([a-z][a-z_.-]*)", README)}
    assert named <= set(task_options), sorted(named - set(task_options))
    assert not re.search(r"invoke quarantine \[?list", README)


def table_rows(text: str, header: str) -> list[str]:
    lines = text.split(header, 1)[1].splitlines()[2:]
    return [line for line in lines[: next(i for i, x in enumerate(lines) if not x.startswith("|"))]]


def test_inventory_table_is_the_hostvars_schema():
    schema = json.loads((ROOT / "lab/schemas/hostvars.schema.json").read_text())
    rows = {re.match(r"\| `(\w+)`", r).group(1) for r in table_rows(README, "| variable | meaning |")}
    assert rows == set(schema["properties"]), rows ^ set(schema["properties"])


def test_layout_names_every_package_and_runner_command():
    layout = {re.match(r"\| `([^`]+)`", r).group(1): r for r in table_rows(README, "| path | holds |")}
    packages = {p.name for p in (ROOT / "lab").iterdir() if (p / "__init__.py").exists()}
    assert all(f"`{p}`" in layout["lab/"] for p in packages), packages
    said = re.search(r"python -m runner \{([a-z,]+)\}", layout["runner/"]).group(1).split(",")
    shown = subprocess.run(
        [sys.executable, "-m", "runner", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert sorted(said) == sorted(re.findall(r"^    ([a-z]+)  ", shown, re.M)), (said, shown)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode == 0:  # a copy without .git (a device machine's) has no list of tracked folders
        top = {f.split("/", 1)[0] + "/" for f in tracked.stdout.splitlines() if "/" in f}
        assert top <= set(layout), top - set(layout)


def headings(doc: str) -> list[str]:
    return [line.lstrip("#").strip() for line in (ROOT / doc).read_text().splitlines() if line.startswith("#")]


@pytest.mark.parametrize("doc", (*DOCS, "lab/sweep/compiled.py", "lab/sweep/pilot.py"))
def test_section_references_name_a_section(doc):
    """`README "Sweeps"`, `runner/README "Compiled kernels"`: a section of that name (a heading's start) exists."""
    text = (ROOT / doc).read_text()
    wrong = []
    for m in re.finditer(r'(runner/README|README)(?:\.md)?,? \(?"([^"]{1,60})"', text):
        target = "runner/README.md" if m.group(1).startswith("runner") else "README.md"
        name = " ".join(m.group(2).split())
        if not any(h.startswith(name) or h.startswith(f'"{name}') for h in headings(target)):
            wrong.append(f"{m.group(0)}: no such section in {target}")
    assert not wrong, wrong


def test_short_flag_list_is_cli_short_flags():
    from lab.core import cli

    said = dict(re.findall(r"`-([a-z])` ([a-z-]+)", README.split("a short flag\nmeans one option", 1)[1][:800]))
    assert said == {s: k.replace("_", "-") for k, s in cli.SHORT_FLAGS.items()}


def test_runner_command_line_block_is_the_runners_options():
    """runner/README "Command line": each command's options as `python -m runner CMD --help` has them, all of them."""
    block = (ROOT / "runner/README.md").read_text().split("## Command line", 1)[1].split("```", 2)[1]
    said: dict[str, set[str]] = {}
    cmd = None
    for line in block.splitlines():
        if line.startswith("python -m runner "):
            cmd = line.split()[3]
        if cmd and not cmd.startswith("-"):
            code = line.split("  #", 1)[0] if line.startswith("python") else line.split("#", 1)[0]
            said.setdefault(cmd, set()).update(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", code))
    assert {"run", "list", "probe", "health"} <= set(said)
    for cmd, flags in said.items():
        shown = subprocess.run(
            [sys.executable, "-m", "runner", cmd, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
        ).stdout
        options = set(re.findall(r"^  (?:-\w, )?(--[a-z][a-z0-9-]*)", shown, re.M)) - {"--help"}
        assert flags == options, (cmd, flags ^ options)
