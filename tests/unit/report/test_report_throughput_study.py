"""The throughput study (`invoke sweep --mode throughput`): run directories of throughput runs on
T4 and V100-PCIe hosts give Figure 2 and the device ratios, and no time-to-train score is marked
as resting on too few runs."""

import json

import pytest

from lab.report.build import build_report
from report_logs import write_rundir

# samples/s per GPU count: V100-PCIe 3x T4 on gnmt, 2.7x on ncf, as the study found
THROUGHPUT = {"gnmt": {"T4": 25_000.0, "V100-PCIe": 75_000.0}, "ncf": {"T4": 8.0e6, "V100-PCIe": 21.6e6}}


@pytest.fixture(scope="module")
def throughput_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("thr") / "results"
    for device, gpu_name, host, counts in (
        ("T4", "Tesla T4", "r740-01", 4),
        ("V100-PCIe", "Tesla V100-PCIE-16GB", "r740-03", 3),
    ):
        for bench, per in THROUGHPUT.items():
            for n in range(1, counts + 1):
                write_rundir(
                    root / "fig2" / host / f"{bench}-throughput-full-{n}gpu-s1",
                    benchmark=bench,
                    gpu_name=gpu_name,
                    gpus=tuple(range(n)),
                    host=host,
                    host_gpus=counts,
                    seed=1,
                    mode="throughput",
                    result={"samples_per_s": per[device] * n * 0.95 ** (n - 1)},
                )
    out = root / "report"
    res = build_report([root / "fig2"], out, formats=("json", "md"))
    return res, out


def test_figure_2_and_the_throughput_ratios(throughput_report):
    res, out = throughput_report
    assert res.skipped == []
    assert (out / "figures" / "fig2_throughput.png").stat().st_size > 0
    doc = json.loads((out / "summary.json").read_text())
    ratios = {(r["benchmark"], r["gpus"]): r for r in doc["ratios"]}
    assert set(ratios) == {(b, n) for b in THROUGHPUT for n in (1, 2, 3)}
    for n in (1, 2, 3):
        assert ratios[("gnmt", n)]["throughput_ratio"] == pytest.approx(3.0)
        assert ratios[("ncf", n)]["throughput_ratio"] == pytest.approx(2.7)
        assert ratios[("gnmt", n)]["pair"] == "V100-PCIe / T4" and ratios[("gnmt", n)]["ttt_ratio"] is None


def test_throughput_records_are_not_marked_as_too_few_ttt_runs(throughput_report):
    res, out = throughput_report
    assert len(res.summary) == 2 * (4 + 3)
    for r in res.summary:
        assert r["too_few_runs"] is False and r["score_minutes"] is None
        assert r["mark"] == "throughput only: 1 run(s), no time to train"
    md = (out / "report.md").read_text()
    assert "too few runs" not in md
    assert "14 of 14 benchmark x system records come from throughput runs only" in md
    assert "- V100-PCIe is 2.70-3.00x T4 over 2 benchmark(s) at equal GPU counts" in md
