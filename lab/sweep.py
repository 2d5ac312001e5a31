"""Sweeps: hosts x workloads x GPU counts x seeds, run on the hosts, collected here.

A sweep is the directory ``results/<sweep>/`` with ``sweep.json`` (the plan,
each run's state and reason; rewritten atomically) and one run directory per
planned run under ``<host>/<run id>/``. The run id comes from the plan entry
(workload, GPU count, seed), so running the same sweep again finds it: runs
already collected and verified are skipped.

On a host, each run is started detached (``setsid nohup``) so that it survives
the SSH session, polled, and fetched with its SHA256SUMS verified. Hosts run in
parallel; runs on one host run one after another.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from lab import checksums, remote as rmt
from lab.errors import ConfigError, GpulabError, HostError, RunError
from lab.inventory import Host

SCHEMA = 1
MODES = ("ttt", "throughput")
SCALES = ("tiny", "small", "full")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
WORKLOAD_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
POLL_S = 0.5


def utcnow() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


@dataclass
class PlannedRun:
    host: str
    workload: str
    gpus: int  # 0 = CPU
    seed: int
    mode: str = "ttt"
    scale: str = "tiny"
    state: str = "planned"  # planned | running | complete | failed
    outcome: str | None = None  # the runner's outcome once complete
    reason: str = ""
    started: str | None = None
    ended: str | None = None

    @property
    def run_id(self) -> str:
        gpus = f"{self.gpus}gpu" if self.gpus else "cpu"
        return f"{self.workload}-{self.mode}-{self.scale}-{gpus}-s{self.seed}"


def parse_list(value: str | Iterable[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [str(i).strip() for i in items if str(i).strip()]
    if not items:
        raise ConfigError(f"--{what}: empty list")
    return items


def parse_gpu_counts(value: str | None, host: Host) -> list[int]:
    """'1,2,3' or 'all' (the host's GPU count) -> counts; a CPU host runs count 0."""
    count = host.gpu_count if isinstance(host.gpu_count, int) else None
    if value in (None, "", "all"):
        return [count] if count else [0]
    out = []
    for item in parse_list(value, "gpus"):
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(f"--gpus: {item!r} is not a GPU count (use 1,2,... or all)")
        n = int(item)
        if count is not None and n > count:
            raise ConfigError(f"--gpus: {n} GPUs asked but {host.name} has {count}")
        if n not in out:
            out.append(n)
    return out


def plan(hosts: list[Host], workloads: list[str], gpus: str | None, seeds: int,
         mode: str = "ttt", scale: str = "tiny") -> list[PlannedRun]:
    """Every host x workload x GPU count x seed (seeds are 1..K)."""
    if mode not in MODES:
        raise ConfigError(f"--mode: {mode!r} is not one of {', '.join(MODES)}")
    if scale not in SCALES:
        raise ConfigError(f"--scale: {scale!r} is not one of {', '.join(SCALES)}")
    for w in workloads:
        if not WORKLOAD_RE.match(w):
            raise ConfigError(f"--workloads: {w!r} is not a workload name")
    if not isinstance(seeds, int) or seeds < 1:
        raise ConfigError(f"--seeds: {seeds!r} is not a positive number of seeds")
    runs = []
    for host in hosts:
        for w in workloads:
            for n in parse_gpu_counts(gpus, host):
                for s in range(1, seeds + 1):
                    runs.append(PlannedRun(host.name, w, n, s, mode, scale))
    return runs


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

    def run_dir(self, run: PlannedRun) -> Path:
        return self.root / run.host / run.run_id

    def save(self) -> None:
        with self._lock:
            doc = {"schema": SCHEMA, "name": self.name, "created": self.created, "updated": utcnow(),
                   "controller": rmt.local_runner_version(), "options": self.options, "hosts": self.hosts,
                   "runs": [dict(asdict(r), run_id=r.run_id) for r in self.runs]}
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(doc, indent=1) + "\n")
            os.replace(tmp, self.state_file)

    @classmethod
    def open(cls, root: Path, name: str, runs: list[PlannedRun], options: dict) -> "Sweep":
        """A new sweep, or the saved one with the same name: its states carry over to matching runs."""
        sweep = cls(root=root, name=name, runs=runs, options=options)
        if sweep.state_file.exists():
            try:
                old = json.loads(sweep.state_file.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ConfigError(f"{sweep.state_file}: unreadable sweep state ({exc})") from None
            sweep.created = old.get("created", sweep.created)
            sweep.hosts = old.get("hosts", {})
            saved = {(r["host"], r["run_id"]): r for r in old.get("runs", [])}
            for run in runs:
                prev = saved.get((run.host, run.run_id))
                if prev and prev.get("state") == "complete" and not checksums.verify(sweep.run_dir(run)):
                    run.state, run.outcome, run.reason = "complete", prev.get("outcome"), prev.get("reason", "")
                    run.started, run.ended = prev.get("started"), prev.get("ended")
        return sweep


@dataclass
class HostLayout:
    """Where a sweep's files live on one host."""

    base: str

    def run_dir(self, run: PlannedRun) -> str:
        return f"{self.base}/{run.run_id}"

    def launch_log(self, run: PlannedRun) -> str:
        return f"{self.base}/{run.run_id}.launch.log"


def _last_line(text: str) -> str:
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[-1] if lines else ""


def fetch_run(remote: rmt.Remote, src: str, dest: Path) -> list[str]:
    """Copy a remote run directory to ``dest`` (replacing it) and verify it; the problems found.

    Files listed in SHA256SUMS are fetched; for an incomplete run (no sums),
    every file there is, so that nothing written is lost.
    """
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = remote.listdir(src)
    if checksums.SUMS in names:
        remote.get(f"{src}/{checksums.SUMS}", tmp / checksums.SUMS)
        try:
            listed = checksums.parse((tmp / checksums.SUMS).read_text())
        except (ValueError, UnicodeDecodeError):
            listed = {n: "" for n in names if n != checksums.SUMS}
        for name in listed:
            remote.get(f"{src}/{name}", tmp / name)
    else:
        for name in names:
            remote.get(f"{src}/{name}", tmp / name)
    problems = checksums.verify(tmp)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return problems


class HostWorker:
    """Runs one host's share of a sweep, one run after another."""

    def __init__(self, sweep: Sweep, host: Host, *, timeout_s: float, on_event: Callable[[str, PlannedRun, str], None]):
        self.sweep, self.host, self.timeout_s, self.on_event = sweep, host, timeout_s, on_event
        self.remote: rmt.Remote | None = None
        self.current_pid: str | None = None

    def __call__(self) -> None:
        runs = [r for r in self.sweep.runs if r.host == self.host.name and r.state != "complete"]
        if not runs:
            return
        try:
            self.remote = rmt.connect(self.host)
            install = rmt.ensure_runner(self.remote)
            self.sweep.hosts.setdefault(self.host.name, {}).update(runner=install.version)
            layout = HostLayout(self.remote.expand(self.host.workdir.rstrip("/")) + f"/sweeps/{self.sweep.name}")
            for i, run in enumerate(runs, 1):
                self.on_event("start", run, f"{i}/{len(runs)}")
                self._one(run, install, layout)
                self.on_event("end", run, f"{i}/{len(runs)}")
        except GpulabError as exc:
            for run in runs:
                if run.state in ("planned", "running"):
                    run.state, run.reason, run.ended = "failed", exc.message, utcnow()
                    self.on_event("end", run, "")
            self.sweep.save()
        finally:
            if self.remote is not None:
                self.remote.close()

    def _one(self, run: PlannedRun, install: rmt.RunnerInstall, layout: HostLayout) -> None:
        r, sweep = self.remote, self.sweep
        src, log = layout.run_dir(run), layout.launch_log(run)
        run.state, run.started, run.ended, run.reason, run.outcome = "running", utcnow(), None, "", None
        sweep.save()
        args = ["run", run.workload, "--out", src, "--seed", str(run.seed), "--mode", run.mode,
                "--scale", run.scale, "--gpus", str(run.gpus) if run.gpus else "all",
                "--max-minutes", f"{self.timeout_s / 60:.3f}"]
        r.run(cmd_clear(src, log), timeout=60)
        started = r.run(rmt.cmd(["mkdir", "-p", layout.base], "&&", ["setsid", "nohup", *install.argv(*args)],
                                ">", shlex.quote(log), "2>&1", "<", "/dev/null", "&", "echo", "$!"), timeout=60)
        pid = started.stdout.strip()
        if not pid.isdigit():
            raise RunError(f"{self.host.name}: could not start {run.run_id}: {started.stderr.strip()}")
        self.current_pid = pid
        state = self._wait(src, pid)
        self.current_pid = None
        dest = sweep.run_dir(run)
        problems = fetch_run(r, src, dest)
        status = _read_json(dest / "status.json")
        if state == "timeout":
            run.state, run.reason = "failed", f"timed out after {self.timeout_s:.0f} s"
        elif problems:
            tail = _last_line(r.run(["tail", "-n", "5", log], check=False).stdout) if state == "gone" else ""
            r.get(log, dest.with_name(run.run_id + ".launch.log"))
            run.state = "failed"
            run.reason = (f"runner ended without a complete run directory: {tail}" if state == "gone" and tail
                          else "; ".join(problems))
        else:
            run.outcome = status.get("outcome")
            run.state = "complete"
            run.reason = status.get("reason", "")
        run.ended = utcnow()
        sweep.save()

    def _wait(self, src: str, pid: str) -> str:
        """Poll until the run directory is complete ('done'), the runner vanished ('gone') or time ran out."""
        probe = rmt.cmd(["test", "-f", f"{src}/{checksums.SUMS}"], "&&", "echo done", "||",
                        "{", ["kill", "-0", pid], "2>/dev/null", "&&", "echo running", "||", "echo gone;", "}")
        deadline = time.monotonic() + self.timeout_s + 60  # the runner aborts itself first
        while True:
            state = self.remote.run(probe, timeout=60, check=False).stdout.strip()
            if state in ("done", "gone"):
                if state == "gone":  # it may have finished between the two tests
                    again = self.remote.run(probe, timeout=60, check=False).stdout.strip()
                    state = "done" if again == "done" else "gone"
                return state
            if time.monotonic() > deadline:
                self.stop()
                return "timeout"
            time.sleep(POLL_S)

    def stop(self, grace_s: float = 20) -> None:
        """Stop the current run's whole process group: TERM, then KILL after ``grace_s``."""
        pid = self.current_pid
        if not pid or self.remote is None:
            return
        self.remote.run(["kill", "-TERM", "--", f"-{pid}"], check=False, timeout=30)
        end = time.monotonic() + grace_s
        while time.monotonic() < end:
            if not self.remote.run(["kill", "-0", pid], check=False, timeout=30).ok:
                return
            time.sleep(0.5)
        self.remote.run(["kill", "-KILL", "--", f"-{pid}"], check=False, timeout=30)


def cmd_clear(src: str, log: str) -> str:
    """Move an earlier attempt's remote run directory aside (kept, never deleted)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return rmt.cmd("if", ["test", "-e", src], ";", "then", ["mv", src, f"{src}.attempt-{stamp}"], ";", "fi;",
                   ["rm", "-f", log])


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


@dataclass
class SweepResult:
    sweep: Sweep

    @property
    def failed(self) -> list[PlannedRun]:
        return [r for r in self.sweep.runs if r.state != "complete" or r.outcome != "success"]

    @property
    def ok(self) -> bool:
        return not self.failed


def default_name(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("sweep-%Y%m%d-%H%M%S")


def run_sweep(hosts: list[Host], runs: list[PlannedRun], results_dir: Path, name: str, *,
              timeout_s: float = 3600, options: dict | None = None,
              on_event: Callable[[str, PlannedRun, str], None] | None = None) -> SweepResult:
    """Run the plan on its hosts (in parallel, one run at a time per host) and collect it."""
    if not NAME_RE.match(name):
        raise ConfigError(f"--name: {name!r} is not a sweep name (letters, digits, . _ -)")
    sweep = Sweep.open(Path(results_dir) / name, name, runs, options or {})
    for h in hosts:
        sweep.hosts.setdefault(h.name, {}).update(
            address=h.address, gpu_model=h.gpu_model, gpu_count=h.gpu_count, stack=h.stack, groups=list(h.groups))
    sweep.save()
    events = on_event or (lambda kind, run, where: None)
    workers = [HostWorker(sweep, h, timeout_s=timeout_s, on_event=events) for h in hosts]
    threads = [threading.Thread(target=w, name=f"sweep-{w.host.name}", daemon=True) for w in workers]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        for w in workers:
            try:
                w.stop(grace_s=10)
            except HostError:
                pass
        for run in sweep.runs:
            if run.state == "running":
                run.state, run.reason, run.ended = "failed", "interrupted (Ctrl-C)", utcnow()
        sweep.save()
        raise
    sweep.save()
    return SweepResult(sweep)


@dataclass
class CollectResult:
    fetched: int = 0
    verified: int = 0
    problems: list[str] = field(default_factory=list)


def collect(sweep_root: Path, inventory_path: str | Path) -> CollectResult:
    """Fetch again every run of a saved sweep whose local copy is missing or fails verification."""
    from lab import inventory as inv

    state_file = Path(sweep_root) / "sweep.json"
    if not state_file.is_file():
        raise ConfigError(f"{sweep_root}: not a sweep directory (no sweep.json)")
    try:
        doc = json.loads(state_file.read_text())
        runs = [PlannedRun(**{k: v for k, v in r.items() if k != "run_id"}) for r in doc["runs"]]
        name = doc["name"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{state_file}: unreadable sweep state ({exc})") from None
    sweep = Sweep(root=Path(sweep_root), name=name, runs=runs, hosts=doc.get("hosts", {}),
                  created=doc.get("created", utcnow()), options=doc.get("options", {}))
    result = CollectResult()
    todo = [r for r in runs if r.state != "planned" and checksums.verify(sweep.run_dir(r))]
    result.verified = len(runs) - len(todo) - sum(1 for r in runs if r.state == "planned")
    if not todo:
        return result
    hosts = {h.name: h for h in inv.load(inventory_path).select(sorted({r.host for r in todo}))}

    def fetch_host(host: Host) -> None:
        with rmt.connect(host) as remote:
            layout = HostLayout(remote.expand(host.workdir.rstrip("/")) + f"/sweeps/{name}")
            for run in (r for r in todo if r.host == host.name):
                src = layout.run_dir(run)
                if checksums.SUMS not in remote.listdir(src):
                    result.problems.append(f"{host.name} {run.run_id}: no complete run directory on the host")
                    continue
                problems = fetch_run(remote, src, sweep.run_dir(run))
                result.fetched += 1
                if problems:
                    result.problems.append(f"{host.name} {run.run_id}: {'; '.join(problems)}")
                    run.state, run.reason = "failed", "; ".join(problems)
                    continue
                status = _read_json(sweep.run_dir(run) / "status.json")
                run.state, run.outcome, run.reason = "complete", status.get("outcome"), status.get("reason", "")
                result.verified += 1

    for host_name, outcome in rmt.on_hosts(hosts.values(), fetch_host).items():
        if isinstance(outcome, Exception):
            msg = outcome.message if isinstance(outcome, GpulabError) else f"{type(outcome).__name__}: {outcome}"
            result.problems.append(f"{host_name}: {msg}")
    sweep.save()
    return result
