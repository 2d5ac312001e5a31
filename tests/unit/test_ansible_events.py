"""lab.hosts.ansible with plain data: runner events in, per-host summary and host key reasons out."""

from __future__ import annotations

import datetime as dt

import pytest

from lab.hosts import ansible, hostkeys
from lab.core.errors import ConfigError


def ev(name, host, task, **res):
    return {"event": name, "event_data": {"host": host, "task": task, "res": res}}


UNKNOWN = (
    "Failed to connect to the host via ssh: No ED25519 host key is known for 10.213.0.12 and you have "
    "requested strict checking.\r\nHost key verification failed."
)
CHANGED = (
    "Failed to connect to the host via ssh: @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n"
    "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n...Offending ED25519 key in "
    "/tmp/kh:2\r\n  remove with:...Host key verification failed."
)


def test_events_make_progress_lines_and_a_summary_per_host():
    lines = []
    c = ansible._Collector({"b": "/etc/kh"}, lines.append)
    for e in [
        ev("runner_on_ok", "a", "Install the driver", changed=True),
        ev("runner_on_ok", "a", "Read the stack", changed=False, stack={"cuda": "12.4.1"}),
        ev("runner_on_skipped", "a", "Reboot"),
        ev("runner_on_failed", "c", "Install cuDNN", msg="non-zero return code", rc=100, stderr="E: broken"),
        ev("runner_on_unreachable", "b", "Gathering Facts", msg=UNKNOWN),
        {
            "event": "playbook_on_stats",
            "event_data": {
                "ok": {"a": 2},
                "changed": {"a": 1},
                "skipped": {"a": 1},
                "failures": {"c": 1},
                "dark": {"b": 1},
            },
        },
    ]:
        assert c(e) is True
    c.finish()
    assert [(ln["host"], ln["status"]) for ln in lines] == [
        ("a", "changed"),
        ("a", "ok"),
        ("a", "skipped"),
        ("c", "failed"),
        ("b", "unreachable"),
    ]
    assert c.hosts["a"].state == "changed" and c.hosts["a"].ok == 2 and c.hosts["a"].skipped == 1
    assert c.hosts["c"].state == "failed"
    assert c.hosts["c"].reason == "Install cuDNN: exit code 100: E: broken"
    assert c.hosts["b"].state == "unreachable"
    assert "host key of b is UNKNOWN" in c.hosts["b"].reason and "/etc/kh" in c.hosts["b"].reason
    assert c.results["a"]["Read the stack"]["stack"] == {"cuda": "12.4.1"}
    assert "c" not in c.results


def test_ignored_failures_do_not_fail_the_host():
    c = ansible._Collector({}, None)
    e = ev("runner_on_failed", "a", "Probe", msg="nope")
    e["event_data"]["ignore_errors"] = True
    c(e)
    assert c.hosts["a"].failures == [] and c.hosts["a"].state == "ok"


def test_host_key_reasons():
    assert "CHANGED" in hostkeys.host_key_reason(CHANGED, "h")
    assert "/tmp/kh line 2" in hostkeys.host_key_reason(CHANGED, "h")
    assert "UNKNOWN" in hostkeys.host_key_reason(UNKNOWN, "h", "/x/known_hosts")
    assert hostkeys.host_key_reason("Connection timed out during banner exchange", "h") is None


def test_artifacts_folder_is_dated_and_never_reused(tmp_path):
    now = dt.datetime(2026, 12, 3, 7, 5, 9, tzinfo=dt.timezone.utc)
    first = ansible.artifacts_folder(tmp_path, "playbooks/provision.yml", now)
    assert first == tmp_path / "20261203-070509-provision"
    first.mkdir()
    assert ansible.artifacts_folder(tmp_path, "provision.yml", now).name == "20261203-070509-provision-2"


def test_env_keeps_strict_host_keys_whatever_the_caller_passes():
    env = ansible.runner_env({"ANSIBLE_HOST_KEY_CHECKING": "False"})
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert "StrictHostKeyChecking=yes" in env["ANSIBLE_SSH_ARGS"]
    assert env["ANSIBLE_ROLES_PATH"].endswith("playbooks/roles")


def test_bad_arguments_are_config_errors(tmp_path):
    inv = tmp_path / "inv.yml"
    inv.write_text("all: {hosts: {a: {}}}\n")
    with pytest.raises(ConfigError, match="playbook not found"):
        ansible.run_playbook(tmp_path / "nope.yml", inv, ["a"])
    pb = tmp_path / "pb.yml"
    pb.write_text("- hosts: all\n  tasks: []\n")
    with pytest.raises(ConfigError, match="inventory not found"):
        ansible.run_playbook(pb, tmp_path / "missing.yml", ["a"])
    with pytest.raises(ConfigError, match="not usable"):
        ansible.run_playbook(pb, inv, ["a;touch /tmp/x"])


def test_a_hosts_message_is_one_printable_line():
    """A failed task's message is what the host printed: an escape sequence or a line break in it reaches
    the summary as \\x1b and a space, and a module's odd 'results' is no traceback."""
    c = ansible._Collector({}, None)
    c(ev("runner_on_failed", "a", "Install cuDNN", msg="\x1b]0;owned\x07E: broken\r\nprovision: 2/2 host(s) ok"))
    c(ev("runner_on_failed", "b", "Fetch", msg="gone", results=5))
    assert c.hosts["a"].reason == "Install cuDNN: \\x1b]0;owned\\x07E: broken provision: 2/2 host(s) ok"
    assert c.hosts["b"].reason == "Fetch: gone"
    assert all(c.hosts[h].line().isprintable() for h in "ab")
