"""Hostile inventories through the command line: each is one line naming the file, the host and the key, exit 2,
nothing written, nothing contacted.

The hosts are this machine's loopback on port 1 (nothing listens there): a value that slipped through would at
most be refused by it. The tasks are a sweep's dry run at the tiny scale (no host is asked anything) and audit
(which refuses a host without gpulab_os before it connects), so no case reaches a host either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRY = ["sweep", "--dry-run", "--scale", "tiny", "--workloads", "ncf", "--seeds", "1"]


def host(name: str = "h1", **extra: str) -> str:
    """One host of a YAML inventory, its variables given as YAML text (``ansible_host`` defaults to loopback)."""
    lines = {
        k: v
        for k, v in {
            "ansible_host": "127.0.0.1",
            "ansible_port": "1",
            "gpulab_gpu_model": "T4",
            "gpulab_gpu_count": "2",
            "gpulab_stack": "current",
        }.items()
        if k not in extra
    } | extra  # in the order given: an alias's anchor comes first
    return f"all:\n  hosts:\n    {name}:\n" + "".join(f"      {k}: {v}\n" for k, v in lines.items() if v is not None)


# a YAML alias bomb: 9 levels of 9 references, 387 million strings once expanded (or turned into text)
BOMB = {"b0": "&l0 [x, x, x, x, x, x, x, x, x]"} | {
    f"b{i}": f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)
}
DATASETS = ["datasets", "--names", "ncf", "--check"]

CASES = [
    # ssh reads a leading '-' as an option: ProxyCommand would run a command on this machine
    (DRY, host(ansible_host="'-oProxyCommand=touch pwned'"), "host h1: ansible_host: '-oProxyCommand"),
    (DRY, host(ansible_host='"lab\\nhost"'), "host h1: ansible_host: 'lab\\nhost' is not a host name"),
    (DRY, host(ansible_host="''"), "host h1: ansible_host: '' is not a host name"),
    (DRY, host(ansible_host="'a b'"), "host h1: ansible_host: 'a b' is not a host name"),
    (DRY, host(ansible_host="[1, 2]"), "host h1: ansible_host: a list is not a host name"),
    (DRY, host(ansible_user="'-oProxyCommand=x'"), "host h1: ansible_user: '-oProxyCommand=x' is not a user name"),
    (DRY, host(ansible_port="22.7"), "host h1: ansible_port 22.7 is not a port"),
    (DRY, host(ansible_port="true"), "host h1: ansible_port True is not a port"),
    (DRY, host(ansible_ssh_common_args='"-o \'UserKnownHostsFile=x"'), "No closing quotation"),
    (DRY, host(gpulab_gpu_model="A100x"), "host h1: gpulab_gpu_model 'A100x' is not 'auto' nor a GPU model"),
    (DRY, host(gpulab_gpu_model='"T4\\nx"'), "host h1: gpulab_gpu_model 'T4\\nx' is not"),
    # a template is a program, rendered while the input is checked: 10 GB asked, or 10**9 list items
    (DRY, host(gpulab_gpu_model="\"{{ 'x' * 10**10 }}\""), "host h1: gpulab_gpu_model: cannot template"),
    (DRY, host(gpulab_stack='"{{ range(10**9) | list | length }}"'), "host h1: gpulab_stack: cannot template"),
    (DRY, host(ansible_host='"{{ 10**9 * [1] }}"'), "(needs more than 512 MB to render)"),
    # JSON Schema's $ ends the text (Python's also matched before a final newline); a mirror is one URL
    (DRY, host(gpulab_stack='"current\\n"'), "host h1: gpulab_stack: 'current\\n' does not match"),
    (DRY, host(gpulab_mirror='"http://m/ stable main"'), "host h1: gpulab_mirror: 'http://m/ stable main' does not"),
    (DRY, host(ansible_host='"h1\\n"'), "host h1: ansible_host: 'h1\\n' is not a host name"),
    (["audit"], host('"h1\\n"'), "host: 'h1\\n' is not a host name"),
    # one word: the runner is started as [gpulab_python, -m, runner, ...], so 'python3 -X dev' never starts
    (DRY, host(gpulab_python="'python3 -X dev'"), "host h1: gpulab_python: 'python3 -X dev' does not match"),
    (DRY, host(gpulab_python="'-c'"), "host h1: gpulab_python: '-c' does not match"),
    # datasets' own host variables: a bomb is refused by its kind, never turned into text (a MemoryError traceback)
    (DATASETS, host(**BOMB, datasets_storage="*l9"), "host h1: datasets_storage a list: use one of copy, shared"),
    (DATASETS, host(**BOMB, datasets_origins="{grouplens: *l9}"), "host h1: datasets_origins.grouplens: a list is"),
    (DATASETS, host(datasets_origins="{grouplens: 'http://m/ x'}"), "datasets_origins.grouplens: 'http://m/ x' is not"),
    # Ansible's own variables that gpulab reads: an alias bomb is named by its kind, never turned into text
    (DRY, host(**BOMB, ansible_connection="*l9"), "host h1: ansible_connection a list is not supported"),
    (DRY, host(**BOMB, ansible_ssh_common_args="*l9"), "host h1: ansible_ssh_common_args a list is not text"),
    (DRY, host(**BOMB, ansible_port="*l9"), "host h1: ansible_port a list is not a port"),
    (DRY, host(**BOMB, ansible_host="*l9"), "host h1: ansible_host: a list is not a host name"),
    # the last of two values silently won
    (DRY, host(gpulab_gpu_count="1\n      gpulab_gpu_count: 2"), "gives key 'gpulab_gpu_count' twice"),
    # a host name is a folder of results/<sweep>/ and of validate's output: every task checks it
    (["audit"], host("'..'"), "host: '..' is not a host name"),
    (["audit"], host("'-x'"), "host: '-x' is not a host name"),
    (["audit"], host("'a;touch x'"), "host: 'a;touch x' is not a host name"),
    (["audit"], host('"a\\nb"'), "host: 'a\\nb' is not a host name"),
]


@pytest.mark.parametrize("args, text, message", CASES, ids=[m[:50] for _, _, m in CASES])
def test_a_hostile_inventory_is_one_line_exit_2_and_nothing_written(tmp_path, args, text, message):
    inv = tmp_path / "lab.yml"
    inv.write_text(text)
    home = tmp_path / "home"
    home.mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HOME=str(home),
        INVOKE_GPULAB_RESULTS=str(tmp_path / "results"),
        INVOKE_GPULAB_ARTIFACTS=str(tmp_path / "artifacts"),
    )
    p = subprocess.run(
        [sys.executable, "-m", "invoke", *args, "--inventory", str(inv)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]
    assert p.returncode == 2, f"exit {p.returncode}: {p.stdout[-1500:]}{p.stderr[-1500:]}"
    assert len(lines) == 1 and lines[0].startswith(f"gpulab: {inv}: ") and message in lines[0], p.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "artifacts").exists()
    assert not (ROOT / "pwned").exists() and {q.name for q in home.iterdir()} <= {".ansible"}


@pytest.fixture
def quick(monkeypatch):
    from lab.hosts import templating

    monkeypatch.setattr(templating, "SECONDS", 1)
    return templating


LOOP = "{{ '' }}{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}T4"


@pytest.mark.parametrize(
    "value, why",
    [
        (LOOP, "cannot template (takes more than 1 s"),  # of CPU, or of wall clock on a loaded machine
        ("{{ 'x' * 3000000 }}", "cannot template (renders to more than 1024 KB)"),
    ],
)
def test_a_template_that_runs_long_or_renders_large_is_refused_in_bounds(tmp_path, quick, value, why):
    from lab.core.errors import ConfigError
    from lab.hosts import inventory

    inv = tmp_path / "lab.yml"
    inv.write_text(host(gpulab_gpu_model=repr(value).replace("\\'", "''")))
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as exc:
        inventory.load(inv).select()
    assert time.monotonic() - t0 < 10, "not bounded"
    assert exc.value.message.startswith(f"{inv}: host h1: gpulab_gpu_model: {why}"), exc.value.message


def test_a_template_within_bounds_renders_as_ansible_renders_it(tmp_path, quick):
    from lab.hosts import inventory

    inv = tmp_path / "lab.yml"
    inv.write_text(
        host(ansible_user="ops", gpulab_gpu_model="\"{{ 'T' ~ 4 }}\"", gpulab_workdir='"/home/{{ ansible_user }}/g"')
    )
    (h,) = inventory.load(inv).select()
    assert (h.gpu_model, h.workdir) == ("T4", "/home/ops/g")
