"""End to end: real runner runs (ncf, tiny scale, CPU) in a sweep written by lab.sweep.driver, reported.

The run directories are made by `python -m runner run`, the sweep.json by
lab.sweep.driver's own Sweep.save; nothing here is a stand-in.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.sweep import driver as sw
from lab.report.build import build_report

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runner_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e") / "results" / "demo"
    planned = [sw.PlannedRun("localhost", "ncf", 0, seed, "ttt", "tiny") for seed in (1, 2)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="2",
               GPULAB_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    for run in planned:
        out = root / run.host / run.run_id
        p = subprocess.run([sys.executable, "-m", "runner", "run", "ncf", "--scale", "tiny", "--seed",
                            str(run.seed), "--gpus", "0", "--out", str(out)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        status = json.loads((out / "status.json").read_text())
        run.state, run.outcome, run.reason = "complete", status["outcome"], status["reason"]
    # A third planned run that never ran.
    planned.append(sw.PlannedRun("localhost", "ncf", 0, 3, "ttt", "tiny", state="failed", reason="interrupted"))
    sweep = sw.Sweep(root=root, name="demo", runs=planned, hosts={
        "localhost": {"address": "localhost", "gpu_model": "auto", "gpu_count": "auto", "stack": "current"}})
    sweep.save()
    return root


def test_report_of_real_runner_runs(runner_sweep, tmp_path):
    res = build_report([runner_sweep], tmp_path / "report", formats=("json", "md"))
    (rec,) = res.summary
    assert (rec["benchmark"], rec["system"], rec["gpus"]) == ("ncf [tiny]", "0x CPU / current", 0)
    assert (rec["runs"], rec["successes"], rec["too_few_runs"]) == (2, 2, True)
    statuses = [json.loads(p.read_text()) for p in sorted(runner_sweep.glob("localhost/*/status.json"))]
    # The MLLOG clock (run_start -> run_stop) agrees with the runner's own time to train; run_stop is
    # logged just after the runner stops its clock, so allow half a second on a busy machine.
    ttt = [s["result"]["time_to_train_s"] / 60 for s in statuses]
    assert rec["score_minutes"] == pytest.approx(sum(ttt) / 2, abs=0.5 / 60)
    assert rec["epochs_min"] == min(s["result"]["epochs"] for s in statuses)
    assert rec["throughput_mean"] == pytest.approx(sum(s["result"]["samples_per_s"] for s in statuses) / 2)
    assert res.skipped == [(str(runner_sweep / "localhost" / "ncf-ttt-tiny-cpu-s3"),
                            "planned run has no run directory (sweep state: failed; interrupted)")]
    doc = json.loads((tmp_path / "report" / "summary.json").read_text())
    seeds = {e["benchmark"]: e for e in doc["seed_effects"]}
    assert seeds["ncf [tiny]"]["runs"] == 2
