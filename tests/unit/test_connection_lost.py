"""A host's connection that dies under a command (its sshd killed, the host rebooted) is a lost connection,
never the command's answer: paramiko gives such a command the exit code -1 (no exit status came), and the sweep
read a launch cut off this way as "`mkdir ...` exited -1: 71", a failed start of a run that was in fact going on
the host (and retried nothing). Once the connection is back, the launch tried again starts nothing twice.

Real SSH: the paramiko server of tests/unit/sshserver.py on 127.0.0.1, told to drop a command's connection (or
only its channel) after the command ended and before its exit status."""

from __future__ import annotations

import os
import secrets
import signal
from types import SimpleNamespace

import pytest

from lab.core.errors import HostError, RunError
from lab.hosts import remote as rmt
from lab.sweep import hostrun
from lab.sweep.hostrun import Settings
from lab.sweep.node import Node, launch
from tests.unit import sshserver
from tests.unit.localhost import local_host


@pytest.fixture
def sshd(tmp_path):
    with sshserver.serve(tmp_path) as (host, server):
        yield host, server


def test_a_command_whose_connection_dies_is_a_lost_connection_not_an_exit_code(sshd):
    host, server = sshd
    server.drop["printf half"] = "connection"
    with rmt.connect(host) as r:
        with pytest.raises(HostError) as err:
            r.run("printf half; exit 0", check=False)
    assert err.value.message == f"here (127.0.0.1:{host.port}): connection lost while `printf` ran"
    with rmt.connect(host) as again:  # the host itself answers once connected anew
        assert again.run("echo back").stdout == "back\n"


def test_a_command_without_exit_status_on_a_live_connection_is_its_own_failure(sshd):
    """sshd's exit-signal (a command killed by a signal) also reaches paramiko as -1: the connection is fine,
    the command failed; no reconnect, no lost host."""
    host, server = sshd
    server.drop["printf killed"] = "channel"
    with rmt.connect(host) as r:
        assert r.run("printf killed", check=False).code == -1
        server.drop["printf killed"] = "channel"
        with pytest.raises(RunError) as err:
            r.run("printf killed")
        assert not isinstance(err.value, HostError) and "exited -1" in err.value.message
        assert r.run("echo still here").stdout == "still here\n"


def _tagged(tmp_path, token: str) -> list[int]:
    return hostrun.tagged_alive(rmt.LocalRemote(local_host(tmp_path)), token)


def test_a_launch_whose_connection_died_after_it_started_the_runner_starts_it_once(sshd, tmp_path):
    host, server = sshd
    runner = tmp_path / "python"  # the host's runner interpreter: a runner that runs until killed
    runner.write_text("#!/bin/sh\nexec sleep 120\n")
    runner.chmod(0o755)
    token = f"gl-test-{secrets.token_hex(6)}"
    run = SimpleNamespace(run_id="ncf-ttt-tiny-cpu-s1", token=token)
    server.drop[token] = "connection"  # the first launch's connection dies after `echo $!`
    remote = rmt.connect(host)
    node = Node(host, remote, rmt.RunnerInstall(str(runner), "", "0", False), Settings(reconnect_s=20), "s1")
    try:
        pid = launch(run, node, ["run", "ncf"])
        assert pid is None  # followed by its token, as an adopted run
        assert len(_tagged(tmp_path, token)) == 1
        assert sorted(os.listdir(tmp_path / "sweeps" / "s1")) == [f"{run.run_id}.launch.log"]  # nothing moved aside
        assert node.call(lambda r: hostrun.run_state(r, node.layout.run_dir(run), token, "", pid)) == "running"
    finally:
        for p in _tagged(tmp_path, token):
            os.kill(p, signal.SIGKILL)
        node.remote.close()
