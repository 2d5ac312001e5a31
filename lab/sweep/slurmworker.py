"""The Slurm backend of a sweep: a unit's planned runs as one Slurm job array per GPU count.

The plan is the same list of run units as gpulab's own SSH controller runs (lab.sweep.plan); only
how a unit's runs start differs. For a unit (a host, or the k hosts of a multi-node run) the runs of
one GPU count become one ``sbatch --array=0-N%K`` job: task i is run i, pinned to the unit's nodes
(``--nodelist``, ``--nodes k``), with ``--gres=gpu:N`` (none for CPU runs) so that Slurm, not gpulab,
hands out the GPUs; partition, account, QOS, constraint and time limit come from ``gpulab.slurm``.
Each task runs ``python -m runner run ... --out <the same run directory>`` on its node (one task per
node through ``srun`` for a multi-node run: the runner's own rendezvous, its node rank, node count and
endpoint taken from Slurm's ``SLURM_NODEID``, ``SLURM_NNODES`` and the job's first node). The run
directories are fetched back over SSH and checked exactly as the SSH backend does (UnitWorker._collect),
so collect, report and the history do not know which backend ran a unit.

Compile once, then fan out (lab.sweep.pilot) holds here too: a unit submits at once the runs the rule
lets go (runs of groups it pilots, of groups whose artifacts the sweep holds, of no group); a run of a
group another unit pilots is held back on the controller, not in Slurm, until the controller has pulled
that pilot's artifacts (pushed to the unit's hosts right before its next array is submitted), or the
pilot ended without them or passed ``pilot_wait_s``. (A Slurm dependency could order the jobs but not
carry the artifacts from one host to the other: the controller does that between the two.)

A unit's arrays run one after another: a later one (runs a pilot released, another GPU count, what a
resume submits beside tasks it adopted) waits for the unit's unfinished jobs (``--dependency=afterany``),
so a host runs at most ``max_running`` of the sweep's runs at once (one by default), as the ssh backend
runs one at a time; units of one sweep share no host.

sweep.json records each run's ``slurm_job`` (``<array job id>_<task>``). On resume, a task Slurm still
runs is waited for, a finished one is collected, and only a run that never ran is submitted again.
Ctrl-C cancels the jobs this sweep submitted (``scancel`` of their ids) and nothing else. A task that
Slurm ended (time limit, preemption, node failure, cancelled) is recorded with Slurm's state and reason
(``scontrol show job``: no accounting database needed).
"""

from __future__ import annotations

import math
import secrets
import shlex
import time
from dataclasses import dataclass

from lab.core.settings import default as declared_default
from lab.core.errors import GpulabError, HostError
from lab.hosts import slurm
from lab.sweep import compiled, pilot
from lab.sweep.plan import PlannedRun, TOKEN_VAR, utcnow
from lab.sweep.hostrun import run_state
from lab.sweep.node import Node
from lab.sweep.unitworker import UnitWorker
from lab.core.fields import RunState

ENDED_BY_SLURM = ("TIMEOUT", "PREEMPTED", "NODE_FAIL", "CANCELLED", "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL", "REVOKED")


@dataclass
class SlurmSettings:
    """gpulab.slurm.*: where and how a sweep's jobs are submitted."""

    partition: str = declared_default("slurm.partition")  # each one declared in lab.core.settings
    account: str = declared_default("slurm.account")
    qos: str = declared_default("slurm.qos")
    constraint: str = declared_default("slurm.constraint")
    time_limit_minutes: float | None = None  # None (auto): each array's longest run limit plus the kill margin
    max_running: int = declared_default("slurm.max_running")  # the array's %K: tasks of one unit at once
    poll_s: float = declared_default("slurm.poll_s")  # seconds between two looks at the queue


def node_name(node: Node) -> str:
    """The host's Slurm node name: its inventory name (quarantine and drain use the same names)."""
    return slurm.check_node(node.host.name)


class SlurmUnitWorker(UnitWorker):
    """A unit's runs as Slurm array jobs (see the module docstring); the same callable as UnitWorker."""

    def __init__(
        self,
        sweep,
        nodes,
        runs,
        settings,
        progress,
        stop,
        pilots: pilot.Pilots | None = None,
        memory=None,
        held=None,
        slurm_settings: SlurmSettings | None = None,
    ):
        super().__init__(sweep, nodes, runs, settings, progress, stop, None, memory, held)
        self.pilots = pilots  # compile once, then fan out: claimed in batches (lab.sweep.pilot.claim)
        self.piloting: dict = {}  # compile group -> the run of this unit that compiles it for the others
        self._told: tuple = ()  # the pilots this unit last said it waits for
        self.ss = slurm_settings or SlurmSettings()
        self.jobs: set[str] = set()
        self.job_name = f"gpulab-{sweep.name}"  # a job id of sweep.json named otherwise is another's now

    # -- the unit -------------------------------------------------------------
    def __call__(self) -> None:
        try:
            todo = [r for r in self.runs if r.state != RunState.COMPLETE]
            watched = self._adopt_all(todo)
            fresh = [r for r in todo if r not in watched and r.state != RunState.FAILED]
            self._watch_all(watched, fresh)
            self.progress.unit_done(self.unit, "interrupted" if self.stop.is_set() else "done")
        except GpulabError as exc:
            why = exc.message if exc.message.startswith("slurm:") else f"slurm: {exc.message}"  # said once
            self._pilots_gone(why)
            for run in self.runs:
                if run.state in (RunState.RUNNING, RunState.PLANNED):
                    self._end(run, RunState.FAILED, why)
            self.progress.unit_done(self.unit, "failed")
        except Exception as exc:  # never lose the state to a bug in one thread
            self._pilots_gone("controller error")
            self._fail_running(exc)
            raise
        finally:
            self.done = True

    def _job_of(self, run: PlannedRun) -> tuple[str, int] | None:
        if not run.slurm_job:
            return None
        job, _, task = run.slurm_job.partition("_")
        return job, int(task)

    def _adopt_all(self, todo: list[PlannedRun]) -> list[PlannedRun]:
        """Runs this sweep submitted before that Slurm still has, or that left a finished run directory."""
        mine = [r for r in todo if r.token and r.slurm_job]
        if not mine:
            return []
        known = slurm.tasks(sorted({self._job_of(r)[0] for r in mine}), self.job_name)
        out = []
        for run in mine:
            task = known.get(self._job_of(run))
            head = self.nodes[0]
            on_host = head.call(lambda r: run_state(r, head.layout.run_dir(run), run.token))
            if (task is not None and not task.finished) or on_host == "done":  # else: it failed or never ran
                if task is not None:  # a job of this sweep's that Slurm still has (None: gone, or another's)
                    self.jobs.add(self._job_of(run)[0])
                run.state, run.ended = RunState.RUNNING, None
                self.progress.print(
                    f"  [{self.unit}] {run.run_id}: Slurm task {run.slurm_job} of this sweep "
                    f"({task.state if task else 'finished'}): adopted on resume"
                )
                out.append(run)
        self.sweep.save()
        return out

    # -- submitting -------------------------------------------------------------
    def _args(self, run: PlannedRun, node: Node, rank: int) -> list[str]:
        args = super()._args(run, node, 0)
        if run.gpus > 0:  # Slurm gives the job its GPUs (CUDA_VISIBLE_DEVICES): the runner takes the count
            args[args.index("--gpus") + 1] = str(run.gpus)
        if len(self.nodes) > 1:  # the rendezvous from Slurm's allocation, filled in by the task's shell
            i = args.index("--nnodes")
            del args[i : i + 6]
        return args

    def _script(self, runs: list[PlannedRun]) -> str:
        head = self.nodes[0]
        lines = [
            "#!/bin/sh",
            "# gpulab sweep " + self.sweep.name + ": one task per planned run",
            "set -u",
            'case "${SLURM_ARRAY_TASK_ID:-}" in',
        ]
        for i, run in enumerate(runs):
            argv = head.install.argv(*self._args(run, head, 0))
            lines.append(
                f"{i}) TOKEN={shlex.quote(run.token)}; OUT={shlex.quote(head.layout.run_dir(run))}; "
                f"LOG={shlex.quote(head.layout.launch_log(run))}; set -- {shlex.join(argv)} ;;"
            )
        lines += [
            '*) echo "gpulab: no planned run for array task ${SLURM_ARRAY_TASK_ID:-?}" >&2; exit 2 ;;',
            "esac",
            f"export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin {TOKEN_VAR}=$TOKEN",
            f"mkdir -p {shlex.quote(head.layout.base)} || exit 1",
            'if [ -e "$OUT" ]; then mv "$OUT" "$OUT.attempt-$(date -u +%Y%m%dT%H%M%S)"; fi',
        ]
        if len(self.nodes) == 1:
            lines.append('exec "$@" > "$LOG" 2>&1 < /dev/null')
        else:  # one task per node; the runner's own rendezvous on the job's first node
            port = self.settings.rdzv_port
            lines.append(
                "exec srun --export=ALL --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c 'head=$(scontrol show "
                'hostnames "$SLURM_JOB_NODELIST" | head -n 1); exec "$@" --nnodes "$SLURM_NNODES" '
                f'--node-rank "$SLURM_NODEID" --rdzv-endpoint "$head:{port}"\' sh "$@" '
                '> "$LOG" 2>&1 < /dev/null'
            )
        return "\n".join(lines) + "\n"

    def _options(self, runs: list[PlannedRun]) -> list[str]:
        head = self.nodes[0]
        limit_s = max(self._limit_s(r) for r in runs) + self.settings.kill_margin_s
        minutes = self.ss.time_limit_minutes or max(1, math.ceil(limit_s / 60))
        opts = [
            f"--job-name={self.job_name}",
            f"--array=0-{len(runs) - 1}%{max(1, self.ss.max_running)}",
            f"--nodelist={','.join(node_name(n) for n in self.nodes)}",
            f"--nodes={len(self.nodes)}",
            "--ntasks-per-node=1",
            f"--time={int(math.ceil(minutes))}",
            "--export=NONE",
            f"--chdir={head.layout.base}",
            f"--output={slurm.literal(head.layout.base)}/slurm-%A_%a.out",
        ]
        if runs[0].gpus > 0:
            opts.append(f"--gres=gpu:{runs[0].gpus}")
        for key in ("partition", "account", "qos", "constraint"):
            value = getattr(self.ss, key)
            if value:
                opts.append(f"--{key}={value}")
        return opts

    def _submit(self, runs: list[PlannedRun]) -> list[PlannedRun]:
        """One array per GPU count; each run's task id recorded in sweep.json before the next look."""
        for node in self.nodes:
            problem = self._free_space(node)  # also makes the sweep's folder (Slurm writes its output there)
            if problem:
                for run in runs:
                    self._end(run, RunState.FAILED, problem)
                return []
        self._share_compiled("push")
        groups: dict[int, list[PlannedRun]] = {}
        for run in runs:
            groups.setdefault(run.gpus, []).append(run)
        submitted = []
        after = self._unfinished()
        for gpus, group in groups.items():
            for run in group:
                run.token = f"gl-{secrets.token_hex(8)}"
                run.attempts += 1
            # a later array of a unit (runs a pilot released, another GPU count, what a resume submits) starts after
            # the unit's earlier ones ended, whatever their end: a host runs at most max_running of its runs at once
            job = slurm.submit(self._script(group), self._options(group) + slurm.after_any(after))
            self.jobs.add(job)
            after.append(job)
            for i, run in enumerate(group):
                run.slurm_job = f"{job}_{i}"
                run.state, run.started, run.ended, run.outcome = RunState.RUNNING, utcnow(), None, None
                run.reason = f"queued in Slurm (job {job}_{i})"
            self.sweep.save()
            self.progress.print(
                f"  [{self.unit}] Slurm job {job}: {len(group)} run(s) "
                f"({'CPU' if gpus == 0 else f'{gpus} GPU(s) each'})"
            )
            submitted += group
        return submitted

    def _unfinished(self) -> list[str]:
        """This unit's jobs (submitted or adopted) that Slurm has not finished yet."""
        if not self.jobs:
            return []
        known = slurm.tasks(sorted(self.jobs), self.job_name)
        return sorted({job for (job, _), task in known.items() if not task.finished})

    # -- compile once, then fan out ------------------------------------------------
    def _claim(self, waiting: list[PlannedRun]) -> list[PlannedRun]:
        """The waiting runs that may be submitted now (lab.sweep.pilot's rule): a run of a group nobody
        started (this unit pilots it: its first run of the group compiles it for every unit), of a group
        whose artifacts the sweep holds or that was released, or of no group. A run of a group another
        unit pilots waits until the controller holds that pilot's artifacts (they are pushed to this
        unit's hosts right before its array is submitted) or the pilot ended or passed pilot_wait_s."""
        if self.pilots is None:
            return list(waiting)
        keys = [pilot.key_of(r, self.nodes[0].host, self.pilots.cpu) for r in waiting]
        go, last = self.pilots.claim(self.unit, keys)
        for i, role in go:
            if role == "pilot":
                self.piloting[keys[i]] = waiting[i]
                self.progress.print(f"  [{self.unit}] {waiting[i].run_id}{pilot.NOTE['pilot']}")
        if last.waiting_on and last.waiting_on != self._told:
            self._told = last.waiting_on
            on = "; ".join(f"{k.label()} from {u}" for k, u in last.waiting_on)
            self.progress.status(self.unit, f"waiting for compiled artifacts: {on}")
        return [waiting[i] for i, _ in go]

    def _check_pilots(self, ended: PlannedRun | None = None) -> None:
        """Pull this unit's new artifacts; a group the sweep now holds lets its waiting units go. A pilot
        run that ended (``ended``) without them releases its group (the others compile for themselves)."""
        if not self.piloting:
            return
        if ended is None:
            self._share_compiled("pull")
        for key, run in list(self.piloting.items()):
            if compiled.held(self.sweep.root, key):
                self.pilots.artifacts(key)
                del self.piloting[key]
            elif run is ended:
                self.pilots.ended(
                    self.unit, key, f"the pilot's run left no artifacts ({run.run_id} {run.state}: {run.reason})"
                )
                del self.piloting[key]

    def _pilots_gone(self, why: str) -> None:
        """This unit stops: the groups it pilots are released at once (nobody waits out pilot_wait_s)."""
        for key in list(self.piloting):
            self.pilots.ended(self.unit, key, why)
        self.piloting = {}

    # -- watching -------------------------------------------------------------
    def _watch_all(self, runs: list[PlannedRun], waiting: list[PlannedRun] = ()) -> None:
        """Submit what may go (the pilot rule), then follow every task until it ends; runs that wait for
        another unit's pilot are submitted as soon as they may (a later array of this unit)."""
        pending = {r.slurm_job: r for r in runs}
        waiting = list(waiting)
        started = {}
        done_count = 0
        total = len(runs) + len(waiting)
        next_check = time.monotonic() + pilot.CHECK_S
        while pending or waiting:
            if self.stop.is_set():
                self._pilots_gone("interrupted (Ctrl-C)")
                self._interrupt(list(pending.values()))
                return
            go = self._claim(waiting) if waiting else []
            if go:
                waiting = [r for r in waiting if r not in go]
                submitted = self._submit(go)
                pending.update({r.slurm_job: r for r in submitted})
                for run in go:
                    if run not in submitted:  # not submitted (no room on a host): ended there
                        done_count += 1
                        self._check_pilots(ended=run)
                        self.progress.run_ended(self.unit, run)
            if not pending:
                if waiting:
                    time.sleep(self.ss.poll_s)
                continue
            try:
                known = slurm.tasks(sorted(self.jobs), self.job_name)
                drained = {n for n, node in slurm.nodes().items() if node.drained}
                reasons = {n: node.reason for n, node in slurm.nodes().items()}
            except HostError as exc:  # the controller is slow or restarting: look again
                self.progress.status(self.unit, f"Slurm: {exc.message}")
                time.sleep(self.ss.poll_s)
                continue
            for key, run in list(pending.items()):
                task = known.get(self._job_of(run))
                if task is not None and not task.finished:
                    if task.state == "RUNNING" and key not in started:
                        started[key] = time.monotonic()
                        run.reason = f"running in Slurm (job {key} on {task.nodes})"
                        self.progress.run_started(self.unit, done_count + 1, total, run.run_id, "")
                    if task.state == "PENDING":
                        mine = [node_name(n) for n in self.nodes]
                        gone = [n for n in mine if n in drained]
                        if gone:  # its nodes were drained: it will not start; give it back
                            slurm.cancel([key])
                            self._end(
                                run,
                                RunState.FAILED,
                                f"not run: Slurm node {gone[0]} drained ({reasons.get(gone[0]) or 'no reason'})",
                            )
                            del pending[key]
                            done_count += 1
                            self._check_pilots(ended=run)
                            self.progress.run_ended(self.unit, run)
                    continue
                del pending[key]
                done_count += 1
                self._finish(run, task, time.monotonic() - started.get(key, time.monotonic()))
                self._check_pilots(ended=run)  # _finish pulled the host's artifacts with the run
                self.progress.run_ended(self.unit, run)
            if self.piloting and started and time.monotonic() >= next_check:
                self._check_pilots()  # the pilot's artifacts, once written, release the group's other units
                next_check = time.monotonic() + pilot.CHECK_S
            if pending or waiting:
                time.sleep(self.ss.poll_s)

    def _finish(self, run: PlannedRun, task, elapsed: float) -> None:
        """Fetch and check the run directory (as the SSH backend does); a task Slurm ended keeps Slurm's word."""
        self._collect(run, "done", {}, elapsed)
        if task is not None and task.state.split()[0] in ENDED_BY_SLURM:
            why = f"Slurm ended task {run.slurm_job}: {task.state}" + (f" ({task.reason})" if task.reason else "")
            self._end(run, RunState.FAILED, why + (f"; {run.reason}" if run.reason else ""), run.outcome)
        elif task is None and run.state != RunState.COMPLETE:
            self._end(run, RunState.FAILED, f"Slurm no longer knows task {run.slurm_job}; {run.reason}", run.outcome)

    def _interrupt(self, runs: list[PlannedRun]) -> None:
        """Ctrl-C: cancel this sweep's jobs (only those), then record what each run left."""
        self.progress.status(self.unit, "cancelling the Slurm jobs (Ctrl-C)")
        slurm.cancel(sorted(self.jobs))
        deadline = time.monotonic() + self.settings.stop_grace_s + 10
        while time.monotonic() < deadline:
            try:
                known = slurm.tasks(sorted(self.jobs), self.job_name)
            except HostError:
                break
            if all(t.finished for t in known.values()):
                break
            time.sleep(0.5)
        for run in runs:
            run.state, run.reason, run.ended = (
                RunState.INTERRUPTED,
                f"interrupted (Ctrl-C); Slurm job {run.slurm_job} cancelled",
                utcnow(),
            )
        self.sweep.save()
