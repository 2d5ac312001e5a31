"""invoke tune's logic without hosts: the cost, the space, the early stops, stale trials, resume, report.

The search runs here against a real Optuna study in a SQLite file (lab.tune.storage) with a stand-in
backend: a function of the settings and the seed, so that what the search does with the results can be
checked exactly. The fleet itself (real SSH hosts, real runs) is tests/integration/test_tune_lab.py.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from lab.core.errors import ConfigError, RunError
from lab.sweep import plan as sweep_plan
from lab.sweep import recipe as recipes
from lab.tune import entry, objective, report, search, space as spaces, storage as tunestorage
from lab.tune.objective import SeedResult

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- the cost


def test_cost_is_median_plus_spread_and_a_miss_counts_twice_the_limit():
    assert objective.cost([4, 4, 4]) == 4
    assert objective.cost([3, 5, 12]) == 5 + 9
    hit = SeedResult(1, "h", "complete", True, 3.0)
    miss = SeedResult(2, "h", "complete", False, 20.0)
    assert objective.seed_cost(hit, 20) == 3 and objective.seed_cost(miss, 20) == 40
    s = objective.summary([hit, miss], 20)
    assert (s["median"], s["spread"], s["missed"], s["cost"]) == (21.5, 37.0, 1, 58.5)
    # a recipe that misses on any seed is always worse than one converging on every seed within the limit
    assert objective.cost([objective.seed_cost(hit, 20), objective.seed_cost(miss, 20)]) > objective.cost([20, 20])


def test_epoch_cap_is_the_best_cost_rounded_down_and_a_capped_miss_prunes():
    assert objective.epoch_cap(None, 20) == 20
    assert objective.epoch_cap(7.5, 20) == 7 and objective.epoch_cap(45.0, 20) == 20
    assert objective.epoch_cap(0.5, 20) == 1
    runs = [SeedResult(1, "a", "complete", True, 3.0), SeedResult(2, "b", "complete", False, 7.0)]
    assert objective.capped_out(runs, 7, 20) == [2]
    assert objective.capped_out(runs, 20, 20) == []  # at the scale's own limit a miss is a result, not a prune
    # why the cap is exact: the cost is never below the slowest seed
    for epochs in ([1, 9], [5, 5, 6], [2, 3, 30]):
        assert objective.cost(epochs) >= max(epochs)


def test_a_run_that_did_not_finish_is_a_host_failure_never_a_result():
    runs = [SeedResult(1, "a", "complete", True, 3.0), SeedResult(2, "b", "failed", reason="host lost: ssh")]
    assert objective.host_failures(runs) == ["seed 2 on b: failed: host lost: ssh"]


# --------------------------------------------------------------------------- the space


def test_the_space_is_the_v05_closed_rules_with_their_source():
    sp = spaces.load("ncf", "tiny")
    names = {p.name: p for p in sp.params}
    assert set(names) == {"lr", "beta1", "beta2", "batch_size"}  # eps is outside the rules
    assert math.isclose(names["lr"].low, 0.001) and math.isclose(names["lr"].high, 0.1) and names["lr"].log
    assert (names["batch_size"].low, names["batch_size"].high) == (512, 8192)
    assert "NCF | lr | Arbitrary constant" in names["lr"].rule
    assert sp.source["commit"] == "54a5bb0ffc94a982dd8ab4b07ae675c2d62131d6"
    assert "Hyperparameters and Optimizer" in sp.source["section"]
    assert any(line.startswith("eps: outside the v0.5 closed rules") for line in sp.left_out)
    assert "eps" in {p.name for p in spaces.load("ncf", "tiny", open_=True).params}
    # factor bounds follow the scale: full-scale NCF's lr is 0.0045
    full = {p.name: p for p in spaces.load("ncf", "full").params}
    assert math.isclose(full["lr"].low, 0.00045)
    # GNMT's decay settings need a value of the scale's own (the reference recipe): tiny has none
    gnmt = spaces.load("gnmt", "tiny")
    assert {"lr", "warmup_steps", "batch_size"} <= {p.name for p in gnmt.params}
    assert any(line.startswith("remain_steps:") for line in gnmt.left_out)


def _space_file(tmp_path, params, workload="ncf") -> Path:
    doc = yaml.safe_load((ROOT / "lab/data/tune_space.yml").read_text())
    doc["workloads"] = {workload: {"params": params}}
    p = tmp_path / "space.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize(
    "params, says",
    [
        ({"lr": {"kind": "float", "low": 0.1, "high": 0.01, "rule": "r"}}, "empty range"),
        ({"lr": {"kind": "float", "low": 0, "high": 0.1, "log": True, "rule": "r"}}, "log range must be above 0"),
        ({"layers_x": {"kind": "int", "low": 1, "high": 3, "rule": "r"}}, "declares no setting"),
        ({"target": {"kind": "float", "low": 0.1, "high": 0.9, "rule": "r"}}, "belongs to the benchmark"),
        ({"lr": {"kind": "float", "rule": "r"}}, "give factor, low and high"),
        ({"lr": {"kind": "float", "low": 0.1, "high": 1, "rule": "r", "extra": 1}}, "unknown key(s) extra"),
        ({"lr": {"kind": "float", "low": 0.1, "high": 1}}, "rule is missing"),
        # .nan passes every bound (each comparison with it is false): not a number of the schema's
        ({"lr": {"kind": "float", "low": float("nan"), "high": 1, "rule": "r"}}, "low: nan is not a finite number"),
        ({"lr": {"kind": "float", "low": 0.1, "high": float("inf"), "rule": "r"}}, "high: inf is not a finite number"),
    ],
)
def test_a_bad_space_file_is_one_line(tmp_path, params, says):
    with pytest.raises(ConfigError) as exc:
        spaces.load("ncf", "tiny", _space_file(tmp_path, params))
    assert says in exc.value.message and "\n" not in exc.value.message


def test_a_space_file_that_is_no_yaml_or_lacks_the_workload(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("workloads: [\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        spaces.load("ncf", "tiny", bad)
    with pytest.raises(ConfigError, match="no search space for workload 'ncf'"):
        spaces.load(
            "ncf",
            "tiny",
            _space_file(tmp_path, {"lr": {"kind": "float", "low": 0.1, "high": 1, "rule": "r"}}, workload="gnmt"),
        )


# --------------------------------------------------------------------------- stale trials


def _frozen(number, state, beat):
    return optuna.trial.FrozenTrial(
        number=number,
        state=state,
        value=None,
        datetime_start=None,
        datetime_complete=None,
        params={},
        distributions={},
        user_attrs={} if beat is None else {search.HEARTBEAT: beat},
        system_attrs={},
        intermediate_values={},
        trial_id=number,
        values=None,
    )


def test_stale_trials_by_heartbeat_age_and_by_a_gone_owner_on_this_machine():
    me = "ctl:100"
    trials = [
        _frozen(0, TrialState.RUNNING, {"at": 1000.0, "owner": "other:5"}),  # fresh, another machine
        _frozen(1, TrialState.RUNNING, {"at": 100.0, "owner": "other:5"}),  # old heartbeat
        _frozen(2, TrialState.RUNNING, {"at": 1000.0, "owner": "ctl:200"}),  # this machine, pid gone
        _frozen(3, TrialState.RUNNING, {"at": 1000.0, "owner": "ctl:300"}),  # this machine, pid alive
        _frozen(4, TrialState.RUNNING, {"at": 100.0, "owner": me}),  # this controller's own
        _frozen(5, TrialState.RUNNING, None),  # no heartbeat at all
        _frozen(6, TrialState.COMPLETE, {"at": 1.0, "owner": "other:5"}),  # not running
    ]
    got = search.stale(trials, now=1010.0, stale_s=600, me=me, alive=lambda pid: pid == 300)
    assert [t.number for t in got] == [1, 2, 5]


# --------------------------------------------------------------------------- the search, with a stand-in fleet


def fake_epochs(settings: dict, seed: int) -> int:
    """Converges fastest near lr 0.03; seed 2 a little slower (the seed effect)."""
    return (
        2
        + round(5 * abs(math.log10(settings["lr"] / 0.03)))
        + (seed == 2) * round(3 * abs(math.log10(settings["lr"] / 0.03)))
    )


class FakeFleet:
    def __init__(self, fail_first: int = 0, crash_at: int | None = None):
        self.calls, self.fail_first, self.crash_at = [], fail_first, crash_at

    def __call__(self, req):
        self.calls.append(req)
        if self.crash_at is not None and len(self.calls) == self.crash_at:
            raise KeyboardInterrupt  # the controller dies mid-trial
        out = []
        for seed in range(1, req.seeds + 1):
            if self.fail_first > 0:
                self.fail_first -= 1
                out.append(SeedResult(seed, f"h{seed}", "failed", reason="host lost: no route"))
                continue
            e = fake_epochs(req.settings, seed)
            cap = req.max_epochs or 20
            out.append(SeedResult(seed, f"h{seed}", "complete", e <= cap, float(min(e, cap))))
        return out


def _request(tmp_path, seeds=2, trials=4, wave=2, baseline=None, **kw):
    settings = {"seeds": seeds, "trials": trials, "p_threshold": 0.1, "retries": 1, "heartbeat_s": 0.05, "stale_s": 600}
    req = entry.request(
        "ncf",
        scale="tiny",
        name=kw.pop("name", "t1"),
        device="cpu",
        seeds=None,
        trials=None,
        tune_settings=settings,
        baseline=baseline,
        wave=wave,
        **kw,
    )
    return req


def _poor(tmp_path) -> str:
    p = tmp_path / "poor.yml"
    recipes.write(p, recipes.Recipe("ncf", "tiny", {"lr": 0.0015}))
    return str(p)


def test_search_starts_from_the_reference_recipe_beats_it_caps_and_writes_a_recipe(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    req = _request(tmp_path, trials=5, baseline=_poor(tmp_path))
    storage, req.storage_shown = entry.storage_for(url)
    fleet = FakeFleet()
    result = search.tune(req, storage, fleet, tmp_path / "results", echo=lambda *_: None)
    trials = result.study.get_trials()
    assert trials[0].user_attrs[search.BASELINE] and trials[0].params["lr"] == 0.0015
    assert fleet.calls[0].settings["lr"] == 0.0015 and fleet.calls[0].max_epochs == 20
    base_cost = trials[0].value
    best = result.study.best_trial
    assert best.value < base_cost
    # later trials ran with the best cost so far as their epoch cap
    assert all(c.max_epochs <= 20 for c in fleet.calls) and any(c.max_epochs < 20 for c in fleet.calls[1:])
    assert all(c.sweep == f"t1-t{i:04d}" for i, c in enumerate(fleet.calls))
    # the recipe file: the best set, loadable by invoke sweep --recipe, with its provenance
    rec = recipes.load(tmp_path / "results" / "t1" / "recipe.yml")
    assert rec.settings == best.params and rec.provenance["trial"] == best.number
    assert rec.provenance["reference_cost"] == base_cost and rec.provenance["rule_source"]["commit"].startswith(
        "54a5bb0"
    )
    md = (tmp_path / "results" / "t1" / "report.md").read_text()
    assert "reference recipe (trial 0)" in md and f"trial {best.number}" in md
    assert (tmp_path / "history-tune.sqlite").is_file() and not (tmp_path / "history.sqlite").exists()


def test_a_trial_that_cannot_beat_the_best_is_pruned_by_the_cap(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    req = _request(tmp_path, trials=2)
    storage, _ = entry.storage_for(url)
    study = search.open_study(req, storage)
    s = search.Search(req, study, FakeFleet(), echo=lambda *_: None)
    n, _ = s.start(baseline=True)
    assert s.run(n) == "COMPLETE"  # the scale's own recipe: lr 0.01 -> 4 and 5 epochs, cost 5.5
    assert study.best_value == 5.5
    study.enqueue_trial({"lr": 0.002, "beta1": 0.9, "beta2": 0.999, "batch_size": 2048})
    n, _ = s.start(baseline=False)
    assert study.trials[n].user_attrs["gpulab_cap"] == 5
    assert s.run(n) == "PRUNED"
    assert "cannot beat the best" in study.trials[n].user_attrs["gpulab_pruned"]


def test_wilcoxon_prunes_across_waves_of_seeds(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    req = _request(tmp_path, seeds=10, wave=5, trials=2, max_epochs=20)
    req.p_threshold = 0.1
    storage, _ = entry.storage_for(url)
    study = search.open_study(req, storage)
    fleet = FakeFleet()
    s = search.Search(req, study, fleet, echo=lambda *_: None)
    study.enqueue_trial({"lr": 0.03, "beta1": 0.9, "beta2": 0.999, "batch_size": 2048})
    n, _ = s.start(baseline=False)
    assert s.run(n) == "COMPLETE" and study.best_value == 2
    # a trial worse on every seed: the cap (2 epochs) would prune it too; lift the cap to see Wilcoxon alone
    study.enqueue_trial({"lr": 0.0011, "beta1": 0.9, "beta2": 0.999, "batch_size": 2048})
    n, _ = s.start(baseline=False)
    study._storage.set_trial_user_attr(study.trials[n]._trial_id, "gpulab_cap", 20)
    assert s.run(n) == "PRUNED"
    assert "Wilcoxon" in study.trials[n].user_attrs["gpulab_pruned"]
    assert fleet.calls[-1].seeds == 5  # stopped after its first wave of 5 seeds, not all 10


def test_host_failures_are_retried_then_marked_never_counted(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    req = _request(tmp_path, trials=1)
    storage, _ = entry.storage_for(url)
    study = search.open_study(req, storage)
    fleet = FakeFleet(fail_first=1)  # the first attempt loses a host: the retry succeeds
    s = search.Search(req, study, fleet, echo=lambda *_: None)
    n, _ = s.start(baseline=True)
    assert s.run(n) == "COMPLETE" and len(fleet.calls) == 2 and fleet.calls[0].sweep == fleet.calls[1].sweep
    fleet.fail_first = 10  # every attempt fails: marked, not a result
    n, _ = s.start(baseline=False)
    assert s.run(n) == "FAIL"
    assert study.trials[n].state == TrialState.FAIL and "host lost" in study.trials[n].user_attrs["gpulab_failed"]
    assert s.results_count() == 1
    fleet.fail_first = 10**6
    with pytest.raises(RunError, match="3 trials in a row failed"):
        search.tune(_request(tmp_path, trials=5), storage, fleet, tmp_path / "results", echo=lambda *_: None)


def test_a_killed_controller_leaves_a_stale_trial_that_the_next_one_resumes(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    storage, _ = entry.storage_for(url)
    fleet = FakeFleet(crash_at=2)
    with pytest.raises(KeyboardInterrupt):
        search.tune(_request(tmp_path, trials=3), storage, fleet, tmp_path / "results", echo=lambda *_: None)
    study = optuna.load_study(study_name="t1", storage=storage)
    running = study.get_trials(states=(TrialState.RUNNING,))
    assert [t.number for t in running] == [1]
    # the dead controller was this process: make its heartbeat another, gone process of this machine
    beat = dict(running[0].user_attrs[search.HEARTBEAT], owner=f"{search.owner().rsplit(':', 1)[0]}:999999")
    storage.set_trial_user_attr(running[0]._trial_id, search.HEARTBEAT, beat)
    lines = []
    fleet.crash_at = None
    result = search.tune(
        _request(tmp_path, trials=3), entry.storage_for(url)[0], fleet, tmp_path / "results", echo=lines.append
    )
    assert any("trial 1 is stale" in line and "resuming it" in line for line in lines)
    t1 = result.study.trials[1]
    assert t1.state in (TrialState.COMPLETE, TrialState.PRUNED) and "gpulab_stale" in t1.user_attrs
    assert fleet.calls[2].sweep == "t1-t0001"  # the same sweep: its runs are adopted, not run again
    # the resumed controller's sampler does not draw the dead one's sets again
    assert result.study.trials[2].params != result.study.trials[1].params
    assert sum(1 for t in result.study.trials if t.user_attrs.get(search.BASELINE)) == 1
    assert len(result.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))) == 3


def test_a_study_resumed_with_another_space_or_seed_count_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    storage, _ = entry.storage_for(url)
    search.open_study(_request(tmp_path, seeds=2), storage)
    with pytest.raises(ConfigError, match="the study was made with seeds 2"):
        search.open_study(_request(tmp_path, seeds=3), storage)


# --------------------------------------------------------------------------- requests, storage, recipes


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"name": "bad name"}, "is not a study name"),
        ({"name": "x" * 59}, "is not a study name"),
        ({"max_epochs": 0}, "--max-epochs"),
    ],
)
def test_bad_requests_are_one_line(tmp_path, kw, says):
    with pytest.raises(ConfigError, match=says):
        _request(tmp_path, **kw)


def test_a_baseline_outside_the_space_or_of_another_workload_is_refused(tmp_path):
    far = tmp_path / "far.yml"
    recipes.write(far, recipes.Recipe("ncf", "tiny", {"lr": 5.0}))
    with pytest.raises(ConfigError, match="lies outside the space"):
        _request(tmp_path, baseline=str(far))
    other = tmp_path / "other.yml"
    recipes.write(other, recipes.Recipe("ncf", "small", {"lr": 0.01}))
    with pytest.raises(ConfigError, match="not ncf at tiny"):
        _request(tmp_path, baseline=str(other))


def test_storage_urls_keep_optunas_tables_apart_from_the_history():
    url, kw = tunestorage.tune_url("sqlite:////srv/results/history.sqlite")
    assert url == "sqlite:////srv/results/history-tune.sqlite" and kw["connect_args"]["timeout"] == 30
    url, kw = tunestorage.tune_url("postgresql://gpulab:secret@db/gpulab")
    assert url.startswith("postgresql+psycopg://gpulab:secret@db/gpulab")
    assert kw["connect_args"]["options"] == "-csearch_path=gpulab_tune"
    assert "secret" not in tunestorage.shown("postgresql://gpulab:secret@db/gpulab")
    with pytest.raises(ConfigError, match="not an SQLAlchemy URL"):
        tunestorage.tune_url("::nope")


@pytest.mark.parametrize(
    "doc, says",
    [
        ({"settings": {"target": 0.1}}, "belongs to the benchmark"),
        ({"settings": {"layerz": 1}}, "declares no such setting"),
        ({"settings": {"lr": {"a": 1}}}, "is not a number, text"),
        ({"settings": {"lr": float("nan")}}, "not a finite number"),
        ({"schema": "gpulab-recipe/9"}, "schema"),
        ({"workload": "../x"}, "workload"),
    ],
)
def test_a_bad_recipe_file_is_one_line(tmp_path, doc, says):
    base = {"schema": "gpulab-recipe/1", "workload": "ncf", "scale": "tiny", "settings": {"lr": 0.01}}
    p = tmp_path / "r.yml"
    p.write_text(yaml.safe_dump({**base, **doc}))
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        recipes.load(p)


def test_a_recipe_reaches_each_planned_run_and_seeds_spread_over_the_units():
    from lab.hosts.inventory import Host

    hosts = [
        Host(
            name=f"h{i}",
            address=f"10.0.0.{i}",
            port=22,
            user=None,
            connection="ssh",
            gpu_model="cpu",
            gpu_count=0,
            stack="current",
            groups=(),
            workdir="/var/lib/gpulab",
            python=None,
            ssh_key=None,
            known_hosts="",
        )
        for i in (1, 2)
    ]
    runs = sweep_plan.plan(
        hosts, ["ncf"], None, 4, "ttt", "tiny", recipes={"ncf": {"lr": 0.02}}, spread=True, max_epochs=6
    )
    assert [(r.host, r.seed) for r in runs] == [("h1", 1), ("h1", 3), ("h2", 2), ("h2", 4)]
    assert all(r.settings == {"lr": 0.02} and r.max_epochs == 6 for r in runs)
    assert recipes.set_args({"lr": 0.02, "betas": [0.9, 0.98]}) == ["--set", "betas=[0.9,0.98]", "--set", "lr=0.02"]
    assert len(sweep_plan.plan(hosts, ["ncf"], None, 4, "ttt", "tiny")) == 8  # a sweep: every unit, every seed


@pytest.mark.parametrize(
    "args, says",
    [
        (["--set", "target=0.1"], "--set target: not a setting a run may change"),
        (["--set", "layerz=1"], "declares no such setting"),
        (["--set", "lr=-1"], "'lr' must be a number >= 0"),
        (["--set", "lr"], "expected KEY=VALUE"),
    ],
)
def test_runner_set_refuses_bad_settings_before_anything_is_written(tmp_path, args, says):
    out = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "runner", "run", "ncf", "--scale", "tiny", "--gpus", "0", "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not out.exists()


def test_report_of_a_study_without_results_writes_no_recipe(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    req = _request(tmp_path)
    storage, _ = entry.storage_for(url)
    study = search.open_study(req, storage)
    (tmp_path / "out").mkdir()
    lines = report.write(study, req, tmp_path / "out")
    assert "no recipe written" in lines[-1] and not (tmp_path / "out" / "recipe.yml").exists()


def test_a_failed_trials_reason_stays_in_its_table_cell(tmp_path):
    """A host's failure reason is text of its making: a '|', a line break or HTML in it stays inside the
    'Every trial' row of report.md."""
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    req = _request(tmp_path, trials=1)
    storage, _ = entry.storage_for(url)
    study = search.open_study(req, storage)
    s = search.Search(
        req,
        study,
        lambda r: [SeedResult(i, "h1", "failed", reason="host lost | x\nrow <b>y</b>") for i in (1, 2)],
        echo=lambda *_: None,
    )
    n, _ = s.start(baseline=True)
    assert s.run(n) == "FAIL"
    md = report.markdown(report.outcome(study, req.seeds), "db")
    (row,) = [line for line in md.splitlines() if line.startswith(f"| {n} (reference) | FAIL")]
    assert row.replace("\\|", "").count("|") == 6 and "<b>" not in md and "host lost \\| x row &lt;b>y&lt;/b>" in row


def test_a_baseline_or_space_inside_the_study_folder_is_refused_before_the_study_opens(tmp_path, monkeypatch):
    """The study's folder gets recipe.yml: a --baseline results/<name>/recipe.yml would be overwritten by the study
    it started (lab.core.paths.apart, as invoke report's --out); one line, nothing written, no storage opened."""
    from lab.commands import tune as cmd
    from lab.hosts import inventory

    def opened(url):
        raise AssertionError("the study's storage was opened")

    monkeypatch.setattr(entry, "storage_for", opened)
    study = tmp_path / "results" / "s1"
    study.mkdir(parents=True)
    recipes.write(study / "recipe.yml", recipes.Recipe("ncf", "tiny", {"lr": 0.0015}))
    (study / "space.yml").write_bytes(spaces.SPACE.read_bytes())
    before = sorted(tmp_path.rglob("*"))
    hosts = inventory.load(ROOT / "inventory" / "local.yml").select()
    for kw in ({"baseline": str(study / "recipe.yml")}, {"space_file": str(study / "space.yml")}):
        with pytest.raises(ConfigError) as err:
            cmd.tune(
                hosts, "ncf", results_dir=tmp_path / "results", history_url="sqlite://", scale="tiny", name="s1", **kw
            )
        assert err.value.message == (
            f"tune --name s1: {study} holds the input {next(iter(kw.values()))}; "
            "copy the file out of the study's folder or give another --name (nothing was written)"
        )
    assert sorted(tmp_path.rglob("*")) == before
