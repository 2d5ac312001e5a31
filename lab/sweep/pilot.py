"""Compile once, then fan out: which run a sweep's unit starts next (README "Sweeps").

Runs of one *compile group* (same stack and GPU model, workload, scale, mode, GPUs per node and node
count: what names the runner's compiled-artifacts file, runner.compilecache.key) would each compile
the same graphs cold when hosts start together. So the first unit to start a group's run is its
*pilot*; the other units of the group start other work meanwhile (runs of groups whose artifacts the
sweep already holds, runs of groups they pilot themselves, runs that compile nothing) and only when
they have nothing else wait for the pilot's artifacts. The wait ends when the controller has
collected the pilot's artifacts (``ready``: the others load them), or when the pilot's run ended
without any, failed, lost its host, or passed ``wait_s`` after its start (``released``: each host
compiles for itself, as without a pilot). ``wait_s`` 0 turns the whole rule off.

``pick`` is the rule, plain data in and out (``claim``: the same rule for a unit that submits its runs
to Slurm in batches); ``Pilots`` holds the groups for the sweep's threads (lab.sweep.unitworker,
lab.sweep.slurmworker); ``simulate`` replays a plan with equal run times for ``invoke sweep --dry-run``.
Runs on the CPU have no group: the runner compiles only on GPUs (runner/README "Compiled kernels").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.sweep import compiled
from lab.core.fields import RunState


@dataclass(frozen=True, order=True)
class Key:
    """A compile group: the runs whose compiled graphs are the same."""

    stack: str
    gpu_model: str
    workload: str
    scale: str
    mode: str
    gpus: int
    nodes: int = 1

    def label(self) -> str:
        g = {-1: "all GPUs", 0: "CPU"}.get(self.gpus, f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}")
        n = f" x {self.nodes} nodes" if self.nodes > 1 else ""
        return f"{self.workload} {self.scale} {self.mode} {g}{n} on {self.gpu_model} ({self.stack})"


def key_of(run, host, cpu: bool = False) -> Key | None:
    """The compile group of a planned run on ``host`` (its node 0); None for a run that compiles nothing
    (a CPU run, unless ``cpu``: gpulab.sweep.compile_cpu)."""
    if run.gpus == 0 and not cpu:
        return None
    return Key(
        str(host.stack), str(host.gpu_model), run.workload, run.scale, run.mode, int(run.gpus), max(1, len(run.nodes))
    )


@dataclass
class Group:
    """open: no run started yet; piloting: ``pilot`` runs the first one since ``since``; ready: its
    artifacts are collected; released: every unit compiles for itself."""

    state: str = "open"
    pilot: str | None = None
    since: float = 0.0
    why: str = ""


@dataclass(frozen=True)
class Pick:
    index: int | None  # the run to start (its index in the unit's pending list), None: wait
    role: str = ""  # pilot | warm (artifacts ready) | cold (released) | plain (no group)
    wake: float | None = None  # waiting: the time a pilot's wait ends at the latest
    waiting_on: tuple = ()  # waiting: (group key, pilot unit) pairs


def _state(g: Group | None, now: float, wait_s: float) -> str:
    if g is None:
        return "open"
    if g.state == "piloting" and now >= g.since + wait_s:
        return "released"
    return g.state


def pick(unit: str, keys: list, groups: dict, now: float, wait_s: float) -> Pick:
    """The next run of ``unit`` among its pending runs (their group keys, None for none, in plan order).

    First a run of a group nobody started (the unit becomes its pilot: the sooner each group
    compiles, the sooner every unit has warm work), then the first run that need not wait (a group
    ready or released, or no group); else wait for the pilots of the remaining groups, at most
    until the earliest of their deadlines."""
    if wait_s <= 0:
        return Pick(0, "plain") if keys else Pick(None)
    first_free = None
    waits = []
    for i, k in enumerate(keys):
        if k is None:
            first_free = i if first_free is None else first_free
            continue
        g = groups.get(k)
        st = _state(g, now, wait_s)
        if st == "open":
            return Pick(i, "pilot")
        if st in ("ready", "released") or g.pilot == unit:
            if first_free is None:
                first_free = i
        else:
            waits.append((g.since + wait_s, k, g.pilot))
    if first_free is not None:
        k = keys[first_free]
        st = "plain" if k is None else _state(groups.get(k), now, wait_s)
        return Pick(first_free, {"plain": "plain", "ready": "warm"}.get(st, "cold"))
    if not waits:
        return Pick(None)
    return Pick(None, wake=min(w[0] for w in waits), waiting_on=tuple(sorted({(w[1], w[2]) for w in waits})))


def start(groups: dict, unit: str, key, role: str, now: float, wait_s: float) -> None:
    """Record that ``unit`` started a run of ``key`` in ``role`` (pick's answer)."""
    if key is None:
        return
    g = groups.setdefault(key, Group())
    if role == "pilot":
        g.state, g.pilot, g.since = "piloting", unit, now
    elif g.state == "piloting" and _state(g, now, wait_s) == "released":
        g.state, g.why = "released", f"no artifacts from {g.pilot} within {wait_s:g} s"


def claim(unit: str, keys: list, groups: dict, now: float, wait_s: float) -> tuple[list[tuple[int, str]], Pick]:
    """What a unit that hands all its runs to a scheduler at once (the Slurm backend) may submit now:
    ``pick``'s rule run by run until it says wait, each pick recorded (``start``). Returns the (index,
    role) pairs to submit, in plan order, and the last pick (its ``wake`` and ``waiting_on`` when runs are
    left waiting for another unit's pilot)."""
    left, go = list(range(len(keys))), []
    while left:
        p = pick(unit, [keys[i] for i in left], groups, now, wait_s)
        if p.index is None:
            return sorted(go), p
        i = left.pop(p.index)
        start(groups, unit, keys[i], p.role, now, wait_s)
        go.append((i, p.role))
    return sorted(go), Pick(None)


def artifacts(groups: dict, key) -> None:
    """The controller holds ``key``'s artifacts: the group's waiting units may start, warm."""
    g = groups.setdefault(key, Group())
    g.state = "ready"


def ended(groups: dict, unit: str, key, why: str) -> None:
    """``unit``'s pilot run of ``key`` ended (``why``) without artifacts: the others compile for themselves."""
    g = groups.get(key)
    if g is not None and g.state == "piloting" and g.pilot == unit:
        g.state, g.why = "released", why


# --------------------------------------------------------------------------- the sweep's threads


class Pilots:
    """The compile groups of one sweep, shared by its unit threads."""

    def __init__(self, wait_s: float, ready=(), clock=time.monotonic, cpu: bool = False):
        self.wait_s, self.clock, self.cpu = float(wait_s), clock, bool(cpu)
        self.groups: dict = {k: Group(state="ready") for k in ready}
        self.cv = threading.Condition()

    def next(self, unit: str, keys: list, stop: threading.Event, waiting=None) -> Pick | None:
        """Block until ``unit`` may start one of its pending runs; None when ``stop`` is set.
        ``waiting(pick)`` is told each time the unit has to wait (progress lines)."""
        told = None
        with self.cv:
            while not stop.is_set():
                now = self.clock()
                p = pick(unit, keys, self.groups, now, self.wait_s)
                if p.index is not None:
                    start(self.groups, unit, keys[p.index], p.role, now, self.wait_s)
                    return p
                if p.wake is None:
                    return None
                if waiting is not None and p.waiting_on != told:
                    waiting(p)
                    told = p.waiting_on
                self.cv.wait(timeout=max(0.05, min(1.0, p.wake - now)))
            return None

    def claim(self, unit: str, keys: list) -> tuple[list[tuple[int, str]], Pick]:
        """``claim`` on the sweep's groups, without blocking (the Slurm backend polls its queue anyway)."""
        with self.cv:
            return claim(unit, keys, self.groups, self.clock(), self.wait_s)

    def pilots(self, unit: str, key) -> bool:
        with self.cv:
            g = self.groups.get(key)
            return g is not None and g.state == "piloting" and g.pilot == unit

    def artifacts(self, key) -> None:
        with self.cv:
            artifacts(self.groups, key)
            self.cv.notify_all()

    def ended(self, unit: str, key, why: str) -> None:
        with self.cv:
            ended(self.groups, unit, key, why)
            self.cv.notify_all()


CHECK_S = 5.0  # while a unit pilots a group, how often the controller looks for its artifacts on the host
NOTE = {
    "pilot": " (pilot: compiles it for the hosts of its GPU model and stack)",
    "warm": " (the pilot's compiled artifacts)",
    "cold": " (compiles for itself: no artifacts from its pilot)",
    "plain": "",
    "": "",
}


class Seat:
    """One unit's side (lab.sweep.unitworker): its next run, and the artifacts of the group it pilots.
    ``pull()`` copies the unit's new artifacts into the sweep's store; ``status(unit, text)`` shows a wait."""

    def __init__(self, pilots: Pilots, unit: str, host, sweep_root: Path, pull, status):
        self.pilots, self.unit, self.host, self.root = pilots, unit, host, Path(sweep_root)
        self.pull, self.status = pull, status
        self.piloting = None  # the group whose first run this unit runs now

    def next(self, left: list, stop: threading.Event) -> tuple:
        """(the run to start next, its role); (None, "") when stopped or nothing is left."""
        if not left:
            return None, ""
        keys = [
            None if r.token else key_of(r, self.host, self.pilots.cpu) for r in left
        ]  # a run to adopt compiles nothing here

        def waiting(p: Pick) -> None:
            on = "; ".join(f"{k.label()} from {u}" for k, u in p.waiting_on)
            self.status(self.unit, f"waiting for compiled artifacts: {on}")

        p = self.pilots.next(self.unit, keys, stop, waiting)
        if p is None:
            return None, ""
        self.piloting = keys[p.index] if p.role == "pilot" else None
        return left[p.index], p.role

    def check(self) -> None:
        """While piloting: pull the host's artifacts; once the store holds the group's, its waiters go."""
        if self.piloting is None:
            return
        self.pull()
        if compiled.held(self.root, self.piloting):
            self.pilots.artifacts(self.piloting)
            self.piloting = None

    def ended(self, run) -> None:
        """The piloted run ended (its artifacts were pulled when it was collected), or the thread failed (None)."""
        key, self.piloting = self.piloting, None
        if key is None:
            return
        if run is not None and compiled.held(self.root, key):
            self.pilots.artifacts(key)
        else:
            why = f"{run.run_id} {run.state}: {run.reason}" if run is not None else "controller error"
            self.pilots.ended(self.unit, key, f"the pilot's run left no artifacts ({why})")


def for_sweep(sweep_root: Path, runs: list, hosts: dict, settings) -> Pilots:
    """The sweep's groups (``settings``: lab.sweep.hostrun.Settings); those whose artifacts its store
    holds already (a resumed sweep) start ready."""
    cpu = bool(settings.compile_cpu)
    keys = {key_of(r, hosts[r.hosts[0]], cpu) for r in runs if r.hosts[0] in hosts} - {None}
    return Pilots(settings.pilot_wait_s, ready=[k for k in keys if compiled.held(sweep_root, k)], cpu=cpu)


# --------------------------------------------------------------------------- replay (the plan, tests)


@dataclass
class Replay:
    order: list = field(default_factory=list)  # (time, unit, index in the unit's list, role)
    pilots: dict = field(default_factory=dict)  # group key -> the unit that piloted it
    idle: list = field(default_factory=list)  # (time, unit, the keys it waited on)


def simulate(units: dict, wait_s: float, duration=None, fails=frozenset(), ready=()) -> Replay:
    """Run ``units`` ({unit: [key or None, ...]}) through ``pick`` on a clock: run i of a unit takes
    ``duration(unit, i)`` (default 1), a pilot's artifacts arrive when its run ends unless
    ``(unit, i)`` is in ``fails``. Units start in name order; events at one time in that order too."""
    duration = duration or (lambda u, i: 1.0)
    groups: dict = {k: Group(state="ready") for k in ready}
    pending = {u: list(range(len(ks))) for u, ks in units.items()}
    busy: dict = {}  # unit -> (end time, index, role)
    out = Replay()
    now = 0.0
    for _ in range(10 * sum(len(v) for v in units.values()) + 10):
        for u in sorted(busy):
            end, i, role = busy[u]
            if end <= now:
                del busy[u]
                k = units[u][i]
                if role == "pilot":
                    if (u, i) in fails:
                        ended(groups, u, k, "failed")
                    else:
                        artifacts(groups, k)
        for u in sorted(units):
            if u in busy or not pending[u]:
                continue
            keys = [units[u][i] for i in pending[u]]
            p = pick(u, keys, groups, now, wait_s)
            if p.index is None:
                if p.wake is not None:
                    out.idle.append((now, u, p.waiting_on))
                continue
            i = pending[u].pop(p.index)
            start(groups, u, units[u][i], p.role, now, wait_s)
            if p.role == "pilot":
                out.pilots[units[u][i]] = u
            out.order.append((now, u, i, p.role))
            busy[u] = (now + max(1e-6, duration(u, i)), i, p.role)
        if not busy and not any(pending.values()):
            return out
        times = [b[0] for b in busy.values()]
        times += [g.since + wait_s for g in groups.values() if g.state == "piloting" and g.since + wait_s > now]
        now = min(times) if times else now
    raise RuntimeError("simulate: the units did not finish")  # pick's rule never leaves a unit stuck


def describe(runs: list, hosts: dict, wait_s: float, cpu: bool = False) -> list[str]:
    """The plan's compile groups and their pilots, for ``invoke sweep --dry-run`` (equal run times)."""
    if wait_s <= 0:
        return ["compile once, then fan out: off (gpulab.sweep.pilot_wait_s 0): every host compiles for itself"]
    units: dict = {}
    for r in runs:
        if r.state != RunState.COMPLETE and r.hosts[0] in hosts:
            units.setdefault("+".join(r.hosts), []).append(key_of(r, hosts[r.hosts[0]], cpu))
    shared = {}
    for u, ks in units.items():
        for k in set(ks) - {None}:
            shared.setdefault(k, set()).add(u)
    replay = simulate(units, wait_s)
    lines = [
        f"compile once, then fan out: {len(shared)} compile group(s); the first host to start a group "
        f"pilots it, the others load its artifacts (wait at most {wait_s:g} s, gpulab.sweep.pilot_wait_s)"
    ]
    for k in sorted(shared):
        others = sorted(shared[k] - {replay.pilots.get(k)})
        lines.append(
            f"  {k.label()}: pilot {replay.pilots.get(k, '?')}" + (f", then {', '.join(others)}" if others else "")
        )
    return lines
