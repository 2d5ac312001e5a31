"""Published MLPerf result trees (v0.5, v0.6, v0.7 samples) read and scored by the report.

The samples are whole, unmodified logs from mlcommons/training_results_v0.5, _v0.6 and
_v0.7 (which systems and commits: the README beside the archive). The archive is
../shared/mlperf-samples.tar.xz: the folder shared/ beside the checkout, which CI provides.

Expected values, and where each comes from:
- "published": the MLPerf Training v0.5 results table (Google 8xV100 ResNet 137.80 min).
- "by hand": run_start and run_stop read off each log with grep (the first line of each,
  that is without the echoed copies), minutes = (stop - start) / 60, then the round's
  rule applied by hand: the fastest and slowest dropped, the mean of the rest. The per-run
  minutes are written next to each expectation.
"""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from lab.report import figures
from lab.core.mlperf import default_rules
from lab.report.analysis import analyse
from lab.report.build import build_report
from lab.results.logreader import read_runs


@pytest.fixture(scope="module")
def v05(trees):
    return {
        (r["submitter"], r["system"], r["benchmark"]): r
        for r in analyse(read_runs([trees / "training_results_v0.5"]).runs).systems
    }


@pytest.fixture(scope="module")
def v06(trees):
    return {
        (r["submitter"], r["system"], r["benchmark"]): r
        for r in analyse(read_runs([trees / "training_results_v0.6"]).runs).systems
    }


def test_v05_one_record_per_results_folder(v05):
    assert sorted(v05) == [
        ("google", "8xV100", "resnet"),
        ("google", "tpu (cloud_v2.8/resnet-tpuv2-8)", "resnet"),
        ("google", "tpu (cloud_v3.8/resnet-tpuv3-8)", "resnet"),
        ("nvidia", "dgx1_ngc18.11_pytorch", "ncf"),
        ("nvidia", "dgx2_ngc18.11_mxnet", "resnet"),
    ]


def test_google_8xv100_equals_the_published_table(v05):
    r = v05[("google", "8xV100", "resnet")]
    # entry.json: "Tesla V100-SXM2-16GB", 1 node x 8 accelerators, "TensorFlow 1.12.0".
    assert (r["device"], r["gpus"], r["nodes"], r["framework"]) == ("V100-SXM2", 8, 1, "TensorFlow 1.12.0")
    assert (r["runs"], r["successes"], r["scored_runs"]) == (5, 5, 5)
    # Published 137.80; by hand: 137.985 137.876 137.867 137.658 137.188 -> mean of the middle three.
    assert round(r["score_minutes"], 2) == 137.80
    assert r["compliance"] == "not checked"  # mlperf-logging has no v0.5 ruleset
    # Throughput: its train_epoch events are all logged after the run, so the rate is the
    # whole run's: 62 epochs x 1,281,167 images / about 8,270 s, about 9,600 images/s.
    assert 9_000 < r["throughput_mean"] < 10_000 and r["sample_unit"] == "images"


def test_dgx2_mxnet_logs_with_every_event_twice(v05):
    r = v05[("nvidia", "dgx2_ngc18.11_mxnet", "resnet")]
    assert (r["device"], r["gpus"], r["nodes"], r["framework"]) == ("V100-SXM3", 16, 1, "MXNet NGC 18.11")
    assert (r["runs"], r["successes"]) == (5, 5)
    # By hand: 73.882 73.927 73.881 74.318 74.010 -> (73.882 + 73.927 + 74.010) / 3 = 73.94.
    assert round(r["score_minutes"], 2) == 73.94
    # About 63 epochs x 1,281,167 images in about 4,400 s of training: some 18-20k images/s.
    assert 15_000 < r["throughput_mean"] < 25_000


def test_two_tpu_folders_are_two_systems(v05):
    # By hand: v2-8 301.517 306.365 301.429 301.787 296.285 -> 301.58;
    #          v3-8 183.426 180.204 183.469 183.365 183.418 -> 183.40.
    assert round(v05[("google", "tpu (cloud_v2.8/resnet-tpuv2-8)", "resnet")]["score_minutes"], 2) == 301.58
    v3 = v05[("google", "tpu (cloud_v3.8/resnet-tpuv3-8)", "resnet")]
    assert round(v3["score_minutes"], 2) == 183.40
    # These logs mark only epoch 0 with train_epoch; the evaluated epochs (0-based) say 62:
    # 62 x 1,281,167 images over about 11,000 s, some 7,200 images/s (whole run).
    assert v3["epochs_min"] >= 60 and 6_000 < v3["throughput_mean"] < 8_500


def test_ncf_first_50_converged_of_100(v05):
    r = v05[("nvidia", "dgx1_ngc18.11_pytorch", "ncf")]
    assert (r["runs"], r["successes"], r["runs_required"], r["scored_runs"]) == (100, 86, 100, 50)
    # By hand: result_0..result_55 less the six that failed (2, 16, 25, 40, 49, 52) are the
    # first 50 converged; less the fastest (result_42, 24.05 s) and the slowest (result_13,
    # 33.19 s), the mean of the 48 is 28.40 s = 0.4733 min.
    assert r["score_minutes"] == pytest.approx(0.4733, abs=5e-5)
    assert not r["too_few_runs"] and r["mark"] == ""


def test_v06_systems_files_and_compliance(v06):
    nv = v06[("NVIDIA", "dgx1_ngc19.05_pytorch", "ssd")]
    # NVIDIA's v0.6 systems file is 'key: {"value": ...}' lines holding a Python literal.
    assert (nv["device"], nv["gpus"], nv["nodes"], nv["framework"]) == (
        "V100-SXM2",
        8,
        1,
        "PyTorch NVIDIA Release 19.05",
    )
    # By hand: 22.459 22.341 22.292 22.326 22.422 -> 22.36.
    assert round(nv["score_minutes"], 2) == 22.36 and nv["compliance"] == "PASS"
    g = v06[("Google", "tpu-v3-32", "resnet")]
    assert (g["device"], g["gpus"]) == ("tpu-v3", 16)
    # By hand: 42.224 42.166 42.168 44.887 42.142 -> 42.19; the 0.6.0 checker rejects every
    # one of these logs (cache_clear logged with value null), so the score is marked.
    assert round(g["score_minutes"], 2) == 42.19
    assert g["compliance"] == "FAIL (5 of 5)" and "fail the compliance checker" in g["mark"]


def test_report_files_carry_the_facts(trees, tmp_path):
    res = build_report([trees / "training_results_v0.6"], tmp_path / "out", formats=("json", "md", "html"))
    rec = next(r for r in res.summary if r["system"] == "tpu-v3-32")
    for key in (
        "submitter",
        "system",
        "device",
        "gpus",
        "nodes",
        "framework",
        "score_minutes",
        "runs",
        "successes",
        "compliance",
    ):
        assert key in rec
    md = (tmp_path / "out" / "report.md").read_text()
    assert md.startswith("# gpulab report — MLPerf Training v0.6 results (training 0.6.0 ruleset)\n")
    assert "| resnet | Google | tpu-v3-32 | tpu-v3 | 16 TPU chips | 1 |" in md and "FAIL (5 of 5)" in md
    html = (tmp_path / "out" / "report.html").read_text()
    assert '<span class="badge warn">FAIL (5 of 5)</span>' in html


def test_scores_equal_mlperf_loggings_result_summarizer(trees, tmp_path):
    """v0.7 (MLLOG), a round the summarizer covers: the same tree, the same score."""
    tree = trees / "training_results_v0.7"
    out = tmp_path / "summary.csv"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mlperf_logging.result_summarizer",
            str(tree / "Google"),
            "training",
            "0.7.0",
            "--csv",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    theirs = {(r["system"], b): float(r[b]) for r in rows for b in ("resnet",) if r.get(b)}
    assert theirs, "the summarizer wrote no score"
    (mine,) = analyse(read_runs([tree]).runs).systems
    assert mine["system"] == "gpu-v100-8-TF2.0" and mine["compliance"] == "PASS"
    # The summarizer names the system by the description's system_name ("8xV100").
    assert mine["score_minutes"] == pytest.approx(theirs[("8xV100", "resnet")], abs=1e-6)
    # Published v0.7 description: "NVIDIA V100", no form factor: kept as written.
    assert (mine["device"], mine["gpus"]) == ("V100", 8)


def test_figures_have_a_panel_per_benchmark_with_a_value_and_no_other(trees, tmp_path):
    an = analyse(read_runs([trees / "training_results_v0.5"]).runs)
    figs = {f["name"]: f for f in figures.draw_all(an, default_rules(), tmp_path)}
    assert sorted(figs) == ["fig1", "fig2"]  # one GPU count per device line: no scaling figure
    assert figs["fig1"]["panels"] == ["resnet", "ncf"]
    assert figs["fig2"]["panels"] == ["resnet", "ncf"]
    for f in figs.values():
        assert f["path"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
