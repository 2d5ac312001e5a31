"""Strict host key checking, as the lab's ssh connections meet it: the plain reason an ssh refusal over a
host key gives (a key CHANGED, a key UNKNOWN), and a probe that connects once to tell whether the key is what
keeps a host unreachable. lab.hosts.ansible reads Ansible's unreachable messages with it; lab.hosts.reach
and lab.hosts.provision probe with it.
"""

from __future__ import annotations

import re


def host_key_reason(message: str, host: str, known_hosts: str | None = None) -> str | None:
    """A plain reason for an ssh host key refusal, or None when ``message`` is about something else."""
    where = f" ({known_hosts})" if known_hosts else ""
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in message or "Offending" in message:
        m = re.search(r"Offending \S+ key in (\S+?):(\d+)", message)
        at = f" ({m.group(1)} line {m.group(2)})" if m else where
        return (
            f"host key of {host} CHANGED: it does not match the known_hosts entry{at}; refused "
            f"(strict host key checking). If the host was reinstalled, check its new key and replace the entry"
        )
    if (
        "Host key verification failed" in message
        or "No ED25519 host key is known" in message
        or re.search(r"No \S+ host key is known", message)
    ):
        return (
            f"host key of {host} is UNKNOWN: no entry in the known_hosts file{where}; refused "
            f"(strict host key checking). Add the host's key after checking its fingerprint"
        )
    return None


def probe_host_key(
    host: str,
    address: str,
    port: int = 22,
    user: str | None = None,
    key: str | None = None,
    known_hosts: str | None = None,
    timeout: int = 10,
) -> str | None:
    """Connect once with strict checking and say whether the host key is the problem.

    Used after a host was unreachable for a reason that hides the key check (with
    pipelining, ssh may die on a refused key before Ansible reads its message).
    Returns the host key reason, or None.
    """
    import subprocess

    from lab.hosts import capped

    cmd = [
        "ssh",
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ConnectTimeout={timeout}",
        "-o",
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
        "-p",
        str(port),
    ]
    if known_hosts:
        cmd += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
    if key:
        cmd += ["-i", key, "-o", "IdentitiesOnly=yes"]
    cmd += [f"{user}@{address}" if user else address, "true"]
    try:  # what the host's side prints (its banner, its shell's start-up files) is read up to limits.OUTPUT_BYTES
        res = capped.run(cmd, timeout=timeout + 5)
    except (OSError, subprocess.TimeoutExpired, capped.TooMuch):
        return None
    said = res.stderr.decode("utf-8", "replace")  # a byte that is not UTF-8 is U+FFFD, not a UnicodeDecodeError
    return host_key_reason(said, host, known_hosts) if res.returncode != 0 else None
