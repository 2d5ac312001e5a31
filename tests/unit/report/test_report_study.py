"""The synthetic mini-study (T4 1-4, V100-PCIe 1-3, v0.5 logs) through build_report."""

import csv
import json

import pytest

from report_logs import STUDY


def record(summary, bench, system):
    (r,) = [r for r in summary if r["benchmark"] == bench and r["system"] == system]
    return r


def test_nothing_skipped_and_one_record_per_benchmark_and_system(study_report):
    res, out = study_report
    assert res.skipped == []
    assert len(res.summary) == sum(len(s["epochs"]) for s in STUDY.values()) == 28
    for r in res.summary:
        assert {"benchmark", "system", "gpus", "runs", "successes", "score_minutes"} <= r.keys()
    doc = json.loads((out / "summary.json").read_text())
    assert doc["schema"] == 1 and doc["records"] == res.summary and doc["n_runs"] == 28


# The T4 logs sit in MLPerf's results/<system>/ layout: each system is its folder ("1xT4"),
# with device and GPU count read from the folder name; the V100 logs are loose files.
@pytest.mark.parametrize(
    "bench, system, minutes",
    [
        ("gnmt", "1xT4", 720.0),
        ("gnmt", "2xT4", 231.0),
        ("gnmt", "4xT4", 72.0),
        ("gnmt", "1x V100-PCIe", 320.0),
        ("gnmt", "3x V100-PCIe", 72.0),
        ("resnet", "1xT4", 610.0),
        ("transformer", "1x V100-PCIe", 8 * 30.0 / 2.7),
    ],
)
def test_scores_by_hand(study_report, bench, system, minutes):
    r = record(study_report[0].summary, bench, system)
    assert r["score_minutes"] == pytest.approx(minutes)
    # One run per configuration, as in the study: every score is marked.
    assert (r["runs"], r["successes"], r["too_few_runs"]) == (1, 1, True)


def test_device_ratios(study_report):
    doc = json.loads((study_report[1] / "summary.json").read_text())
    ratios = {(r["benchmark"], r["gpus"]): r for r in doc["ratios"]}
    assert all(r["pair"] == "V100-PCIe / T4" for r in ratios.values())
    for n in (1, 2, 3):
        assert ratios[("resnet", n)]["ttt_ratio"] == pytest.approx(3.6)
        assert ratios[("resnet", n)]["same_epochs"] is True
        assert ratios[("gnmt", n)]["throughput_ratio"] == pytest.approx(3.0)
        assert ratios[("gnmt", n)]["same_epochs"] is False
    assert ratios[("ssd", 1)]["ttt_ratio"] == pytest.approx(3.3)
    assert ratios[("ssd", 2)]["ttt_ratio"] == pytest.approx(3.4)
    assert ratios[("gnmt", 1)]["ttt_ratio"] == pytest.approx(720 / 320)
    assert ratios[("transformer", 1)]["throughput_ratio"] == pytest.approx(2.7)
    overall = next(r for r in doc["ratio_ranges"] if r["benchmark"] == "all benchmarks")
    assert (overall["comparable_min"], overall["comparable_max"]) == (pytest.approx(2.7), pytest.approx(3.6))


def test_gnmt_superlinear_flagged_and_explained(study_report):
    doc = json.loads((study_report[1] / "summary.json").read_text())
    rows = {(r["benchmark"], r["device"], r["gpus"]): r for r in doc["scaling"]}
    t2, t4 = rows[("gnmt", "T4", 2)], rows[("gnmt", "T4", 4)]
    assert t2["speedup"] == pytest.approx(720 / 231) and t2["superlinear"]
    assert t4["speedup"] == pytest.approx(10.0) and t4["superlinear"]
    assert "converged in 4 epochs instead of 12" in t4["explanation"]
    assert "not the hardware" in t4["explanation"]
    v3 = rows[("gnmt", "V100-PCIe", 3)]
    assert v3["speedup"] == pytest.approx(320 / 72) and "9 epochs instead of 16" in v3["explanation"]
    assert not any(r["superlinear"] for k, r in rows.items() if k[0] in ("resnet", "ssd"))
    assert rows[("resnet", "T4", 4)]["efficiency"] == pytest.approx(10.0 / 2.7 / 4)


def test_seed_effects(study_report):
    doc = json.loads((study_report[1] / "summary.json").read_text())
    eff = {e["benchmark"]: e for e in doc["seed_effects"]}
    assert eff["gnmt"]["seed_dominated"] and eff["gnmt"]["epoch_ratio"] == pytest.approx(4.0)
    assert eff["gnmt"]["epochs_by_gpus"] == "T4 (1: 12, 2: 7, 3: 5, 4: 4); V100-PCIe (1: 16, 2: 12, 3: 9)"
    assert eff["transformer"]["seed_dominated"] and eff["transformer"]["epoch_ratio"] == pytest.approx(3.0)
    assert not eff["resnet"]["seed_dominated"] and not eff["ssd"]["seed_dominated"]
    assert eff["gnmt"]["seed_share"] is None and eff["gnmt"]["basis"].startswith("no system has 2 runs")


def test_figures_tables_and_markdown(study_report):
    res, out = study_report
    figs = sorted(p.name for p in (out / "figures").iterdir())
    assert figs == ["fig1_time_to_train.png", "fig2_throughput.png", "fig3_scaling.png"]
    for name in figs:
        assert (out / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(out / "tables" / "scores.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 28 and float(record(rows, "gnmt", "4xT4")["score_minutes"]) == pytest.approx(72.0)
    md = (out / "report.md").read_text()
    for name in figs:
        assert f"(figures/{name})" in md
    # Submitter: the folder above results/ (here the input folder, "study").
    assert "| gnmt | study | 4xT4 | T4 | 4 | — | — | 1 | 1 | 10 | 72.00 | not checked |" in md
    assert "gnmt on T4: super-linear speedup at 2, 3, 4 GPUs (3.12x, 6.00x, 10.00x over 1)" in md
    assert {str(p) for p in res.files} >= {
        str(out / "report.html"),
        str(out / "report.md"),
        str(out / "summary.json"),
        str(out / "tables" / "runs.csv"),
    }


def test_html_is_self_contained(study_report):
    html = (study_report[1] / "report.html").read_text()
    assert "http://" not in html and "https://" not in html
    assert html.count('src="data:image/png;base64,') == 3
