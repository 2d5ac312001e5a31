"""``invoke tune``: an Optuna study (ask and tell) whose trials are sweeps of K seeds on the fleet.

One study per workload, scale and device group, named ``--name``; its folder ``results/<name>/`` holds
each trial's sweep (``<name>-t0003/``, the run directories and sweep.json of lab.sweep), the report and
the recipe file. The study itself (trials, their settings, per-seed costs, states) is in the lab's
database (lab.tune.storage). How a trial goes:

1. ``ask`` a set of settings from the space (the first trial is the reference recipe: the scale's own
   settings, or ``--baseline FILE``), record its sweep name and epoch cap, start its heartbeat;
2. run its seeds in waves of ``wave`` (the fleet's size) through the backend; after each wave the
   per-seed costs are the trial's intermediate values (step = seed): a seed stopped by the cap without
   its target prunes the trial (lab.tune.objective), else Optuna's WilcoxonPruner may;
3. a seed whose host failed is run again (``retries``), then the trial is marked failed (never a result);
4. ``tell`` the cost (median + spread of epochs to target) or the pruned/failed state.

Optuna's own heartbeat covers only ``study.optimize``; here each running trial carries a user attribute
``gpulab_heartbeat`` (time, owner host and pid) refreshed every ``heartbeat_s``. A running trial whose
heartbeat is older than ``stale_s``, or whose owner is a process of this machine that is gone (a killed
controller), is stale: the next ``invoke tune`` of the study takes it over and resumes it, its sweep
adopting what its runs finished meanwhile (lab.sweep), so a controller crash costs no run.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from lab.core import fields, paths
from lab.core.errors import ConfigError, RunError, excerpt
from lab.sweep import supervise
from lab.tune import objective
from lab.tune.entry import TuneRequest
from lab.tune.trials import Backend, TrialRequest

HEARTBEAT = "gpulab_heartbeat"
BASELINE = "gpulab_baseline"


@dataclass
class TuneResult:
    study: optuna.Study
    root: Path
    lines: list[str] = field(default_factory=list)


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def heartbeat(t) -> dict:
    """A trial's last heartbeat ({at, owner}); {} for none, or for one of another shape."""
    beat = t.user_attrs.get(HEARTBEAT)
    return beat if isinstance(beat, dict) else {}


def resumable(t, study_name: str) -> tuple[str, int]:
    """(sweep name, epoch cap) gpulab stored on a trial it started; ConfigError for a trial of the study's
    database without them (another program's or another gpulab's): it cannot be resumed, and nothing is."""
    sweep, cap = t.user_attrs.get("gpulab_sweep"), t.user_attrs.get("gpulab_cap")
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        sweep = None
    try:
        return fields.sweep_name(sweep, "gpulab_sweep"), cap
    except ConfigError:
        raise ConfigError(
            f"tune {study_name}: trial {t.number} of the study's database has no sweep and epoch cap gpulab "
            f"stored (gpulab_sweep {excerpt(repr(sweep), 40)}, gpulab_cap {excerpt(repr(cap), 20)}): not a "
            "trial this gpulab started; give another --name"
        ) from None


def stale(trials, now: float, stale_s: float, me: str | None = None, alive=_alive) -> list:
    """Running trials no controller tends: heartbeat missing or older than ``stale_s``, or owned by a
    process of this machine that is gone. ``me``: this controller's owner string (its own are never stale)."""
    me = me or owner()
    here = me.rsplit(":", 1)[0]
    out = []
    for t in trials:
        if t.state != TrialState.RUNNING:
            continue
        beat = heartbeat(t)
        who, at = str(beat.get("owner", "")), beat.get("at")
        if who == me:
            continue
        host, _, pid = who.rpartition(":")
        gone_here = host == here and fields.process_id(pid) is not None and not alive(fields.process_id(pid))
        if not isinstance(at, (int, float)) or now - at > stale_s or gone_here:
            out.append(t)
    return out


class Heartbeat:
    """Refreshes a running trial's ``gpulab_heartbeat`` every ``every_s`` seconds in a thread."""

    def __init__(self, storage, trial_id: int, every_s: float):
        self.storage, self.trial_id, self.every_s = storage, trial_id, every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"tune-heartbeat-{trial_id}")

    def beat(self) -> None:
        self.storage.set_trial_user_attr(self.trial_id, HEARTBEAT, {"at": time.time(), "owner": owner()})

    def _loop(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.beat()
            except Exception:  # a database that hiccups: the next beat tries again
                pass

    def __enter__(self):
        self.beat()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=5)
        return False


def study_attrs(req: TuneRequest) -> dict:
    """What a study is: a resumed study must have been made with the same (else bad input)."""
    return {
        "workload": req.space.workload,
        "scale": req.space.scale,
        "space": req.space.digest(),
        "seeds": req.seeds,
        "limit": req.limit,
        "device": req.device,
    }


def open_study(req: TuneRequest, storage) -> optuna.Study:
    sampler = optuna.samplers.TPESampler(seed=req.sampler_seed)  # replaced below once the study is known
    with warnings.catch_warnings():  # experimental in Optuna 5.1: its interface is pinned by pyproject's optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        pruner = optuna.pruners.WilcoxonPruner(p_threshold=req.p_threshold)
    study = optuna.create_study(
        storage=storage, study_name=req.name, direction="minimize", sampler=sampler, pruner=pruner, load_if_exists=True
    )
    want = study_attrs(req)
    have = {k: study.user_attrs.get(f"gpulab_{k}") for k in want}
    if all(v is None for v in have.values()):
        for k, v in want.items():
            study.set_user_attr(f"gpulab_{k}", v)
        study.set_user_attr("gpulab_source", req.space.source)
    elif have != want:
        diff = ", ".join(f"{k} {have[k]!r} (now {want[k]!r})" for k in want if have[k] != want[k])
        raise ConfigError(f"tune {req.name}: the study was made with {diff}; give another --name")
    # a resumed study must not draw again what the crashed controller drew: the sampler's seed moves on
    # with the trials the study already has (reproducible for a given history, never a repeat)
    study.sampler = optuna.samplers.TPESampler(seed=req.sampler_seed + len(study.get_trials(deepcopy=False)))
    return study


def _best(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    return min(done, key=lambda t: (t.value, t.number)) if done else None


class Search:
    def __init__(self, req: TuneRequest, study: optuna.Study, backend: Backend, echo=print):
        self.req, self.study, self.backend, self.echo = req, study, backend, echo
        self.storage = study._storage
        self.study_id = self.storage.get_study_id_from_name(req.name)

    def _id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def _attr(self, number: int, key: str, value) -> None:
        self.storage.set_trial_user_attr(self._id(number), key, value)

    def results_count(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))

    def start(self, baseline: bool) -> tuple[int, dict]:
        """Ask a new trial (the baseline's values when ``baseline``); its number and settings."""
        dists = self.req.space.distributions()
        if baseline:
            self.study.enqueue_trial(dict(self.req.baseline), user_attrs={BASELINE: True})
        trial = self.study.ask(dists)
        best = _best(self.study)
        cap = objective.epoch_cap(best.value if best else None, self.req.limit)
        sweep = f"{self.req.name}-t{trial.number:04d}"
        trial.set_user_attr("gpulab_sweep", sweep)
        trial.set_user_attr("gpulab_cap", cap)
        trial.set_user_attr(HEARTBEAT, {"at": time.time(), "owner": owner()})
        return trial.number, dict(trial.params)

    def run(self, number: int) -> str:
        """Run (or resume) trial ``number`` to its end and tell it; its final state's name."""
        frozen = self.storage.get_trial(self._id(number))
        settings = dict(frozen.params)
        sweep, cap = resumable(frozen, self.req.name)
        k, wave = self.req.seeds, max(1, self.req.wave)
        label = "reference recipe" if frozen.user_attrs.get(BASELINE) else "trial"
        self.echo(f"tune {self.req.name}: {label} {number}: {_fmt(settings)}; seeds 1..{k}, epoch cap {cap}")
        with Heartbeat(self.storage, self._id(number), self.req.heartbeat_s):
            results: list[objective.SeedResult] = []
            for upto in range(min(wave, k), k + wave, wave):
                upto = min(upto, k)
                request = TrialRequest(
                    sweep,
                    self.req.space.workload,
                    self.req.space.scale,
                    upto,
                    settings,
                    max_epochs=cap,
                    gpus=self.req.gpus,
                )
                for _attempt in range(self.req.retries + 1):
                    results = self.backend(request)
                    if not objective.host_failures(results):
                        break
                failed = objective.host_failures(results)
                if failed:
                    self._attr(number, "gpulab_failed", "; ".join(failed)[:1000])
                    self.study.tell(number, state=TrialState.FAIL)
                    self.echo(
                        f"tune {self.req.name}: trial {number}: FAILED on its hosts (not a result): {'; '.join(failed)}"
                    )
                    return "FAIL"
                trial_id = self._id(number)
                for r in results:
                    self.storage.set_trial_intermediate_value(trial_id, r.seed, objective.seed_cost(r, self.req.limit))
                self._attr(number, "gpulab_seeds", [r.to_json() for r in results])
                out = objective.capped_out(results, cap, self.req.limit)
                why = None
                if out:
                    why = (
                        f"seed(s) {', '.join(map(str, out))} missed the target within {cap} epochs (the best "
                        f"trial's cost): it cannot beat the best"
                    )
                elif upto < k and self.study.pruner.prune(self.study, self.storage.get_trial(trial_id)):
                    why = f"Wilcoxon over seeds 1..{upto}: worse than the best (p < {self.req.p_threshold:g})"
                if why:
                    self._attr(number, "gpulab_pruned", why)
                    self._attr(number, "gpulab_summary", objective.summary(results, self.req.limit))
                    self.study.tell(number, state=TrialState.PRUNED)
                    self.echo(f"tune {self.req.name}: trial {number}: pruned: {why}")
                    return "PRUNED"
            summary = objective.summary(results, self.req.limit)
            self._attr(number, "gpulab_summary", summary)
            self.study.tell(number, summary["cost"])
        self.echo(
            f"tune {self.req.name}: trial {number}: cost {summary['cost']:g} (median {summary['median']:g} "
            f"epochs, spread {summary['spread']:g}, {summary['missed']} missed)"
        )
        return "COMPLETE"

    def resume_stale(self) -> list[int]:
        found = stale(
            self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)), time.time(), self.req.stale_s
        )
        for t in found:
            resumable(t, self.req.name)  # before anything is written: a trial of another writer is refused
            beat = heartbeat(t)
            self.echo(
                f"tune {self.req.name}: trial {t.number} is stale (heartbeat of {beat.get('owner', '?')} "
                f"gone): resuming it"
            )
            self._attr(t.number, "gpulab_stale", {"at": time.time(), "was": beat, "by": owner()})
            self.run(t.number)
        return [t.number for t in found]

    def has_baseline(self) -> bool:
        return any(
            t.user_attrs.get(BASELINE)
            for t in self.study.get_trials(deepcopy=False)
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        )


def tune(
    req: TuneRequest, storage, backend: Backend, results_dir: Path, echo=print, max_new: int | None = None
) -> TuneResult:
    """Run the study to ``req.trials`` results (resuming it: stale trials first). ``max_new``: start at
    most this many new trials in this call (tests)."""
    from lab.tune import report

    root = paths.child(results_dir, req.name, what="--name")
    lock = supervise.SweepLock(root, req.name)  # one controller per study on this machine
    try:
        study = open_study(req, storage)
        search = Search(req, study, backend, echo)
        search.resume_stale()
        started, failed_in_a_row = 0, 0
        while search.results_count() < req.trials and (max_new is None or started < max_new):
            number, _ = search.start(baseline=not search.has_baseline())
            started += 1
            failed_in_a_row = failed_in_a_row + 1 if search.run(number) == "FAIL" else 0
            if failed_in_a_row >= 3:
                raise RunError(
                    f"tune {req.name}: 3 trials in a row failed on their hosts (see the trials' sweeps "
                    f"under {root}); the study stays and resumes with the same --name"
                )
        result = TuneResult(study, root)
        result.lines = report.write(study, req, root, echo)
        return result
    finally:
        lock.release()


def _fmt(settings: dict) -> str:
    return ", ".join(f"{k}={_num(v)}" for k, v in sorted(settings.items())) or "(no settings)"


def _num(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) and math.isfinite(v) else str(v)
