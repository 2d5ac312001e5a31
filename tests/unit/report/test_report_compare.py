"""--compare: two sets of runs side by side, changes beyond run-to-run noise flagged."""

import json

import pytest

from lab.report.build import build_report
from report_logs import T0, v05_run, write_lines


def write_set(root, runs):
    """runs: {(bench, gpus): [minutes...]}; 2 epochs per run, 1M samples per epoch."""
    start = T0
    for (bench, gpus), minutes in runs.items():
        for i, m in enumerate(minutes):
            lines = v05_run(
                bench,
                start=start,
                epochs=2,
                epoch_s=m * 30.0,
                samples=1_000_000,
                target={"resnet": 0.749, "gnmt": 21.8, "ssd": 0.212, "transformer": 25.0}[bench],
            )
            write_lines(root / f"{gpus}xT4" / bench / f"result_{i}.txt", lines)
            start += 10_000
    return root


@pytest.fixture()
def compared(tmp_path):
    before = write_set(
        tmp_path / "before", {("gnmt", 1): [100, 101, 102], ("resnet", 1): [100, 104, 98], ("transformer", 1): [50]}
    )
    after = write_set(
        tmp_path / "after",
        {("gnmt", 1): [110, 111, 112], ("resnet", 1): [101, 99, 103], ("transformer", 1): [40], ("ssd", 1): [20, 21]},
    )
    build_report([after], tmp_path / "out", formats=("json", "md"), compare=before)
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    return {r["benchmark"]: r for r in doc["compare"]}, tmp_path / "out"


def test_slower_gnmt_is_flagged(compared):
    rows, _ = compared
    g = rows["gnmt"]
    assert g["status"] == "compared"
    assert g["ttt_other"] == pytest.approx(101.0) and g["ttt_this"] == pytest.approx(111.0)
    assert g["ttt_change_pct"] == pytest.approx(100 * 10 / 101)
    assert g["ttt_df"] == pytest.approx(4.0)
    assert g["ttt_p"] == pytest.approx(0.000255, abs=1e-6)
    assert g["ttt_flagged"] and g["ttt_verdict"] == "worse"
    assert g["throughput_flagged"] and g["throughput_verdict"] == "worse"
    assert g["throughput_change_pct"] < 0


def test_noise_is_not_flagged(compared):
    rows, _ = compared
    r = rows["resnet"]
    assert r["ttt_change_pct"] == pytest.approx(100 * (101 - 302 / 3) / (302 / 3))
    assert not r["ttt_flagged"] and r["ttt_verdict"] == "within run-to-run noise"
    assert r["ttt_p"] > 0.5


def test_single_runs_cannot_be_tested_and_unmatched_systems_are_listed(compared):
    rows, out = compared
    t = rows["transformer"]
    assert t["ttt_change_pct"] == pytest.approx(-20.0)
    assert not t["ttt_flagged"] and t["ttt_verdict"] == "too few runs to test (2 per side needed)"
    assert rows["ssd"]["status"] == "only in this report"
    md = (out / "report.md").read_text()
    assert "| gnmt | 1x T4 |" in md and "**worse**" in md and "only in this report" in md
