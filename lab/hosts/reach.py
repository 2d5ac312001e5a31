"""Which selected hosts Ansible can reach, asked before a playbook run leaves anything behind.

An unreachable host (no route, no sshd, a refused host key) is a failed host,
as in Fabric's group model: exit 1, the others go on. ``split`` connects to
every host the way the playbook will (Ansible's connection settings, strict
host keys, the ``raw`` module: no Python needed) and returns the hosts to run
on and an ``ansible.HostSummary`` for each one that cannot be reached, with
the reason. A task with no host left builds nothing and writes no artifacts
folder (provision's wheel, datasets' staging).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from lab.hosts import ansible, hostkeys, inventory as inv
from lab.core.errors import RunError

TASK = "Connect"


def split(hosts: list, inventory: Path | str) -> tuple[list, dict[str, ansible.HostSummary]]:
    """(hosts Ansible reached, {name: summary of a host it could not reach})."""
    import ansible_runner

    remote = [h for h in hosts if not h.is_local]
    inv.refuse_examples(remote, inventory)  # the example lab's documentation addresses: never contacted
    if not remote:
        return list(hosts), {}
    down: dict[str, str] = {}

    def on_event(event: dict) -> bool:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_unreachable" and data.get("host"):
            host = data["host"]
            message = ansible.result_message(data.get("res") or {})
            known = next((h.known_hosts for h in remote if h.name == host), None)
            down[host] = hostkeys.host_key_reason(message, host, known) or message
        return True

    with tempfile.TemporaryDirectory(prefix="gpulab-reach-") as pdd:
        try:
            ansible_runner.run(
                private_data_dir=pdd,
                inventory=str(Path(inventory).resolve()),
                host_pattern=",".join(h.name for h in remote),
                module="ansible.builtin.raw",
                module_args="true",
                envvars=ansible.runner_env(None),
                quiet=True,
                event_handler=on_event,
                suppress_env_files=True,
                timeout=300,
            )
        except Exception as exc:  # the runner could not start ansible at all
            raise RunError(f"ansible-runner failed to start: {ansible.short_line(exc)}") from None
    out = {}
    for h in remote:
        if h.name in down:
            reason = down[h.name]
            if "host key" not in reason:
                reason = hostkeys.probe_host_key(h.name, h.address, h.port, h.user, h.ssh_key, h.known_hosts) or reason
            out[h.name] = ansible.HostSummary(h.name, unreachable=1, failures=[ansible.TaskFailure(TASK, reason)])
    return [h for h in hosts if h.name not in out], out


def none_reached(playbook: str, down: dict[str, ansible.HostSummary], check: bool = False) -> ansible.PlaybookResult:
    """The result of a playbook run that did not start: no host could be reached, nothing was written."""
    return ansible.PlaybookResult(
        playbook=playbook, status="failed", rc=4, artifacts=None, hosts=dict(down), check=check
    )


def merged(result: ansible.PlaybookResult, down: dict[str, ansible.HostSummary]) -> ansible.PlaybookResult:
    """``result`` with the hosts that could not be reached added."""
    result.hosts.update(down)
    return result
