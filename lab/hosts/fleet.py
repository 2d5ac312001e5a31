"""One function run on many hosts at once: ``on_hosts`` calls it per host in parallel and returns a
``HostResults``: each host's value or error, ``.succeeded`` and ``.failed`` (Fabric's ``GroupResult``). Ctrl-C
while it waits cancels the hosts not started yet and raises KeyboardInterrupt at once."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from lab.core.errors import one_line
from lab.hosts.inventory import Host


@dataclass(eq=False)
class HostResults(Mapping):
    """What a fleet operation gave per host, in the hosts' order: ``succeeded`` maps a host to the value the
    function returned, ``failed`` to the exception it raised; as a mapping, a host gives either."""

    order: list[str]
    succeeded: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, Exception] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.succeeded[name] if name in self.succeeded else self.failed[name]

    def __iter__(self):
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def reasons(self) -> dict[str, str]:
        """One line per failed host (lab.core.errors.one_line), in host order."""
        return {n: one_line(self.failed[n]) for n in self.order if n in self.failed}


def on_hosts(hosts: Iterable[Host], fn: Callable[[Host], Any], *, max_workers: int | None = None) -> HostResults:
    """Call ``fn(host)`` for every host in parallel; each host's value or exception, reported together. Ctrl-C
    (KeyboardInterrupt in the waiting thread) cancels the calls not started yet (those running finish on their own)
    and is raised at once."""
    hosts = list(hosts)
    got: dict[str, tuple[bool, Any]] = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers or max(1, len(hosts)))
    try:
        futures = {pool.submit(fn, h): h.name for h in hosts}
        for fut in concurrent.futures.as_completed(futures):
            try:
                got[futures[fut]] = (True, fut.result())
            except Exception as exc:  # recorded per host, reported together
                got[futures[fut]] = (False, exc)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    out = HostResults([h.name for h in hosts])
    for h in hosts:
        ok, value = got[h.name]
        (out.succeeded if ok else out.failed)[h.name] = value
    return out
