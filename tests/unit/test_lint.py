"""ansible-lint (production profile) and yamllint over playbooks/ and inventory/,
`ansible-playbook --syntax-check` of the playbooks and of every RedHat-family task file
(the lab hosts are Debian: this is the check those files get here), and ruff over every Python file:
its lint rules (`ruff check`) and its format (`ruff format --check`), both as pyproject.toml sets them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed (it comes with the project's `test` extra)")
    return found


def run(cmd, **kw):
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_NOCOLOR": "1",
        "NO_COLOR": "1",
        **kw.pop("env", {}),
    }
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=600, **kw)


def test_yamllint_passes():
    res = run([tool("yamllint"), "-s", "-f", "parsable", "playbooks", "inventory"])
    assert res.returncode == 0, res.stdout + res.stderr


def test_ansible_lint_production_profile_passes(tmp_path):
    res = run(
        [tool("ansible-lint"), "--profile", "production", "--offline", "--nocolor", "playbooks", "inventory"],
        env={"ANSIBLE_HOME": str(tmp_path / "ansible")},
    )
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-5000:]


def test_syntax_check_of_the_playbooks_and_the_redhat_task_files(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        textwrap.dedent("""\
        all:
          hosts:
            rhel-9:
              ansible_connection: local
              ansible_os_family: RedHat
              ansible_distribution: Rocky
              ansible_distribution_major_version: "9"
              gpulab_os: Rocky 9
              gpulab_stack: current
        """)
    )
    redhat = sorted((REPO / "playbooks" / "roles").glob("*/tasks/RedHat.yml"))
    assert len(redhat) >= 2
    play = tmp_path / "redhat.yml"
    play.write_text(
        "- name: Every RedHat-family task file\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        + "".join(
            f"    - name: Import {p.relative_to(REPO)}\n      ansible.builtin.import_tasks: {p}\n" for p in redhat
        )
    )
    env = {
        "ANSIBLE_HOME": str(tmp_path / "ansible"),
        "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
        "ANSIBLE_LIBRARY": str(REPO / "playbooks" / "library"),
        "ANSIBLE_FILTER_PLUGINS": str(REPO / "playbooks" / "filter_plugins"),
    }
    for playbook in (REPO / "playbooks" / "provision.yml", REPO / "playbooks" / "audit.yml", play):
        res = run([tool("ansible-playbook"), "--syntax-check", "-i", str(inventory), str(playbook)], env=env)
        assert res.returncode == 0, f"{playbook}: {res.stdout}{res.stderr}"
    # a broken RedHat task file is caught (the check is not a formality)
    broken = tmp_path / "broken.yml"
    broken.write_text(redhat[0].read_text().replace("ansible.builtin.", "ansible.builtin.no_such_", 1))
    play.write_text(
        f"- name: Broken\n  hosts: all\n  tasks:\n    - name: Import\n      ansible.builtin.import_tasks: {broken}\n"
    )
    res = run([tool("ansible-playbook"), "--syntax-check", "-i", str(inventory), str(play)], env=env)
    assert res.returncode != 0 and "no_such_" in res.stdout + res.stderr


def test_ruff_check_passes():
    """pyproject's [tool.ruff.lint] rules over every Python file of the project."""
    res = run([tool("ruff"), "check", "--no-cache", "--output-format", "concise", "."])
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]


def test_ruff_check_finds_a_planted_error_and_an_idle_noqa(tmp_path):
    # the rules are live (not a formality): an undefined name, and a noqa that silences nothing, each fail
    planted = tmp_path / "planted.py"
    planted.write_text("import os  # noqa: F401\n\nprint(os.sep, undefined_name)\n")
    res = run(
        [
            tool("ruff"),
            "check",
            "--no-cache",
            "--config",
            str(REPO / "pyproject.toml"),
            "--output-format",
            "concise",
            str(planted),
        ]
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "F821" in res.stdout and "RUF100" in res.stdout, res.stdout


def test_ruff_format_check_passes():
    """Every Python file of the project is as `ruff format` writes it (pyproject's [tool.ruff.format]); a file
    that is not fails here with its name: run `ruff format FILE`."""
    res = run([tool("ruff"), "format", "--check", "--no-cache", "."])
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]


def test_ruff_format_check_finds_a_badly_formatted_file(tmp_path):
    # the check is live (not a formality): a planted file in another layout fails it, the formatter's layout passes
    planted = tmp_path / "planted.py"
    planted.write_text("x = {  'a':1,'b' : [1,2] }\n")
    cmd = [tool("ruff"), "format", "--check", "--no-cache", "--config", str(REPO / "pyproject.toml"), str(planted)]
    res = run(cmd)
    assert res.returncode == 1 and "planted.py" in res.stdout + res.stderr, res.stdout + res.stderr
    planted.write_text('x = {"a": 1, "b": [1, 2]}\n')
    res = run(cmd)
    assert res.returncode == 0, res.stdout + res.stderr
