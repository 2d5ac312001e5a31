"""``invoke collect``: every run of a saved sweep whose local copy is missing or fails verification is
fetched again from its host (lab.sweep.hostrun.fetch_verified: the files SHA256SUMS lists, verified, a
corrupt copy fetched again) and its state in sweep.json brought up to date; lab.commands.sweep calls it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from lab.core.errors import about
from lab.core.fields import RunState
from lab.core.settings import default as declared_default
from lab.hosts import fleet
from lab.hosts import remote as rmt
from lab.hosts.inventory import Host
from lab.results import checksums
from lab.sweep.hostrun import HostLayout, fetch_verified
from lab.sweep.plan import COMPLETE_OUTCOMES
from lab.sweep.state import Sweep, read_run_json, run_outcome
from runner.rundir import STATUS


@dataclass
class CollectResult:
    fetched: int = 0
    verified: int = 0
    problems: list[str] = field(default_factory=list)


def collect(sweep_root: Path, inventory_path: str | Path, *, retries: int | None = None) -> CollectResult:
    """Fetch again every run of a saved sweep whose local copy is missing or fails verification; a copy that does
    not verify is fetched again ``retries`` times (gpulab.sweep.fetch_retries; None: its declared default)."""
    retries = declared_default("sweep.fetch_retries") if retries is None else retries
    from lab.hosts import inventory as inv

    sweep = Sweep.load(sweep_root)
    result = CollectResult()
    todo = [r for r in sweep.runs if r.state != RunState.PLANNED and sweep.problems(r)]
    result.verified = sum(1 for r in sweep.runs if r.state != RunState.PLANNED) - len(todo)
    if not todo:
        return result
    names = sorted({h for r in todo for h in r.hosts})
    hosts = {h.name: h for h in inv.load(inventory_path).select(names)}
    inv.refuse_examples(hosts.values(), inventory_path)
    lock = threading.Lock()

    def fetch_host(host: Host) -> None:
        with rmt.connect(host) as remote:
            layout = HostLayout(remote.expand(host.workdir.rstrip("/") or "/"), sweep.name)
            for run in (r for r in todo if host.name in r.hosts):
                src = layout.run_dir(run)
                dest = sweep.run_dir(run, host.name)
                if checksums.SUMS not in remote.listdir(src):
                    with lock:
                        result.problems.append(f"{host.name} {run.run_id}: no complete run directory on the host")
                    continue
                problems = fetch_verified(remote, src, dest, retries)
                with lock:
                    result.fetched += 1
                    if problems:
                        result.problems.append(f"{host.name} {run.run_id}: {'; '.join(problems)}")

    for host_name, msg in fleet.on_hosts(hosts.values(), fetch_host).reasons().items():
        result.problems.append(about(host_name, msg))  # a host's own error names it already
    for run in todo:
        if sweep.problems(run):
            continue
        result.verified += 1
        run.outcome, why = run_outcome(read_run_json(sweep.run_dir(run) / STATUS))
        if run.outcome in COMPLETE_OUTCOMES:
            run.state, run.reason = RunState.COMPLETE, why
        elif run.state == RunState.COMPLETE:
            run.state, run.reason = RunState.FAILED, f"run {run.outcome or 'ended without status'}: {why}"
    sweep.save()
    return result
