"""End to end: real runner runs (ncf, tiny scale, CPU) in a sweep written by lab.sweep.driver, reported.

The run directories are made by `python -m runner run`, the sweep.json by
lab.sweep.driver's own Sweep.save (the ``runner_sweep`` fixture, conftest.py); nothing
here is a stand-in.
"""

import json

import pytest

from lab.report.build import build_report

pytestmark = pytest.mark.slow


def test_report_of_real_runner_runs(runner_sweep, tmp_path):
    res = build_report([runner_sweep], tmp_path / "report", formats=("json", "md"))
    (rec,) = res.summary
    assert (rec["benchmark"], rec["system"], rec["gpus"]) == ("ncf [tiny]", "CPU / current", 0)
    assert (rec["runs"], rec["successes"], rec["too_few_runs"]) == (2, 2, True)
    # gpulab's own logs, checked by its ruleset: NCF needs the exception that 0.7.0 has no NCF rules.
    assert (rec["compliance"], rec["compliance_ruleset"]) == ("PASS", "training 0.7.0 + gpulab exceptions")
    assert [w.split(" (waived: ")[0] for w in rec["compliance_waived"]] == [
        e["why"]
        for e in json.loads((tmp_path / "report" / "summary.json").read_text())["compliance"]["gpulab"]["exceptions"]
        if e["benchmarks"] == ["ncf"]
    ]
    statuses = [json.loads(p.read_text()) for p in sorted(runner_sweep.glob("localhost/*/status.json"))]
    # The MLLOG clock (run_start -> run_stop) agrees with the runner's own time to train; run_stop is
    # logged just after the runner stops its clock, so allow half a second on a busy machine.
    ttt = [s["result"]["time_to_train_s"] / 60 for s in statuses]
    assert rec["score_minutes"] == pytest.approx(sum(ttt) / 2, abs=0.5 / 60)
    assert rec["epochs_min"] == min(s["result"]["epochs"] for s in statuses)
    assert rec["throughput_mean"] == pytest.approx(sum(s["result"]["samples_per_s"] for s in statuses) / 2)
    assert res.skipped == [
        (
            str(runner_sweep / "localhost" / "ncf-ttt-tiny-cpu-s3"),
            "planned run has no run directory (sweep state: failed; interrupted)",
        )
    ]
    doc = json.loads((tmp_path / "report" / "summary.json").read_text())
    seeds = {e["benchmark"]: e for e in doc["seed_effects"]}
    assert seeds["ncf [tiny]"]["runs"] == 2
