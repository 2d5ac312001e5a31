"""`invoke tune` on two SSH test hosts: README's "Tuning" walk-through, run as a user would.

Real SSH hosts (tests/testlab), the real runner, real tiny CPU runs of ncf: the search starts from a
deliberately poor recipe (NCF at lr 0.0015, which misses the target within the walk-through's 6 epochs),
finds a set that converges in fewer epochs on both seeds, and survives a controller killed with SIGKILL
during its third trial: the next `invoke tune` finds that trial stale and resumes it, its sweep adopting
the runs that went on on the hosts (none is run twice), and prunes it by its epoch cap. (Optuna's sampler
is seeded: the sets drawn, and so the trials, are the same on every run of this test.) The recipe it
writes then drives a sweep (`--recipe`), whose runs' manifests carry its settings. A transformer search
does the same from a deliberately poor learning rate (one seed a trial, for CI time). The same search runs
through Slurm on the Slurm lab (its session fixture): a trial's seeds are Slurm array tasks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

pytest.importorskip("tests.testlab.fixtures", reason="the SSH test lab (tests/testlab) is not in this checkout")
from tests.testlab.util import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
LAB_VARS = {"gpulab_gpu_model": "cpu", "gpulab_gpu_count": 0, "gpulab_stack": "current"}
HOSTS = ["tu-01", "tu-02"]
STUDY = "tune-ncf-tiny-cpu"


def invoke_cmd() -> list[str]:
    return [str(INVOKE)] if INVOKE.exists() else [sys.executable, "-m", "invoke"]


def walkthrough() -> tuple[str, list[list[str]]]:
    """README "Tuning": the recipe file the first block writes, and each `invoke` command's words."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Tuning\n") :]
    block = section[section.index("```sh\n") + 6 :]
    block = block[: block.index("```\n")]
    recipe = block[block.index("<<'EOF'\n") + 8 : block.index("\nEOF\n")]
    commands = [line.split()[1:] for line in block.splitlines() if line.startswith("invoke ")]
    return recipe, commands


@pytest.fixture(scope="module")
def lab(testlab):
    return testlab(names=HOSTS, groups={"cpu": HOSTS}, all_vars=LAB_VARS)


def run_invoke(words, cwd: Path, env: dict, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run(invoke_cmd() + words, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_readme_tuning_walkthrough_finds_a_better_recipe_prunes_and_survives_a_controller_kill(lab, tmp_path):
    recipe_text, commands = walkthrough()
    assert [c[0] for c in commands] == ["tune", "tune", "sweep"]
    work = tmp_path / "work"
    work.mkdir()
    (work / "poor-ncf.yml").write_text(recipe_text + "\n")
    results = work / "results"
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_RESULTS=str(results))
    inv = ["--inventory", str(lab.inventory)]
    # invoke runs tasks.py of the checkout: the commands run from ROOT, their files given as absolute paths
    tune_words = [str(work / w) if w == "poor-ncf.yml" else w for w in commands[0]] + inv
    assert tune_words == [str(work / w) if w == "poor-ncf.yml" else w for w in commands[1]] + inv

    # 1. the search, killed (SIGKILL, no chance to clean up) while its third trial runs on the hosts
    t2_state = results / STUDY / f"{STUDY}-t0002" / "sweep.json"
    proc = subprocess.Popen(
        invoke_cmd() + tune_words, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

    def trial2_running() -> bool:
        if proc.poll() is not None:
            return True
        if not t2_state.is_file():
            return False
        runs = json.loads(t2_state.read_text() or "{}").get("runs", [])
        return any(r.get("state") == "running" for r in runs)

    wait_until(trial2_running, "the third trial's runs to start", limit=900)
    assert proc.poll() is None, proc.communicate()[0]
    proc.send_signal(signal.SIGKILL)
    first_out, _ = proc.communicate(timeout=60)
    assert "reference recipe 0:" in first_out and "trial 0: cost 12" in first_out, first_out
    assert "trial 1: cost" in first_out and "trial 2:" in first_out, first_out

    # 2. the same command resumes: trial 2 is stale (its controller is gone), resumed, not run again; its epoch
    #    cap (the best cost so far) stops a seed short of the target: pruned, as it cannot beat the best
    p = run_invoke(tune_words, ROOT, env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "trial 2 is stale" in out and "resuming it" in out, out
    assert "trial 2: pruned: seed(s)" in out and "cannot beat the best" in out, out
    t2 = json.loads(t2_state.read_text())
    assert all(r["state"] == "complete" and r["attempts"] == 1 for r in t2["runs"]), t2["runs"]
    assert sorted(r["host"] for r in t2["runs"]) == HOSTS  # one seed per host

    storage = optuna.storages.RDBStorage(f"sqlite:///{results / 'history-tune.sqlite'}")
    study = optuna.load_study(study_name=STUDY, storage=storage)
    trials = study.get_trials()
    base = trials[0]
    assert base.user_attrs["gpulab_baseline"] and base.params["lr"] == 0.0015
    assert base.value == 12  # both seeds missed within 6 epochs: 2 x 6 each
    assert "gpulab_stale" in trials[2].user_attrs and trials[2].state == optuna.trial.TrialState.PRUNED
    best = study.best_trial
    assert best.value < base.value
    summary = best.user_attrs["gpulab_summary"]
    assert summary["missed"] == 0 and max(summary["epochs"].values()) < 6
    report = (results / STUDY / "report.md").read_text()
    assert "reference recipe (trial 0)" in report and "missed" in report
    rec = yaml.safe_load((results / STUDY / "recipe.yml").read_text())
    assert rec["settings"] == best.params and rec["provenance"]["trial"] == best.number
    assert rec["provenance"]["rule_source"]["commit"].startswith("54a5bb0")
    # the runs are in the history too, and the study's file sits beside it
    assert (results / "history.sqlite").is_file() and (results / "history-tune.sqlite").is_file()

    # 3. the recipe drives a sweep: each run's manifest carries its settings as runner run --set
    sweep_words = [str(results / w[len("results/") :]) if w.startswith("results/") else w for w in commands[2]]
    p = run_invoke(sweep_words + inv + ["--name", "with-recipe"], ROOT, env)
    assert p.returncode == 0, p.stdout + p.stderr
    manifests = list((results / "with-recipe").glob("*/*/manifest.json"))
    assert len(manifests) == 2  # a sweep runs every seed on every host: 2 hosts x 1 seed
    for m in manifests:
        sets = json.loads(m.read_text())["options"]["set"]
        assert f"lr={json.dumps(best.params['lr'])}" in sets, sets
        assert any(re.fullmatch(r"batch_size=\d+", s) for s in sets)


def test_bad_tune_input_is_one_line_and_writes_nothing(lab, tmp_path):
    results = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_RESULTS=str(results))
    inv = ["--inventory", str(lab.inventory), "--device", "cpu"]
    bad_space = tmp_path / "space.yml"
    bad_space.write_text("schema: 1\nworkloads: {ncf: {params: {lr: {kind: float, low: 1, high: 0.1, rule: r}}}}\n")
    for words, says in (
        (["tune", "ncf", "--seeds", "0"], "--seeds"),
        (["tune", "ncf", "--space", str(bad_space)], "source is missing"),
        (["tune", "resnet50", "--scale", "tiny"], "no search space for workload 'resnet50'"),
        (["tune", "ncf", "--baseline", str(tmp_path / "none.yml")], "file not found"),
        (["tune", "ncf", "--name", "../x"], "is not a study name"),
        (["tune", "ncf", "--gpus", "two"], "--gpus"),
        (["tune", "ncf", "--backend", "nope"], "--backend"),
    ):
        p = run_invoke(words + inv, ROOT, env, timeout=120)
        assert p.returncode == 2 and says in p.stderr, (words, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not results.exists()


def test_a_transformer_search_beats_a_deliberately_poor_start(lab, tmp_path):
    """Transformer at tiny scale: a search from a deliberately poor recipe finds a set that converges in
    fewer epochs. The poor start is lr 0.0005, the lower bound of the v0.5 closed-division space (0.1 x
    the reference's 0.005; batch 32 and warm-up 30 as the reference): on this project's CPU (seed 1) its
    BLEU after epochs 1-6 was 0.0, 0.0, 0.068, 0.0, 0.0, 0.098, far from the target 0.3, so it misses
    within the search's cap of 5 epochs (cost 2 x 5). The sampler's default seed (0) draws for trial 1
    batch 42, lr 0.0063, warm-up 174, which reached BLEU 0.0, 0.099, 0.192, 0.332: the target at epoch 4,
    one epoch inside the cap (the reference recipe itself: epoch 4, BLEU 0.399). For CI time: one seed
    per trial (seed 1; the seed-stability of the objective is the ncf walk-through's) and two trials (the
    poor start and one drawn set), each run ~4-8 s an epoch on a quiet CPU. The searched settings reach
    the runs through runner run --set."""
    poor = tmp_path / "poor-transformer.yml"
    poor.write_text("schema: gpulab-recipe/1\nworkload: transformer\nscale: tiny\nsettings: {lr: 0.0005}\n")
    results = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_RESULTS=str(results))
    p = run_invoke(
        [
            "tune",
            "transformer",
            "--device",
            "cpu",
            "--scale",
            "tiny",
            "--seeds",
            "1",
            "--trials",
            "2",
            "--baseline",
            str(poor),
            "--max-epochs",
            "5",
            "--inventory",
            str(lab.inventory),
        ],
        ROOT,
        env,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "reference recipe 0: batch_size=32, lr=0.0005, warmup_steps=30; seeds 1..1, epoch cap 5" in out, out
    assert "trial 0: cost 10 (median 10 epochs, spread 0, 1 missed)" in out, out  # missed within 5: 2 x 5
    name = "tune-transformer-tiny-cpu"
    study = optuna.load_study(
        study_name=name, storage=optuna.storages.RDBStorage(f"sqlite:///{results / 'history-tune.sqlite'}")
    )
    base, best = study.trials[0], study.best_trial
    assert base.user_attrs["gpulab_baseline"] and base.params["lr"] == 0.0005
    assert best.number == 1 and best.params != base.params
    summary = best.user_attrs["gpulab_summary"]
    assert summary["missed"] == 0 and summary["epochs"]["1"] <= 5 and best.value == summary["epochs"]["1"]
    assert f"trial 1: cost {best.value:g} (median {best.value:g} epochs, spread 0, 0 missed)" in out, out
    assert f"best trial 1 cost {best.value:g} (reference recipe: 10)" in out, out
    report = (results / name / "report.md").read_text()
    assert "| reference recipe (trial 0) | missed |" in report, report
    assert f"| trial 1 | {best.value:g} |" in report, report
    rec = yaml.safe_load((results / name / "recipe.yml").read_text())
    assert rec["settings"] == best.params and rec["provenance"]["trial"] == 1
    for number, params in ((0, base.params), (1, best.params)):  # the settings as runner run --set
        [m] = (results / name / f"{name}-t{number:04d}").glob("*/*/manifest.json")
        assert m.parts[-3] in HOSTS
        doc = json.loads(m.read_text())
        assert sorted(doc["options"]["set"]) == sorted(f"{k}={json.dumps(v)}" for k, v in params.items())
        assert doc["options"]["max_epochs"] == 5


def test_a_search_through_slurm_runs_its_trials_as_job_arrays(slurmlab, tmp_path):
    """`invoke tune --backend slurm` on the Slurm lab (node-01, node-02; its session fixture): a trial's seeds
    are Slurm array tasks, one per node, whose job ids the trial's sweep records, and the study's result is
    what it is over SSH (the trial's per-seed epochs and cost, the report, the recipe). One trial (the
    reference recipe) keeps it lean: the sampled trials' path is the SSH walk-through's."""
    lab = slurmlab
    lab.cluster.reset()
    results = tmp_path / "results"
    env = {
        **os.environ,
        **lab.cluster.env,
        "PYTHONPATH": str(ROOT),
        "INVOKE_GPULAB_RESULTS": str(results),
        "INVOKE_GPULAB_SLURM_POLL_S": "0.5",
    }
    env.pop("INVOKE_GPULAB_HISTORY_URL", None)
    name = "tune-on-slurm"
    p = run_invoke(
        [
            "tune",
            "ncf",
            "--backend",
            "slurm",
            "--scale",
            "tiny",
            "--seeds",
            "2",
            "--trials",
            "1",
            "--max-epochs",
            "3",
            "--name",
            name,
            "--inventory",
            str(lab.inventory),
        ],
        ROOT,
        env,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "2 runs on 2 host(s) as Slurm jobs" in out, out  # both seeds at once, one a node
    assert len(re.findall(r"Slurm job (\d+): 1 run\(s\) \(CPU\)", out)) == 2, out
    study = optuna.load_study(
        study_name=name, storage=optuna.storages.RDBStorage(f"sqlite:///{results / 'history-tune.sqlite'}")
    )
    [trial] = study.get_trials()
    assert trial.user_attrs["gpulab_baseline"] and trial.state == optuna.trial.TrialState.COMPLETE
    summary = trial.user_attrs["gpulab_summary"]
    assert trial.value == summary["cost"] and sorted(summary["epochs"]) == ["1", "2"]
    assert all(1 <= e <= 3 for e in summary["epochs"].values()), summary
    doc = json.loads((results / name / f"{name}-t0000" / "sweep.json").read_text())
    assert doc["options"]["backend"] == "slurm"
    assert sorted(r["host"] for r in doc["runs"]) == ["node-01", "node-02"]
    assert sorted(r["seed"] for r in doc["runs"]) == [1, 2] and {r["state"] for r in doc["runs"]} == {"complete"}
    jobs = [r["slurm_job"] for r in doc["runs"]]
    assert all(re.fullmatch(r"\d+_0", j) for j in jobs) and len(set(jobs)) == 2, jobs
    for m in (results / name / f"{name}-t0000").glob("*/*/manifest.json"):
        opts = json.loads(m.read_text())["options"]
        assert sorted(opts["set"]) == ["batch_size=2048", "beta1=0.9", "beta2=0.999", "lr=0.01"]
        assert opts["max_epochs"] == 3
    assert not lab.cluster.command("squeue", "-h").stdout.strip()  # nothing left in the queue
    rec = yaml.safe_load((results / name / "recipe.yml").read_text())
    assert rec["settings"] == trial.params and rec["provenance"]["trial"] == 0
    assert "reference recipe (trial 0)" in (results / name / "report.md").read_text()
