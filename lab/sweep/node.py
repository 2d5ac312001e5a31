"""One host of a sweep's unit: its SSH connection (re-opened while the host stays reachable), the
runner installed there, its folders and its host lock; ``HostLost`` when it cannot be reached again."""

from __future__ import annotations

import time

from lab.core.errors import HostError
from lab.hosts import remote as rmt
from lab.hosts.inventory import Host
from lab.sweep import hostlock
from lab.sweep.hostrun import HostLayout, Settings


class HostLost(Exception):
    def __init__(self, host: str, message: str):
        super().__init__(message)
        self.host, self.message = host, message


class Node:
    """One host of a unit: its connection (re-opened when lost), runner, layout and lock."""

    def __init__(self, host: Host, remote: rmt.Remote, install: rmt.RunnerInstall, settings: Settings,
                 sweep_name: str):
        self.host, self.remote, self.install, self.settings = host, remote, install, settings
        workdir = remote.expand(host.workdir.rstrip("/") or "/")
        self.layout = HostLayout(workdir, sweep_name)
        self.lock = hostlock.HostLock(remote, workdir, sweep_name, stale_s=settings.lock_stale_s)
        self.pid: str | None = None
        self.lost: str | None = None

    def call(self, fn, *args, **kwargs):
        """fn(remote, ...) with the connection re-opened while the host stays reachable."""
        if self.lost:
            raise HostLost(self.host.name, self.lost)
        try:
            return fn(self.remote, *args, **kwargs)
        except HostError as first:
            if self.host.is_local:
                raise
            end = time.monotonic() + self.settings.reconnect_s
            last = first
            while time.monotonic() < end:
                time.sleep(min(1.0, self.settings.reconnect_s))
                try:
                    self.remote.close()
                    self.remote = rmt.connect(self.host, timeout=max(2.0, min(10.0, self.settings.reconnect_s)))
                    self.lock.remote = self.remote
                    return fn(self.remote, *args, **kwargs)
                except HostError as exc:
                    last = exc
            self.lost = f"host lost: {last.message}"
            raise HostLost(self.host.name, self.lost) from None
