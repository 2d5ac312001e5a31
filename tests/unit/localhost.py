"""An inventory Host record of this machine (ansible_connection=local), as the unit tests that run a host's side
through lab.hosts.remote.LocalRemote need one."""

from __future__ import annotations

from pathlib import Path

from lab.hosts.inventory import Host


def local_host(workdir: str | Path, name: str = "here", **fields) -> Host:
    """This machine as host ``name``: a CPU host of the current stack whose gpulab_workdir is ``workdir``;
    ``fields`` replace those (``gpu_model="NVIDIA H200", gpu_count=1``)."""
    base = dict(
        name=name,
        address="127.0.0.1",
        port=22,
        user=None,
        connection="local",
        gpu_model="cpu",
        gpu_count=0,
        stack="current",
        groups=(),
        workdir=str(workdir),
        python=None,
        ssh_key=None,
        known_hosts="/dev/null",
    )
    return Host(**{**base, **fields})
