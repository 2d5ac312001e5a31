"""The thread that runs a unit's planned runs (a host, or k hosts for --nodes k)
one after another: lock, start, poll, stop past the limit or on Ctrl-C, fetch,
verify, record; and, on resume, adopt a run a previous controller started.
"""

from __future__ import annotations

import os
import secrets
import threading
import time

from lab.core import advice
from lab.sweep import compiled, gate, pilot
from lab.core import paths
from lab.core import writes
from lab.core.errors import GpulabError
from lab.sweep.plan import COMPLETE_OUTCOMES, PlannedRun, utcnow
from lab.sweep.state import Sweep, read_run_json, run_outcome
from lab.sweep.hostrun import Settings, last_epoch, run_state, stop_run, wait_gone
from lab.sweep.node import HostLost, Node, fetch_run, free_space, launch, runner_args
from runner.rundir import STATUS
from lab.core.fields import RunState

EPOCH_S = 5.0  # how often the live table asks a running run's epoch (one read-only command)


def keep_attempt(sweep: Sweep, run: PlannedRun, host: str) -> None:
    """Move an earlier attempt's local copy to ``.attempts/`` (never deleted; reports skip it)."""
    d = sweep.run_dir(run, host)
    if d.exists():
        dest = paths.child(
            sweep.root,
            ".attempts",
            host,
            f"{run.run_id}.attempt-{max(1, run.attempts - 1)}",
            what=f"{sweep.state_file}: earlier attempt of {host}",
        )
        writes.folder(dest.parent, "earlier attempts", root=sweep.root)
        writes.remove(dest)
        os.replace(d, dest)


class UnitWorker:
    """Runs one unit's share of a sweep (a host, or the hosts of a multi-node run), one run after another."""

    def __init__(
        self,
        sweep: Sweep,
        nodes: list[Node],
        runs: list[PlannedRun],
        settings: Settings,
        progress,
        stop: threading.Event,
        pilots: pilot.Pilots | None = None,
        memory=None,
        held: dict[str, dict[int, str]] | None = None,
    ):
        self.sweep, self.nodes, self.runs, self.settings = sweep, nodes, runs, settings
        self.memory = memory  # the history's side of the sweep (lab.sweep.gate); None: no database
        self.held = held if held is not None else {}  # host -> {GPU: why}: quarantined during this sweep
        self.progress, self.stop = progress, stop
        self.unit = "+".join(n.host.name for n in nodes)
        self.done = False
        self.seat = (
            pilot.Seat(
                pilots, self.unit, nodes[0].host, sweep.root, lambda: self._share_compiled("pull"), progress.status
            )
            if pilots is not None
            else None
        )  # None: plan order

    def __call__(self) -> None:
        try:
            todo = [r for r in self.runs if r.state != RunState.COMPLETE]
            left = list(todo)
            for i in range(1, len(todo) + 1):
                if self.stop.is_set():
                    break
                run, role = self.seat.next(left, self.stop) if self.seat else (left[0], "")
                if run is None:
                    break
                left.remove(run)
                self.progress.run_started(
                    self.unit,
                    i,
                    len(todo),
                    run.run_id,
                    " (resumed: what the host did comes first)" if run.token else pilot.NOTE[role],
                )
                try:
                    self._one(run)
                except HostLost as exc:
                    self._stop_all(run)
                    self._end(run, RunState.FAILED, exc.message)
                    for rest in left:
                        rest.state, rest.reason = RunState.FAILED, f"not run: {exc.host} lost ({exc.message})"
                    self.sweep.save()
                    self.progress.unit_done(self.unit, f"lost: {exc.host}")
                    return
                except GpulabError as exc:
                    self._end(run, RunState.FAILED, exc.message)
                finally:
                    if self.seat:
                        self.seat.ended(run)
                    for node in self.nodes:
                        try:
                            node.call(lambda r: node.lock.release())
                        except (HostLost, GpulabError):
                            pass
                self.progress.run_ended(self.unit, run)
            self.progress.unit_done(self.unit, "interrupted" if self.stop.is_set() else "done")
        except Exception as exc:  # never lose the state to a bug in one thread
            if self.seat:
                self.seat.ended(None)
            self._fail_running(exc)
            raise
        finally:
            self.done = True

    def _fail_running(self, exc: Exception) -> None:
        """A bug in this thread: its running runs are failed with the error, and the state is saved."""
        for run in self.runs:
            if run.state == RunState.RUNNING:
                run.state, run.reason = RunState.FAILED, f"controller error: {type(exc).__name__}: {exc}"
        self.sweep.save()

    def _end(self, run: PlannedRun, state: RunState, reason: str, outcome: str | None = None) -> None:
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
                    self._end(
                        run,
                        RunState.FAILED if not self.stop.is_set() else RunState.INTERRUPTED,
                        f"{node.host.name} busy: lock held by {busy.describe()}",
                    )
                    return False
                self.progress.status(self.unit, f"waiting for {node.host.name}: held by {busy.describe()}")
                time.sleep(max(self.settings.poll_s, 2.0))
        return True

    def _free_space(self, node: Node) -> str | None:
        return free_space(node, self.settings.min_free_mb)

    def _args(self, run: PlannedRun, node: Node, rank: int) -> list[str]:
        return runner_args(run, node, rank, self.nodes, self.settings, self._limit_s(run))

    def _launch(self, run: PlannedRun, node: Node, rank: int) -> str | None:
        return launch(run, node, self._args(run, node, rank))

    def _poll(self, run: PlannedRun, node: Node) -> str:
        """done, running or gone; the runner by its pid, or (adopted) by its processes' token."""
        src = node.layout.run_dir(run)
        lock = node.lock.path if node.lock.held else ""  # the holder keeps its heartbeat going
        probe = lambda r: run_state(r, src, run.token, lock, node.pid)  # noqa: E731
        state = node.call(probe)
        if state in ("gone", "none"):  # it may have finished between the two tests
            state = node.call(probe)
        return "gone" if state == "none" else state

    def _stop_all(self, run: PlannedRun) -> bool:
        killed = False
        for node in self.nodes:
            try:
                killed |= node.call(
                    lambda r: stop_run(r, run.token, node.pid, self.settings.stop_grace_s, self.settings.poll_s)
                )
            except HostLost:
                pass
        return killed

    def _one(self, run: PlannedRun) -> None:
        if run.token and self._adopt(run):  # a token: this sweep started the run before
            return
        held = gate.held_reason(run, self.held)
        if held:
            self._end(run, RunState.FAILED, held)
            return
        run.token = f"gl-{secrets.token_hex(8)}"
        run.state, run.started, run.ended, run.reason, run.outcome = RunState.RUNNING, utcnow(), None, "", None
        self.sweep.save()
        if not self._lock_all(run):
            return
        for node in self.nodes:
            problem = self._free_space(node)
            if problem:
                self._end(run, RunState.FAILED, problem)
                return
        run.attempts += 1
        self._share_compiled("push")
        for node in self.nodes:
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
        next_check = t0 + pilot.CHECK_S
        next_epoch = t0
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
            self.progress.status(self.unit, "running")  # the run's name has its own column
            if getattr(self.progress, "live_mode", False) and time.monotonic() >= next_epoch:  # the live table's
                next_epoch = time.monotonic() + EPOCH_S  # epoch column
                head = self.nodes[0]
                self.progress.epoch(self.unit, head.call(lambda r: last_epoch(r, head.layout.run_dir(run))))
            if self.seat and self.seat.piloting is not None and time.monotonic() >= next_check:
                self.seat.check()  # the pilot's artifacts, once written, release the group's other hosts
                next_check = time.monotonic() + pilot.CHECK_S
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
        states = {n.host.name: n.call(lambda r: run_state(r, n.layout.run_dir(run), run.token)) for n in self.nodes}
        if "running" in states.values():
            self.progress.print(
                f"  [{self.unit}] {run.run_id}: still running on the host since before this resume; waiting for it"
            )
            if not self._take_over_locks(run):
                return True  # stopped (Ctrl-C) or another controller holds the host: recorded by _end
        elif set(states.values()) != {"done"}:
            return False
        else:
            self.progress.print(f"  [{self.unit}] {run.run_id}: finished on the host before this resume; fetching it")
        # the host ran it: one launch, even where the killed controller did not live to save its count
        run.attempts = max(run.attempts, 1)
        run.state, run.reason, run.outcome, run.ended = RunState.RUNNING, "", None, None
        self.sweep.save()
        for node in self.nodes:
            node.pid = None
        self._watch(run)
        if run.state == RunState.COMPLETE:
            run.reason = (run.reason + "; " if run.reason else "") + "adopted on resume (the host had run it)"
            self.sweep.save()
        return run.state != RunState.FAILED

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
                    self._end(
                        run,
                        RunState.INTERRUPTED if self.stop.is_set() else RunState.FAILED,
                        f"{node.host.name} busy: lock held by {busy.describe()}",
                    )
                    return False
                self.progress.status(self.unit, f"waiting for {node.host.name}: held by {busy.describe()}")
                time.sleep(max(self.settings.poll_s, 2.0))
        return True

    def _share_compiled(self, way: str) -> None:
        """Pull the hosts' compiled artifacts into the sweep's store, or push the store's to them
        (lab.sweep.compiled); a failure costs a compilation, never the run."""
        for node in self.nodes:
            store = compiled.store_dir(self.sweep.root, node.host.stack, node.host.gpu_model)
            fn = compiled.pull if way == "pull" else compiled.push
            if node.lost:
                continue
            try:  # not node.call: a folder the host refuses is no lost connection
                names = fn(node.remote, node.layout.workdir, store)
            except (GpulabError, OSError):
                continue
            if names:
                self.progress.status(
                    self.unit, f"compiled artifacts {'from' if way == 'pull' else 'to'} {node.host.name}: {len(names)}"
                )

    def _collect(self, run: PlannedRun, ended: str, states: dict[str, str], elapsed: float) -> None:
        self._share_compiled("pull")
        problems: list[str] = []
        status: dict = {}
        for rank, node in enumerate(self.nodes):
            keep_attempt(self.sweep, run, node.host.name)
            dest = self.sweep.run_dir(run, node.host.name)
            self.progress.status(self.unit, f"fetching {node.host.name}")
            problems += [f"{node.host.name}: {x}" for x in fetch_run(run, node, dest, self.settings.fetch_retries)]
            if rank == 0:
                status = read_run_json(dest / STATUS)
        outcome, why = run_outcome(status)
        limit = f"{self._limit_s(run) / 60:g} min"
        if ended == "interrupted":
            self._end(
                run,
                RunState.INTERRUPTED,
                "interrupted (Ctrl-C); the run was stopped" + (f": {why}" if why else ""),
                outcome,
            )
        elif ended in ("killed", "timeout"):
            self._end(
                run,
                RunState.FAILED,
                f"timed out: still running {elapsed:.0f} s after the start (limit {limit}); "
                + ("its processes were killed" if ended == "killed" else "stopped with SIGTERM"),
                outcome,
            )
        elif problems:
            self._end(run, RunState.FAILED, "; ".join(problems), outcome)
        elif outcome in COMPLETE_OUTCOMES:
            self._end(run, RunState.COMPLETE, why, outcome)
        elif outcome == "aborted" and "time limit" in why:
            self._end(run, RunState.FAILED, f"timed out: {why} (the runner stopped it)", outcome)
        else:
            self._end(run, RunState.FAILED, f"run {outcome or 'ended without status'}: {why}", outcome)
        try:
            self._remember(run)
        except Exception as exc:  # the run is recorded in sweep.json already; never lose the unit
            self.progress.print(f"  [{self.unit}] history: not recorded: {type(exc).__name__}: {exc}")

    def _remember(self, run: PlannedRun) -> None:
        """The run into the history as soon as it is collected; after a failure, its health epilogue
        (lab.sweep.gate.after_run). A database that fails: one line, the run stays in results/."""
        for node in self.nodes if run.state != RunState.COMPLETE else ():
            got = gate.after_run(
                node.host,
                run.run_id,
                self.sweep.run_dir(run, node.host.name),
                run.gpu_ids,
                self.memory,
                lambda line: self.progress.print(f"  [{self.unit}] {line}"),
            )
            self.held.setdefault(node.host.name, {}).update(got)
        first = self.sweep.run_dir(run, self.nodes[0].host.name)
        if self.memory is not None and (first / STATUS).is_file():
            try:
                self.memory.record_run(first)
            except GpulabError as exc:
                self.progress.print(
                    advice.carry(
                        f"  [{self.unit}] history: not recorded: {exc.message}; {run.run_id} "
                        f"stays in results/ (`invoke history.import {self.sweep.root}` later)"
                    )
                )
