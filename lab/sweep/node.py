"""One host of a sweep's unit: its SSH connection (re-opened while the host stays reachable), the
runner installed there, its folders and its host lock; ``HostLost`` when it cannot be reached again. And what
a unit's worker does on it for a run: the free space checked, the runner's command line, the run started
detached, its run directory fetched back."""

from __future__ import annotations

import datetime as _dt
import re
import shlex
import time
from pathlib import Path

from lab.core import fields, limits, writes
from lab.core.errors import HostError, RunError, excerpt, printable
from lab.hosts import remote as rmt
from lab.hosts.inventory import Host
from lab.results import checksums
from lab.sweep import hostlock, preflight, recipe
from lab.sweep import topology as topo
from lab.sweep.hostrun import HostLayout, Settings, fetch_verified, tagged_running
from lab.sweep.plan import TOKEN_VAR, PlannedRun
from lab.sweep.state import last_line


class HostLost(Exception):
    def __init__(self, host: str, message: str):
        super().__init__(message)
        self.host, self.message = host, message


class Node:
    """One host of a unit: its connection (re-opened when lost), runner, layout and lock."""

    def __init__(self, host: Host, remote: rmt.Remote, install: rmt.RunnerInstall, settings: Settings, sweep_name: str):
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


_DF_LINE = re.compile(r"\s\d{1,20}\s+\d{1,20}\s+(\d{1,20})\s+\d{1,3}%\s+/")


def free_space(node: Node, min_free_mb: int) -> str | None:
    """Why the node cannot take a run for lack of disk (gpulab.sweep.min_free_mb), or None."""
    base = node.layout.base
    out = node.call(lambda r: r.run(rmt.cmd(["mkdir", "-p", base], "&&", ["df", "-Pk", base]), timeout=60))
    lines = out.stdout.strip().splitlines()
    # df -P's line: filesystem, 1024-blocks, used, available, capacity%, mount point (the filesystem's name may
    # hold spaces); anything else is no answer, never "enough"
    found = _DF_LINE.search(" " + lines[-1][:4096]) if lines else None
    if found is None:
        said = excerpt(printable(lines[-1]), 60) if lines else "nothing"
        return (
            f"free space unknown: `df -Pk {base}` on {node.host.name} printed '{said}', not a filesystem's "
            f"available kilobytes; not started"
        )
    free_mb = int(found.group(1)) // 1024
    if free_mb < min_free_mb:
        return (
            f"disk full: {free_mb} MB free in {base} on {node.host.name}, "
            f"{min_free_mb} MB needed (gpulab.sweep.min_free_mb)"
        )
    return None


def runner_args(
    run: PlannedRun, node: Node, rank: int, nodes: list[Node], settings: Settings, limit_s: float
) -> list[str]:
    """`runner run`'s arguments for ``run`` on ``node``, rank ``rank`` of the unit's ``nodes``."""
    args = [
        "run",
        run.workload,
        "--out",
        node.layout.run_dir(run),
        "--seed",
        str(run.seed),
        "--mode",
        run.mode,
        "--scale",
        run.scale,
        "--gpus",
        topo.gpus_arg(run.gpu_ids)
        if run.gpus > 0 and run.gpu_ids
        else (str(run.gpus) if run.gpus > 0 else ("all" if run.gpus < 0 else "0")),
        "--max-minutes",
        f"{limit_s / 60:.4f}",
        "--cache-dir",
        f"{node.layout.workdir}/cache",
    ]
    if run.gpus == 0 and settings.compile_cpu:
        args.append("--compile")
    if run.max_epochs is not None and run.mode == "ttt":
        args += ["--max-epochs", str(run.max_epochs)]
    args += recipe.set_args(run.settings)  # a recipe's settings (invoke sweep --recipe, invoke tune)
    if preflight.needs_data(run):  # trains on the prepared dataset (`invoke datasets`)
        args += ["--data", preflight.data_root(node.layout.workdir)]
    if len(nodes) > 1:
        head = nodes[0].host
        args += [
            "--nnodes",
            str(len(nodes)),
            "--node-rank",
            str(rank),
            "--rdzv-endpoint",
            f"{head.address}:{settings.rdzv_port}",
        ]
    return args


_STARTED = "gpulab: started before"  # what launch's shell says of a token already running


def launch(run: PlannedRun, node: Node, args: list[str]) -> str | None:
    """Start `runner run ARGS` on the node, detached (``setsid nohup``) and tagged with the run's token; an
    earlier attempt's folder is moved aside. The runner's pid; None where a process of this token already runs:
    the connection died under an earlier try of this launch after it started the runner (Node.call tries again
    once reconnected), which is followed by its token as an adopted run is, never started twice."""
    src, log, base = node.layout.run_dir(run), node.layout.launch_log(run), node.layout.base
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    argv = ["setsid", "nohup", "env", f"{TOKEN_VAR}={run.token}", *node.install.argv(*args)]
    command = rmt.cmd(
        f"if {tagged_running(run.token)}; then echo",
        [_STARTED],
        "; exit 0; fi;",
        ["mkdir", "-p", base],
        "&&",
        "{ if",
        ["test", "-e", src],
        ";",
        "then",
        ["mv", src, f"{src}.attempt-{stamp}"],
        "; fi; }",
        "&&",
        ["rm", "-f", log],
        "|| exit 1;",
        argv,
        ">",
        shlex.quote(log),
        "2>&1",
        "<",
        "/dev/null",
        "&",
        "echo",
        "$!",
    )
    out = node.call(lambda r: r.run(command, timeout=60))
    pid = out.stdout.strip()
    if pid == _STARTED:
        return None
    # a process id of the host (`kill -0 0` would say the run is alive whatever it did; ١٢ is no pid either)
    if fields.process_id(pid) is None:
        said = excerpt(printable(out.stderr.strip() or f"its shell printed '{pid[:40]}', not a process id"), 200)
        raise RunError(f"{node.host.name}: could not start {run.run_id}: {said}")
    return pid


def fetch_run(run: PlannedRun, node: Node, dest: Path, retries: int) -> list[str]:
    """The run's directory fetched into ``dest`` and verified; its problems (none: complete). Where the runner
    left no SHA256SUMS, its launch log comes along beside ``dest`` and its last line is the reason."""
    src = node.layout.run_dir(run)
    p = node.call(lambda r: fetch_verified(r, src, dest, retries))
    if p and checksums.SUMS in p[0] and not (dest / checksums.SUMS).exists():
        log = node.layout.launch_log(run)
        tail = node.call(lambda r: r.run(["tail", "-c", "4096", log], check=False, timeout=60)).stdout
        node.call(lambda r: _keep_log(r, log, dest.with_name(f"{run.run_id}.launch.log")))
        p = [f"no complete run directory (runner: {last_line(tail) or 'no output'})"]
    return p


def _keep_log(remote: rmt.Remote, log: str, local: Path) -> None:
    """The launch log copied beside the run's folder, when there is one and it is at most limits.LOG_BYTES (the
    output of a run that wrote without end is not taken; its last line is the reason all the same)."""
    if remote.run(["test", "-f", log], check=False, timeout=60).ok:
        try:
            remote.get(log, local, limits.LOG_BYTES)
        except writes.TooBig:
            pass
