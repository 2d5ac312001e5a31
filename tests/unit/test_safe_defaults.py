"""Safe by default: no inventory named runs this machine (inventory/local.yml); the example lab's documentation
addresses (RFC 5737, RFC 3849) are refused in one line before anything is contacted; advice carries what the
user's command used (``invoke -f FILE``, ``--inventory PATH``) and works when pasted."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lab.core import advice
from lab.hosts import inventory as inv
from lab.hosts import remote

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "hosts.yml"


def invoke(*args, env=None, cwd=ROOT, timeout=120):
    full = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_GPULAB_")}
    full.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True, env=full, timeout=timeout
    )


@pytest.mark.parametrize(
    "address, documentation",
    [
        ("192.0.2.11", True),
        ("198.51.100.7", True),
        ("203.0.113.255", True),
        ("2001:db8::1", True),
        ("[2001:db8:ffff::2]", True),
        ("::ffff:192.0.2.1", True),
        ("2001:db8::1%eth0", True),
        ("192.0.3.1", False),
        ("10.0.0.1", False),
        ("127.0.0.1", False),
        ("2001:db9::1", False),
        ("r740-01", False),
        ("", False),
        ("198.51.101.1", False),
    ],
)
def test_documentation_ranges(address, documentation):
    assert inv.documentation_address(address) is documentation


def test_the_example_hosts_are_refused_before_any_connection():
    hosts = inv.load(EXAMPLE).select(device="v100")
    with pytest.raises(Exception) as got:
        remote.connect(hosts[0])  # never reaches Fabric: refused on the address alone
    assert "example inventory" in str(got.value) and "--inventory" in str(got.value)
    local = inv.load(ROOT / "inventory" / "local.yml").select()
    inv.refuse_examples(local)  # this machine is never refused


def test_the_default_inventory_is_this_machine():
    from lab.core import settings

    assert settings.default("inventory") == "inventory/local.yml"
    r = invoke("sweep", "--workloads", "ncf", "--scale", "tiny", "--seeds", "1", "--mode", "throughput", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "\nlocalhost " in r.stdout and "r740" not in r.stdout


class Listener:
    """Counts connection attempts to a loopback port that the example inventory is pointed at."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0)
        self.port = self.sock.getsockname()[1]

    def accepted(self) -> int:
        n = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, socket.timeout):
                return n
            conn.close()
            n += 1


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "--host", "r740-01"],
        ["audit", "--device", "t4"],
        ["sweep", "--device", "v100", "--dry-run"],  # the prepared-data probe of a full ttt plan
        ["sweep", "--host", "r740-03", "--workloads", "ncf", "--seeds", "1", "--scale", "tiny", "--name", "x"],
        ["datasets", "--host", "r740-01", "--names", "ncf"],
    ],
)
def test_a_task_on_the_example_lab_is_one_line_and_contacts_nothing(tmp_path, args):
    # the example inventory as shipped, but every host's SSH port is a loopback listener's: a connection to the
    # documentation address would be a time-out, so the port is what a slipped-through attempt would show on
    # (a hostname alias 127.0.0.1 would not be a documentation address; the listener counts the other path)
    listener = Listener()
    data = yaml.safe_load(EXAMPLE.read_text())
    data.setdefault("all", {}).setdefault("vars", {})["ansible_port"] = listener.port
    example = tmp_path / "hosts.yml"
    example.write_text(yaml.safe_dump(data))
    for d in ("group_vars", "host_vars"):
        if (EXAMPLE.parent / d).exists():
            (tmp_path / d).symlink_to(EXAMPLE.parent / d)
    started = time.monotonic()
    r = invoke(
        *args,
        "--inventory",
        str(example),
        env={
            "INVOKE_GPULAB_RESULTS": str(tmp_path / "results"),
            "INVOKE_GPULAB_ARTIFACTS": str(tmp_path / "artifacts"),
            "HOME": str(tmp_path),
        },
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "documentation address" in lines[0] and "this is the example inventory" in lines[0]
    assert "--inventory FILE" in lines[0] and "gpulab.inventory" in lines[0]
    assert "Traceback" not in r.stderr and time.monotonic() - started < 60
    assert listener.accepted() == 0
    assert not (tmp_path / "results").exists() and not (tmp_path / "artifacts").exists()


def test_advice_carries_the_settings_file_and_the_inventory():
    try:
        advice.remember(config="lab settings.yml", inventory="inv/my lab.yml")
        assert (
            advice.carry("x `invoke datasets --host a --names ncf` y")
            == "x `invoke -f 'lab settings.yml' datasets --host a --names ncf --inventory 'inv/my lab.yml'` y"
        )
        # a task without an inventory gets the -f file only; a command that names its own keeps it
        assert (
            advice.carry("`invoke quarantine.release h:1`") == "`invoke -f 'lab settings.yml' quarantine.release h:1`"
        )
        assert advice.carry("`invoke validate --inventory other.yml`").endswith("validate --inventory other.yml`")
        advice.remember()
        assert advice.carry("`invoke history.import results`") == "`invoke history.import results`"
    finally:
        advice.remember()


def test_printed_advice_works_when_pasted(tmp_path):
    """A release refused for want of a validate: the advised `invoke validate` carries -f and the inventory."""
    settings = tmp_path / "lab.yml"
    settings.write_text(
        yaml.safe_dump(
            {"gpulab": {"results": str(tmp_path / "results"), "inventory": str(ROOT / "inventory" / "local.yml")}}
        )
    )
    r = invoke("-f", str(settings), "quarantine.add", "localhost", "--reason", "test")
    assert r.returncode == 0, r.stderr
    r = invoke("-f", str(settings), "quarantine.release", "localhost")
    assert r.returncode == 1
    line = r.stderr.strip()
    advised = line.split("`")[1]
    assert advised == f"invoke -f {shlex.quote(str(settings))} validate --host localhost", line  # -f names it
    # pasted (as --help, so that nothing runs): Invoke parses it as it stands
    words = shlex.split(advised)
    pasted = invoke(*words[1:], "--help")
    assert pasted.returncode == 0 and "--inventory" in pasted.stdout, pasted.stderr
    # provisioning this machine asks for the inventory to be named (the README's lines never provision it)
    r = invoke("provision")
    assert r.returncode == 2 and "no inventory was named" in r.stderr
    assert "`invoke provision --inventory inventory/local.yml`" in r.stderr
