"""Sweeps: hosts x workloads x GPU counts x seeds, run on the hosts, collected here.

A sweep is the directory ``results/<sweep>/`` with ``sweep.json`` (the plan,
each run's state and reason; rewritten atomically) and one run directory per
planned run under ``<host>/<run id>/``. The run id comes from the plan entry
(workload, mode, scale, nodes, GPU count, seed), so that running the same
sweep again finds it: runs already complete and verified are skipped.

How a sweep runs:

* every host is prepared in parallel: connected (strict host keys), its
  runner installed or upgraded to this checkout's version, its GPU topology
  probed (lab.topology picks each run's GPUs: same PCIe root, else NUMA node);
* one thread per unit (a host, or k hosts for ``--nodes k``), one run at a
  time, each run under the host's own lock (lab.hostlock), after a free-space
  check; the runner starts detached (``setsid nohup``, survives SSH), every
  process it starts carries a token in its environment
  (``GPULAB_RUN_TOKEN``), so that stopping a run reaches all of them, even
  processes that left the runner's process groups;
* the run is polled; past its time limit (the runner aborts itself at
  ``--max-minutes``; past a margin the controller stops it: SIGTERM to the
  runner, then SIGKILL to every tagged process), Ctrl-C stops every run the
  same way;
* each run directory is fetched (files listed in SHA256SUMS, or everything
  there is when the run never finished) and verified; a corrupt copy is
  fetched again. Each run ends ``complete`` (verified, outcome success or
  target_missed) or ``failed``/``interrupted`` with a one-line reason;
* on resume, a run this sweep started before (its token is in sweep.json) is
  asked of its host first (``UnitWorker._adopt``): finished there and
  verified, it is fetched and counted; still going, it is waited for (its
  lock taken over from the controller that is gone) and fetched; only a run
  that failed or left nothing runs again.

sweep.json is read back through lab.sweepfile (checked like the command line,
run folders kept inside the sweep); run-directory files through lab.bounded.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import shlex
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from lab import bounded, checksums, fields, hostlock, limits, paths, preflight, remote as rmt, study, sweepfile
from lab import topology as topo, workloads as workload_catalogue
from lab.errors import ConfigError, GpulabError, HostError, RunError
from lab.inventory import Host

SCHEMA = sweepfile.SCHEMA
MODES, SCALES = fields.MODES, fields.SCALES
NAME_RE, WORKLOAD_RE = fields.NAME_RE, fields.WORKLOAD_RE
COMPLETE_OUTCOMES = ("success", "target_missed")
TOKEN_VAR = "GPULAB_RUN_TOKEN"


def utcnow() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --------------------------------------------------------------------------- the plan

@dataclass
class PlannedRun:
    host: str                 # the host (node 0 of a multi-node run)
    workload: str
    gpus: int                 # GPUs per node; 0 = CPU; -1 = all of a host whose count is not known yet
    seed: int
    mode: str = "ttt"
    scale: str = "tiny"
    state: str = "planned"    # planned | running | complete | failed | interrupted
    outcome: str | None = None  # the runner's outcome once fetched
    reason: str = ""
    started: str | None = None
    ended: str | None = None
    nodes: list[str] = field(default_factory=list)    # multi-node: every host, node 0 first
    gpu_ids: list[int] = field(default_factory=list)  # the GPUs chosen from the topology (per node)
    attempts: int = 0
    token: str | None = None
    limit_s: float | None = None   # this run's time limit; None: Settings.timeout_s

    @property
    def run_id(self) -> str:
        g = "cpu" if self.gpus == 0 else ("allgpu" if self.gpus < 0 else f"{self.gpus}gpu")
        if len(self.nodes) > 1:
            g = f"{len(self.nodes)}node-{g}"
        return f"{self.workload}-{self.mode}-{self.scale}-{g}-s{self.seed}"

    @property
    def hosts(self) -> list[str]:
        return list(self.nodes) if self.nodes else [self.host]

    def to_json(self) -> dict:
        return dict(asdict(self), run_id=self.run_id)

    @classmethod
    def from_json(cls, doc: dict, where: str = "run") -> "PlannedRun":
        """A run entry of sweep.json, every field checked like its command-line option (lab.sweepfile)."""
        return cls(**sweepfile.check_run(doc, where))


def parse_list(value: str | Iterable[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [str(i).strip() for i in items if str(i).strip()]
    if not items:
        raise ConfigError(f"--{what}: empty list")
    return items


def host_gpu_count(host: Host, topology: dict | None = None) -> int | None:
    """GPUs of a host: what its probe found, else the inventory's count; None if unknown (auto)."""
    if topology is not None and "gpu_count" in topology:
        return int(topology["gpu_count"])
    return host.gpu_count if isinstance(host.gpu_count, int) else None


def parse_gpu_counts(value: str | None, host: Host, topology: dict | None = None) -> list[int]:
    """'1,2,3' -> those counts; 'all' (default) -> every count 1..N; a host without GPUs runs count 0."""
    count = host_gpu_count(host, topology)
    if value in (None, "", "all"):
        if count is None:
            return [-1]
        return list(range(1, count + 1)) if count else [0]
    out = []
    for item in parse_list(value, "gpus"):
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(f"--gpus: {item!r} is not a GPU count (use 1,2,... or all)")
        n = limits.number(item, "--gpus", limits.GPUS)
        if count is not None and n > count and topology is None:
            raise ConfigError(f"--gpus: {n} GPUs asked but {host.name} has {count}")
        if n not in out:
            out.append(n)
    return out


def seed_count(seeds, workload: str, rules=None, mode: str = "ttt") -> int:
    """``--seeds K``, ``mlperf`` (the MLPerf run count of the workload's benchmark, lab/data/benchmarks.yml)
    or ``auto`` (that run count in ttt mode, one run per configuration in throughput mode)."""
    word = seeds.strip().lower() if isinstance(seeds, str) else None
    if word == "auto" and mode == "throughput":
        return 1
    if word in ("mlperf", "auto"):
        from lab.mlperf import Rules

        rules = rules or Rules()
        bench = rules.benchmark(workload)
        if bench is None:
            raise ConfigError(f"--seeds {word}: workload {workload!r} is no MLPerf benchmark of "
                              f"lab/data/benchmarks.yml; give a number of seeds")
        return rules.benchmarks[bench].runs_required
    try:
        n = int(seeds)
    except (TypeError, ValueError):
        raise ConfigError(f"--seeds: {seeds!r} is not a number of seeds, 'auto' or 'mlperf'") from None
    if n < 1:
        raise ConfigError(f"--seeds: {seeds!r} is not a positive number of seeds")
    return limits.number(n, "--seeds", limits.SEEDS)


def units_of(hosts: list[Host], nodes: int) -> list[list[Host]]:
    """Hosts grouped into the units that run together: single hosts, or k hosts per multi-node run."""
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"--nodes: {nodes!r} must be a positive number")
    limits.number(nodes, "--nodes", limits.NODES)
    for h in hosts:
        fields.host_name(h.name, f"host {h.name!r}")
    if nodes == 1:
        return [[h] for h in hosts]
    if len(hosts) % nodes:
        raise ConfigError(f"--nodes {nodes}: {len(hosts)} hosts selected ({', '.join(h.name for h in hosts)}), "
                          f"not a multiple of {nodes}")
    if any(h.is_local for h in hosts):
        raise ConfigError(f"--nodes {nodes}: a multi-node run needs SSH hosts, not local ones")
    return [hosts[i:i + nodes] for i in range(0, len(hosts), nodes)]


def plan(hosts: list[Host], workloads: list[str], gpus: str | None, seeds, mode: str = "ttt",
         scale: str = "tiny", *, nodes: int = 1, topologies: dict[str, dict] | None = None) -> list[PlannedRun]:
    """Every unit x workload x GPU count x seed (seeds are 1..K); GPU subsets from the topologies."""
    if mode not in MODES:
        raise ConfigError(f"--mode: {mode!r} is not one of {', '.join(MODES)}")
    if scale not in SCALES:
        raise ConfigError(f"--scale: {scale!r} is not one of {', '.join(SCALES)}")
    if not workloads:
        raise ConfigError("--workloads: empty list")
    workloads = study.expand_workloads(workloads)
    for w in workloads:
        fields.workload(w)
    counts = {w: seed_count(seeds, w, mode=mode) for w in workloads}
    workload_catalogue.check(workloads)
    topologies = topologies or {}
    units = units_of(hosts, nodes)
    per_unit = []
    for unit in units:   # the plan's size is known before a run of it is built
        per_node = [parse_gpu_counts(gpus, h, topologies.get(h.name)) for h in unit]
        per_unit.append([n for n in per_node[0] if all(n in other for other in per_node[1:])])
    limits.plan_size(sum(len(c) * sum(counts.values()) for c in per_unit))
    runs = []
    for unit, gpu_counts in zip(units, per_unit):
        head = unit[0]
        for w in workloads:
            for n in gpu_counts:
                for s in range(1, counts[w] + 1):
                    run = PlannedRun(head.name, w, n, s, mode, scale,
                                     nodes=[h.name for h in unit] if len(unit) > 1 else [])
                    topo_doc = topologies.get(head.name)
                    if n > 0 and topo_doc is not None:
                        try:
                            run.gpu_ids = topo.choose(topo.gpus_of(topo_doc), n)
                        except ConfigError as exc:
                            run.state, run.reason = "failed", f"{head.name}: {exc.message} (probe)"
                    runs.append(run)
    return runs


# --------------------------------------------------------------------------- the state

@dataclass
class Sweep:
    """The state of one sweep, kept in ``<root>/sweep.json``."""

    root: Path
    name: str
    runs: list[PlannedRun]
    hosts: dict[str, dict] = field(default_factory=dict)
    created: str = field(default_factory=utcnow)
    options: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def state_file(self) -> Path:
        return self.root / "sweep.json"

    def run_dir(self, run: PlannedRun, host: str | None = None) -> Path:
        """results/<sweep>/<host>/<run id>: refused (ConfigError) if it would leave the sweep folder."""
        return sweepfile.run_dir(self.root, host or run.host, run.run_id, str(self.state_file))

    def verified(self, run: PlannedRun) -> list[str]:
        """Problems of the local copies of a run (every node); empty when all verify."""
        out = []
        for h in run.hosts:
            out += [f"{h}: {p}" for p in checksums.verify(self.run_dir(run, h))]
        return out

    def save(self) -> None:
        with self._lock:
            try:
                controller = rmt.local_runner_version()
            except GpulabError:
                controller = None
            doc = {"schema": SCHEMA, "name": self.name, "created": self.created, "updated": utcnow(),
                   "controller": controller, "options": self.options, "hosts": self.hosts,
                   "runs": [r.to_json() for r in self.runs]}
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f".sweep.json.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(doc, indent=1) + "\n")
            os.replace(tmp, self.state_file)

    @classmethod
    def load(cls, root: Path) -> "Sweep":
        """The saved sweep; its sweep.json read with bounds and checked like the command line."""
        doc = sweepfile.read(Path(root))
        sweep = cls(root=Path(root), name=doc["name"], runs=[PlannedRun(**r) for r in doc["runs"]],
                    hosts=doc["hosts"], created=doc["created"] or utcnow(), options=doc["options"])
        for run in sweep.runs:   # every folder a run names stays inside the sweep
            for h in run.hosts:
                sweep.run_dir(run, h)
        return sweep

    @classmethod
    def open(cls, root: Path, name: str, runs: list[PlannedRun], options: dict) -> "Sweep":
        """A new sweep, or the saved one with the same name: complete and verified runs carry over."""
        sweep = cls(root=Path(root), name=name, runs=runs, options=options)
        if sweep.state_file.exists():
            old = cls.load(root)
            sweep.created, sweep.hosts = old.created, old.hosts
            saved = {(r.host, r.run_id): r for r in old.runs}
            for run in runs:
                prev = saved.get((run.host, run.run_id))
                if prev is None:
                    continue
                run.attempts, run.token = prev.attempts, prev.token
                if prev.state == "complete" and not sweep.verified(prev):
                    run.state, run.outcome, run.reason = "complete", prev.outcome, prev.reason
                    run.started, run.ended, run.gpu_ids = prev.started, prev.ended, prev.gpu_ids
                elif run.state == "planned" and prev.state != "planned":
                    run.reason = f"previous attempt: {prev.state}: {prev.reason}"
        return sweep


def _read_json(path: Path) -> dict:
    """A run directory's JSON file (status.json), read with bounds; {} when it is not one."""
    try:
        doc = bounded.read_json(path, root=Path(path).parent)
        return doc if isinstance(doc, dict) else {}
    except bounded.Unreadable:
        return {}


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# --------------------------------------------------------------------------- on a host

@dataclass
class Settings:
    """How a sweep treats its hosts (invoke.yaml gpulab.sweep.*)."""

    timeout_s: float | None = 3600.0   # a run's time limit (--max-minutes for the runner); None: per run
                                       # from its estimate (lab.study.time_limit_minutes)
    kill_margin_s: float = 60.0    # past the limit by this much, the controller stops the run itself
    stop_grace_s: float = 30.0     # SIGTERM to the runner, then SIGKILL to every tagged process
    poll_s: float = 0.25
    reconnect_s: float = 30.0      # a lost host is retried this long before its runs fail
    min_free_mb: int = 1024        # free space needed in the host's workdir before a run starts
    lock_stale_s: float = 300.0    # a host lock whose heartbeat is this old (and whose run is gone) is taken over
    lock_wait_s: float = 3600.0    # how long a run waits for a host another sweep holds
    rdzv_port: int = 29400         # multi-node rendezvous port on node 0
    fetch_retries: int = 2         # fetches again when a copy does not verify


@dataclass
class HostLayout:
    """Where a sweep's files live on one host."""

    workdir: str
    sweep: str

    @property
    def base(self) -> str:
        return f"{self.workdir}/sweeps/{self.sweep}"

    def run_dir(self, run: PlannedRun) -> str:
        return f"{self.base}/{run.run_id}"

    def launch_log(self, run: PlannedRun) -> str:
        return f"{self.base}/{run.run_id}.launch.log"


# $1 signal, $2 token: signal every process that carries the token; print their pids
_SIGNAL_TAGGED = r'''
pids=$(grep -lzxF "GPULAB_RUN_TOKEN=$2" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3)
[ -n "$pids" ] && kill -s "$1" $pids 2>/dev/null
echo $pids
'''


# $1 run directory, $2 token, $3 lock dir, $4 runner pid ('' when not known: a run adopted on resume)
_PROBE = r'''
[ -n "$3" ] && touch "$3/heartbeat" 2>/dev/null
if [ -f "$1/SHA256SUMS" ]; then echo done
elif [ -n "$4" ] && kill -0 "$4" 2>/dev/null; then echo running
elif [ -z "$4" ] && [ -n "$2" ] && grep -qzxF "GPULAB_RUN_TOKEN=$2" /proc/[0-9]*/environ 2>/dev/null; then echo running
elif [ -d "$1" ]; then echo gone
else echo none; fi
'''


def run_state(remote: rmt.Remote, src: str, token: str | None, lock_dir: str = "", pid: str | None = None) -> str:
    """What a host says of a run: done (SHA256SUMS written), running, gone (left a partial folder) or none."""
    out = remote.run(["sh", "-c", _PROBE, "gpulab-probe", src, token or "", lock_dir, pid or ""],
                     timeout=60, check=False).stdout.strip()
    return out if out in ("done", "running", "gone", "none") else "gone"


def signal_tagged(remote: rmt.Remote, token: str, sig: str) -> list[int]:
    out = remote.run(["sh", "-c", _SIGNAL_TAGGED, "gpulab-stop", sig, token], timeout=60, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def tagged_alive(remote: rmt.Remote, token: str) -> list[int]:
    return signal_tagged(remote, token, "0")


def stop_run(remote: rmt.Remote, token: str, pid: str | None, grace_s: float, poll_s: float = 0.5) -> bool:
    """SIGTERM to the runner (it stops its workload and finishes the run directory), then SIGKILL
    to every process of the run after ``grace_s``. True when something had to be killed."""
    if pid:
        remote.run(["kill", "-TERM", pid], check=False, timeout=30)
    else:
        signal_tagged(remote, token, "TERM")
    return wait_gone(remote, token, grace_s, poll_s)


def wait_gone(remote: rmt.Remote, token: str, grace_s: float, poll_s: float = 0.5) -> bool:
    """Wait until no process of the run is left, SIGKILL the rest after ``grace_s``; True when it had to.

    A runner writes SHA256SUMS last, but its interpreter still has to exit after
    that: a run counts as over only once its processes are gone.
    """
    end = time.monotonic() + grace_s
    while True:
        if not tagged_alive(remote, token):
            return False
        if time.monotonic() >= end:
            break
        time.sleep(poll_s)
    signal_tagged(remote, token, "KILL")
    return True


def fetch_run(remote: rmt.Remote, src: str, dest: Path) -> list[str]:
    """Copy a remote run directory to ``dest`` (replacing it) and verify it; the problems found.

    Files listed in SHA256SUMS are fetched; for an incomplete run (no sums),
    every file there is, so that nothing written is lost.
    """
    tmp = dest.with_name(f".{dest.name}.partial")
    if tmp.is_symlink() or not paths.inside(tmp.parent, dest.parent):
        raise ConfigError(f"{tmp}: a symbolic link where the fetch puts its copy; not followed")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = [n for n in remote.listdir(src) if paths.is_component(n)]   # the host's listing is input too
    if checksums.SUMS in names:
        remote.get(f"{src}/{checksums.SUMS}", tmp / checksums.SUMS)
        try:
            listed = list(checksums.read(tmp))
        except ValueError:
            listed = [n for n in names if n != checksums.SUMS]
        for name in listed:
            if "/" in name:
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            remote.get(f"{src}/{name}", tmp / name)
    else:
        for name in names:
            remote.get(f"{src}/{name}", tmp / name)
    problems = checksums.verify(tmp)
    if dest.is_symlink():
        dest.unlink()
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return problems


def fetch_verified(remote: rmt.Remote, src: str, dest: Path, retries: int) -> list[str]:
    """fetch_run, again while the copy does not verify (a corrupt transfer), at most ``retries`` more."""
    problems = fetch_run(remote, src, dest)
    for _ in range(retries):
        if not problems or checksums.SUMS not in remote.listdir(src):
            break
        problems = fetch_run(remote, src, dest)
    return problems


def keep_attempt(sweep: Sweep, run: PlannedRun, host: str) -> None:
    """Move an earlier attempt's local copy to ``.attempts/`` (never deleted; reports skip it)."""
    d = sweep.run_dir(run, host)
    if d.exists():
        dest = paths.child(sweep.root, ".attempts", host, f"{run.run_id}.attempt-{max(1, run.attempts - 1)}",
                           what=f"{sweep.state_file}: earlier attempt of {host}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(d, dest)


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


class UnitWorker:
    """Runs one unit's share of a sweep (a host, or the hosts of a multi-node run), one run after another."""

    def __init__(self, sweep: Sweep, nodes: list[Node], runs: list[PlannedRun], settings: Settings,
                 progress, stop: threading.Event):
        self.sweep, self.nodes, self.runs, self.settings = sweep, nodes, runs, settings
        self.progress, self.stop = progress, stop
        self.unit = "+".join(n.host.name for n in nodes)
        self.done = False

    def __call__(self) -> None:
        try:
            todo = [r for r in self.runs if r.state != "complete"]
            for i, run in enumerate(todo, 1):
                if self.stop.is_set():
                    break
                self.progress.run_started(self.unit, i, len(todo), run.run_id,
                                          " (resumed: what the host did comes first)" if run.token else "")
                try:
                    self._one(run)
                except HostLost as exc:
                    self._stop_all(run)
                    self._end(run, "failed", exc.message)
                    for rest in todo[i:]:
                        rest.state, rest.reason = "failed", f"not run: {exc.host} lost ({exc.message})"
                    self.sweep.save()
                    self.progress.unit_done(self.unit, f"lost: {exc.host}")
                    return
                except GpulabError as exc:
                    self._end(run, "failed", exc.message)
                finally:
                    for node in self.nodes:
                        try:
                            node.call(lambda r: node.lock.release())
                        except (HostLost, GpulabError):
                            pass
                self.progress.run_ended(self.unit, run)
            self.progress.unit_done(self.unit, "interrupted" if self.stop.is_set() else "done")
        except Exception as exc:  # never lose the state to a bug in one thread
            for run in self.runs:
                if run.state == "running":
                    run.state, run.reason = "failed", f"controller error: {type(exc).__name__}: {exc}"
            self.sweep.save()
            raise
        finally:
            self.done = True

    def _end(self, run: PlannedRun, state: str, reason: str, outcome: str | None = None) -> None:
        run.state, run.reason, run.outcome, run.ended = state, reason, outcome, utcnow()
        self.sweep.save()

    # -- one run -------------------------------------------------------------
    def _limit_s(self, run: PlannedRun) -> float:
        return run.limit_s or self.settings.timeout_s or 3600.0

    def _lock_all(self, run: PlannedRun) -> bool:
        """Take every node's host lock (in name order, so two controllers cannot deadlock)."""
        deadline = time.monotonic() + self.settings.lock_wait_s
        for node in sorted(self.nodes, key=lambda n: n.host.name):
            while True:
                busy = node.call(lambda r: node.lock.try_acquire(run.token))
                if busy is None:
                    break
                if self.stop.is_set() or time.monotonic() > deadline:
                    self._end(run, "failed" if not self.stop.is_set() else "interrupted",
                              f"{node.host.name} busy: lock held by {busy.describe()}")
                    return False
                self.progress.status(self.unit, f"waiting for {node.host.name}: held by {busy.describe()}")
                time.sleep(max(self.settings.poll_s, 2.0))
        return True

    def _free_space(self, node: Node) -> str | None:
        base = node.layout.base
        out = node.call(lambda r: r.run(rmt.cmd(["mkdir", "-p", base], "&&", ["df", "-Pk", base]), timeout=60))
        lines = out.stdout.strip().splitlines()
        try:
            free_mb = int(lines[-1].split()[3]) // 1024
        except (IndexError, ValueError):
            return None
        if free_mb < self.settings.min_free_mb:
            return (f"disk full: {free_mb} MB free in {base} on {node.host.name}, "
                    f"{self.settings.min_free_mb} MB needed (gpulab.sweep.min_free_mb)")
        return None

    def _args(self, run: PlannedRun, node: Node, rank: int) -> list[str]:
        args = ["run", run.workload, "--out", node.layout.run_dir(run), "--seed", str(run.seed),
                "--mode", run.mode, "--scale", run.scale,
                "--gpus", topo.gpus_arg(run.gpu_ids) if run.gpus > 0 and run.gpu_ids else (
                    str(run.gpus) if run.gpus > 0 else ("all" if run.gpus < 0 else "0")),
                "--max-minutes", f"{self._limit_s(run) / 60:.4f}",
                "--cache-dir", f"{node.layout.workdir}/cache"]
        if preflight.needs_data(run):   # trains on the prepared dataset (`invoke datasets`)
            args += ["--data", preflight.data_root(node.layout.workdir)]
        if len(self.nodes) > 1:
            head = self.nodes[0].host
            args += ["--nnodes", str(len(self.nodes)), "--node-rank", str(rank),
                     "--rdzv-endpoint", f"{head.address}:{self.settings.rdzv_port}"]
        return args

    def _launch(self, run: PlannedRun, node: Node, rank: int) -> str:
        src, log, base = node.layout.run_dir(run), node.layout.launch_log(run), node.layout.base
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        argv = ["setsid", "nohup", "env", f"{TOKEN_VAR}={run.token}", *node.install.argv(*self._args(run, node, rank))]
        command = rmt.cmd(["mkdir", "-p", base], "&&",
                          "{ if", ["test", "-e", src], ";", "then", ["mv", src, f"{src}.attempt-{stamp}"], "; fi; }",
                          "&&", ["rm", "-f", log], "|| exit 1;",
                          argv, ">", shlex.quote(log), "2>&1", "<", "/dev/null", "&", "echo", "$!")
        out = node.call(lambda r: r.run(command, timeout=60))
        pid = out.stdout.strip()
        if not pid.isdigit():
            raise RunError(f"{node.host.name}: could not start {run.run_id}: {out.stderr.strip()}")
        return pid

    def _poll(self, run: PlannedRun, node: Node) -> str:
        """done, running or gone; the runner by its pid, or (adopted) by its processes' token."""
        src = node.layout.run_dir(run)
        lock = node.lock.path if node.lock.held else ""   # the holder keeps its heartbeat going
        probe = lambda r: run_state(r, src, run.token, lock, node.pid)  # noqa: E731
        state = node.call(probe)
        if state in ("gone", "none"):  # it may have finished between the two tests
            state = node.call(probe)
        return "gone" if state == "none" else state

    def _stop_all(self, run: PlannedRun) -> bool:
        killed = False
        for node in self.nodes:
            try:
                killed |= node.call(lambda r: stop_run(r, run.token, node.pid, self.settings.stop_grace_s,
                                                       self.settings.poll_s))
            except HostLost:
                pass
        return killed

    def _one(self, run: PlannedRun) -> None:
        if run.token and self._adopt(run):   # a token: this sweep started the run before
            return
        run.token = f"gl-{secrets.token_hex(8)}"
        run.state, run.started, run.ended, run.reason, run.outcome = "running", utcnow(), None, "", None
        self.sweep.save()
        if not self._lock_all(run):
            return
        for node in self.nodes:
            problem = self._free_space(node)
            if problem:
                self._end(run, "failed", problem)
                return
        run.attempts += 1
        for rank, node in enumerate(self.nodes):
            node.pid = None
        for rank, node in enumerate(self.nodes):
            node.pid = self._launch(run, node, rank)
        self.sweep.save()
        self._watch(run)

    def _watch(self, run: PlannedRun) -> None:
        """Poll the run on every node until it ends, is stopped or passes its limit; then collect it."""
        s = self.settings
        t0 = time.monotonic()
        deadline = t0 + self._limit_s(run) + s.kill_margin_s
        ended = "done"
        pending = list(self.nodes)
        states: dict[str, str] = {}
        while pending:
            for node in list(pending):
                st = self._poll(run, node)
                if st in ("done", "gone"):
                    states[node.host.name] = st
                    pending.remove(node)
            if not pending:
                break
            if self.stop.is_set():
                self.progress.status(self.unit, "stopping (Ctrl-C)")
                self._stop_all(run)
                ended = "interrupted"
                break
            if time.monotonic() > deadline:
                self.progress.status(self.unit, "stopping (time limit)")
                ended = "killed" if self._stop_all(run) else "timeout"
                break
            self.progress.status(self.unit, f"running {run.run_id}")
            time.sleep(s.poll_s)
        if ended == "done":  # finished: let each runner exit (it may still be shutting down) before the next run
            for node in self.nodes:
                try:
                    node.call(lambda r: wait_gone(r, run.token, s.stop_grace_s, s.poll_s))
                except HostLost:
                    pass
        self._collect(run, ended, states, time.monotonic() - t0)

    # -- a run started before (the controller was killed, the host was lost): adopt what the host did --
    def _adopt(self, run: PlannedRun) -> bool:
        """True when the host's own record settles the run: a finished run directory that verifies is
        fetched and counted, a run still going is waited for and then fetched. False: run it again
        (it failed, or left nothing)."""
        states = {n.host.name: n.call(lambda r: run_state(r, n.layout.run_dir(run), run.token))
                  for n in self.nodes}
        if "running" in states.values():
            self.progress.print(f"  [{self.unit}] {run.run_id}: still running on the host since before this "
                                f"resume; waiting for it")
            if not self._take_over_locks(run):
                return True     # stopped (Ctrl-C) or another controller holds the host: recorded by _end
        elif set(states.values()) != {"done"}:
            return False
        else:
            self.progress.print(f"  [{self.unit}] {run.run_id}: finished on the host before this resume; fetching it")
        run.state, run.reason, run.outcome, run.ended = "running", "", None, None
        self.sweep.save()
        for node in self.nodes:
            node.pid = None
        self._watch(run)
        if run.state == "complete":
            run.reason = (run.reason + "; " if run.reason else "") + "adopted on resume (the host had run it)"
            self.sweep.save()
        return run.state != "failed"

    def _take_over_locks(self, run: PlannedRun) -> bool:
        """Each node's lock, taken over from the controller that started ``run`` and is gone."""
        deadline = time.monotonic() + self.settings.lock_wait_s
        for node in sorted(self.nodes, key=lambda n: n.host.name):
            while True:
                busy = node.call(lambda r: node.lock.try_acquire(run.token))
                if busy is not None and busy.orphaned(run.token, self.sweep.name, self.settings.lock_stale_s):
                    busy = node.call(lambda r: node.lock.take_over(busy, run.token))
                if busy is None:
                    break
                if self.stop.is_set() or time.monotonic() > deadline:
                    self._end(run, "interrupted" if self.stop.is_set() else "failed",
                              f"{node.host.name} busy: lock held by {busy.describe()}")
                    return False
                self.progress.status(self.unit, f"waiting for {node.host.name}: held by {busy.describe()}")
                time.sleep(max(self.settings.poll_s, 2.0))
        return True

    def _collect(self, run: PlannedRun, ended: str, states: dict[str, str], elapsed: float) -> None:
        problems: list[str] = []
        status: dict = {}
        for rank, node in enumerate(self.nodes):
            keep_attempt(self.sweep, run, node.host.name)
            dest = self.sweep.run_dir(run, node.host.name)
            src = node.layout.run_dir(run)
            self.progress.status(self.unit, f"fetching {node.host.name}")
            p = node.call(lambda r: fetch_verified(r, src, dest, self.settings.fetch_retries))
            if p and checksums.SUMS in p[0] and not (dest / checksums.SUMS).exists():
                log = node.layout.launch_log(run)
                tail = node.call(lambda r: r.run(["tail", "-n", "5", log], check=False, timeout=60)).stdout
                node.call(lambda r: r.get(log, dest.with_name(f"{run.run_id}.launch.log")) if r.run(
                    ["test", "-f", log], check=False, timeout=60).ok else None)
                p = [f"no complete run directory (runner: {_last_line(tail) or 'no output'})"]
            problems += [f"{node.host.name}: {x}" for x in p]
            if rank == 0:
                status = _read_json(dest / "status.json")
        outcome, why = status.get("outcome"), status.get("reason", "")
        limit = f"{self._limit_s(run) / 60:g} min"
        if ended == "interrupted":
            self._end(run, "interrupted", "interrupted (Ctrl-C); the run was stopped"
                      + (f": {why}" if why else ""), outcome)
        elif ended in ("killed", "timeout"):
            self._end(run, "failed", f"timed out: still running {elapsed:.0f} s after the start (limit {limit}); "
                      + ("its processes were killed" if ended == "killed" else "stopped with SIGTERM"), outcome)
        elif problems:
            self._end(run, "failed", "; ".join(problems), outcome)
        elif outcome in COMPLETE_OUTCOMES:
            self._end(run, "complete", why, outcome)
        elif outcome == "aborted" and "time limit" in why:
            self._end(run, "failed", f"timed out: {why} (the runner stopped it)", outcome)
        else:
            self._end(run, "failed", f"run {outcome or 'ended without status'}: {why}", outcome)


# --------------------------------------------------------------------------- the whole sweep

@dataclass
class SweepResult:
    sweep: Sweep

    @property
    def failed(self) -> list[PlannedRun]:
        return [r for r in self.sweep.runs if r.state != "complete"]

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> list[str]:
        runs = self.sweep.runs
        done = [r for r in runs if r.state == "complete"]
        lines = [f"sweep {self.sweep.name}: {len(done)}/{len(runs)} runs complete "
                 f"({sum(1 for r in done if r.outcome == 'success')} reached their target); "
                 f"results in {self.sweep.root}"]
        lines += [f"  MISSED {r.host} {r.run_id}: {r.reason}" for r in done if r.outcome != "success"]
        lines += [f"  FAILED {'+'.join(r.hosts)} {r.run_id}: {r.state}: {r.reason}" for r in self.failed]
        return lines


def default_name(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("sweep-%Y%m%d-%H%M%S")


def check_name(name: str) -> None:
    fields.sweep_name(name)


def prepare_host(host: Host) -> tuple[rmt.Remote, rmt.RunnerInstall, dict]:
    """Connect, make the runner match this checkout, probe the GPU topology."""
    remote = rmt.connect(host)
    try:
        install = rmt.ensure_runner(remote)
        return remote, install, topo.discover(remote, install)
    except BaseException:
        remote.close()
        raise


def run_sweep(hosts: list[Host], workloads: list[str], results_dir: Path, name: str, *, gpus: str | None = None,
              seeds=1, mode: str = "ttt", scale: str = "tiny", nodes: int = 1, settings: Settings | None = None,
              progress_factory=None, echo=print, datasets_catalogue=None) -> SweepResult:
    """Check the prepared data, prepare the hosts, plan, run the plan (units in parallel, one run
    at a time each), collect."""
    from lab import progress as prog

    settings = settings or Settings()
    check_name(name)
    workloads = study.expand_workloads(parse_list(workloads, "workloads"))
    planned = plan(hosts, workloads, gpus, seeds, mode, scale, nodes=nodes)  # bad input before any host is touched
    root = paths.child(results_dir, name, what="--name")
    if (root / sweepfile.STATE_FILE).exists() or (root / sweepfile.STATE_FILE).is_symlink():
        Sweep.load(root)   # a saved state to resume is checked before any host is touched too
    refused = preflight.refusal(preflight.check(hosts, planned, datasets_catalogue))   # read-only, one command a host
    if refused:
        raise ConfigError(refused)
    echo(f"sweep {name}: preparing {len(hosts)} host(s) (runner {rmt.local_runner_version()})")
    prepared = rmt.on_hosts(hosts, prepare_host)
    errors = prepared.reasons()
    topologies = {n: got[2] for n, got in prepared.succeeded.items()}
    runs = plan(hosts, workloads, gpus, seeds, mode, scale, nodes=nodes, topologies=topologies)
    if settings.timeout_s is None:   # each run's limit from its estimate (the probed GPUs name the device)
        past = study.history(results_dir)
        for run in runs:
            run.limit_s = 60 * study.time_limit_minutes(run, study.unit_device(hosts, run, topologies), past)
    not_runnable = {(r.host, r.run_id) for r in runs if r.state == "failed"}  # e.g. fewer GPUs than asked
    options = {"workloads": workloads, "gpus": gpus, "seeds": seeds, "mode": mode, "scale": scale, "nodes": nodes,
               "timeout_s": settings.timeout_s}
    sweep = Sweep.open(root, name, runs, options)
    for h in hosts:
        entry = sweep.hosts.setdefault(h.name, {})
        entry.update(address=h.address, gpu_model=h.gpu_model, gpu_count=h.gpu_count, stack=h.stack,
                     groups=list(h.groups), error=errors.get(h.name))
        if h.name in topologies:
            entry.update(topology=topologies[h.name], runner=prepared[h.name][1].version)
    for run in sweep.runs:
        bad = [f"{n}: {errors[n]}" for n in run.hosts if n in errors]
        if bad and run.state != "complete":
            run.state, run.reason, run.ended = "failed", "; ".join(bad), utcnow()
    sweep.save()
    by_name = {h.name: h for h in hosts}
    workers: list[UnitWorker] = []
    stop = threading.Event()
    unit_runs: dict[tuple, list[PlannedRun]] = {}
    for run in sweep.runs:
        if (run.host, run.run_id) not in not_runnable or run.state == "complete":
            unit_runs.setdefault(tuple(run.hosts), []).append(run)
    todo_units = {u: rs for u, rs in unit_runs.items()
                  if not any(n in errors for n in u) and any(r.state != "complete" for r in rs)}
    progress = (progress_factory or prog.Progress)(
        {"+".join(u): sum(1 for r in rs if r.state != "complete") for u, rs in todo_units.items()})
    for u, rs in todo_units.items():
        nodes_ = [Node(by_name[n], prepared[n][0], prepared[n][1], settings, name) for n in u]
        workers.append(UnitWorker(sweep, nodes_, rs, settings, progress, stop))
    skipped = sum(1 for r in sweep.runs if r.state == "complete")
    echo(f"sweep {name}: {len(sweep.runs)} runs on {len(hosts)} host(s)"
         + (f", {skipped} already complete (resumed)" if skipped else ""))
    threads = [threading.Thread(target=w, name=f"sweep-{w.unit}", daemon=True) for w in workers]
    try:
        with progress:
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(0.2)
            except KeyboardInterrupt:
                old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the cleanup must not be cut short
                try:
                    progress.print("interrupted: stopping the remote runs...")
                    stop.set()
                    end = time.monotonic() + settings.stop_grace_s + 60
                    for t in threads:
                        t.join(max(0.1, end - time.monotonic()))
                    for run in sweep.runs:
                        if run.state == "running":
                            run.state, run.reason, run.ended = "interrupted", "interrupted (Ctrl-C)", utcnow()
                    sweep.save()
                finally:
                    signal.signal(signal.SIGINT, old)
                raise
    finally:
        for got in prepared.succeeded.values():
            got[0].close()
        sweep.save()
    return SweepResult(sweep)


# --------------------------------------------------------------------------- collect

@dataclass
class CollectResult:
    fetched: int = 0
    verified: int = 0
    problems: list[str] = field(default_factory=list)


def collect(sweep_root: Path, inventory_path: str | Path, *, retries: int = 2) -> CollectResult:
    """Fetch again every run of a saved sweep whose local copy is missing or fails verification."""
    from lab import inventory as inv

    sweep = Sweep.load(sweep_root)
    result = CollectResult()
    todo = [r for r in sweep.runs if r.state != "planned" and sweep.verified(r)]
    result.verified = sum(1 for r in sweep.runs if r.state != "planned") - len(todo)
    if not todo:
        return result
    names = sorted({h for r in todo for h in r.hosts})
    hosts = {h.name: h for h in inv.load(inventory_path).select(names)}
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

    for host_name, msg in rmt.on_hosts(hosts.values(), fetch_host).reasons().items():
        result.problems.append(f"{host_name}: {msg}")
    for run in todo:
        if sweep.verified(run):
            continue
        result.verified += 1
        status = _read_json(sweep.run_dir(run) / "status.json")
        run.outcome = status.get("outcome")
        if run.outcome in COMPLETE_OUTCOMES:
            run.state, run.reason = "complete", status.get("reason", "")
        elif run.state == "complete":
            run.state, run.reason = "failed", f"run {run.outcome}: {status.get('reason', '')}"
    sweep.save()
    return result
