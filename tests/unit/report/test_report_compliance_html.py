"""Both kinds of report opened in headless Chromium, as a lab reads them: the published MLPerf
v0.6 samples (a FAIL names its failing rule per run; TPU chips and GPUs named as such) and a sweep
of gpulab's own runs like `invoke demo`'s (checked, PASS, by gpulab's ruleset with its exceptions
listed; a CPU run is "CPU", never "0x CPU" or "0 GPUs"). The same facts are checked in report.md
and summary.json."""

import json
import re
from importlib.metadata import version

import pytest

from lab.report.build import build_report
from test_report_html_chromium import data_rows, render

CHECKER = f"mlperf-logging {version('mlperf-logging')}"


def header(dom, table):
    return dom.tables[table][0]["cells"]


def by_column(dom, table):
    cols = header(dom, table)
    return [dict(zip(cols, r["cells"])) for r in data_rows(dom, table)]


@pytest.fixture(scope="module")
def v06(trees, tmp_path_factory):
    out = tmp_path_factory.mktemp("v06") / "report"
    res = build_report([trees / "training_results_v0.6"], out, formats=("html", "md", "json"))
    return render(out / "report.html", out.parent), res, out


def test_v06_fail_cell_names_the_failing_rule_per_run(v06):
    dom, res, out = v06
    rows = {r["System"]: r for r in by_column(dom, "scores")}
    tpu, dgx = rows["tpu-v3-32"], rows["dgx1_ngc19.05_pytorch"]
    cell = tpu["Compliance"]
    # Every failing run named, in run order; runs failing for the same reason share its line.
    runs = ", ".join(f"result_{i}.txt" for i in range(5))
    assert cell.startswith(
        f"FAIL (5 of 5) training 0.6.0 {runs}: cache_clear (common.yaml): line 6 logs null; "
        "fails ( v['value'] == True )"
    )
    assert cell.count("cache_clear") == 1 and re.search(
        r"\(\+9 more: block_start, eval_accuracy, block_stop, \+6\)$", cell
    )
    assert dgx["Compliance"] == "PASS training 0.6.0"
    # Each run's own cell says it too.
    runs = [r for r in by_column(dom, "runs") if r["System"] == "tpu-v3-32"]
    assert len(runs) == 5 and all(
        r["Compliance"].startswith("FAIL cache_clear (common.yaml): line 6 logs null") for r in runs
    )
    # Which checker and ruleset judged.
    text = dom.texts["compliance-rules"]
    assert f"the checker of {CHECKER} on every scored run's log, by the ruleset training 0.6.0." in text
    assert "gpulab-exceptions" not in dom.texts  # no gpulab run in this report


def test_v06_counts_are_named_for_the_hardware(v06):
    dom, res, out = v06
    assert "Accelerators" in header(dom, "scores") and "GPUs" not in header(dom, "scores")
    rows = {r["System"]: r for r in by_column(dom, "scores")}
    assert rows["tpu-v3-32"]["Accelerators"] == "16 TPU chips"
    assert rows["dgx1_ngc19.05_pytorch"]["Accelerators"] == "8 GPUs"


def test_v06_markdown_and_json_carry_the_failing_rules(v06):
    dom, res, out = v06
    doc = json.loads((out / "summary.json").read_text())
    assert doc["compliance"] == {"checker": CHECKER, "rulesets": ["training 0.6.0"], "gpulab": None}
    rec = next(r for r in doc["records"] if r["system"] == "tpu-v3-32")
    assert rec["compliance"] == "FAIL (5 of 5)" and rec["compliance_ruleset"] == "training 0.6.0"
    assert [f.split(":")[0] for f in rec["compliance_failures"]] == [f"result_{i}.txt" for i in range(5)]
    assert all(": cache_clear (common.yaml): line 6 logs null" in f for f in rec["compliance_failures"])
    md = (out / "report.md").read_text()
    row = next(x for x in md.splitlines() if x.startswith("| resnet | Google | tpu-v3-32 |"))
    assert "| 16 TPU chips |" in row
    runs = ", ".join(f"result_{i}.txt" for i in range(5))
    assert f"| FAIL (5 of 5) (training 0.6.0)<br>{runs}: cache_clear (common.yaml): line 6 logs null" in row
    assert f"the checker of {CHECKER}" in md


@pytest.mark.slow
def test_demo_sweep_shows_its_runs_checked_with_the_ruleset_and_exceptions(runner_sweep, tmp_path):
    out = tmp_path / "report"
    build_report([runner_sweep], out, formats=("html", "md", "json"))
    dom = render(out / "report.html", tmp_path)
    doc = json.loads((out / "summary.json").read_text())
    gpulab = doc["compliance"]["gpulab"]
    assert gpulab["ruleset"] == "training 0.7.0 + gpulab exceptions"
    ncf = next(e for e in gpulab["exceptions"] if e["benchmarks"] == ["ncf"])
    (row,) = by_column(dom, "scores")
    assert row["System"] == "CPU / current" and row["Accelerators"] == "CPU"
    assert row["Compliance"] == (
        "PASS training 0.7.0 + gpulab exceptions exception: "
        + ncf["why"]
        + " (waived: submission_benchmark (open_common.yaml), open_ncf.yaml)"
    )
    assert all(r["Compliance"] == "PASS training 0.7.0 + gpulab exceptions" for r in by_column(dom, "runs"))
    text = dom.texts["compliance-rules"]
    assert f"the checker of {CHECKER}" in text and "gpulab's own runs are checked with training 0.7.0" in text
    assert dom.texts["gpulab-exceptions"].count("(waived: ") == len(gpulab["exceptions"])
    assert ncf["why"] in dom.texts["gpulab-exceptions"]
    # No "0x CPU", no "0 GPUs", no GPU column for a CPU run: not in the page, the Markdown or the JSON.
    for text in (dom.html, (out / "report.md").read_text()):
        assert "0x CPU" not in text and "0 GPUs" not in text and "<th>GPUs</th>" not in text
    assert "| CPU / current | CPU | CPU |" in (out / "report.md").read_text()
    (rec,) = doc["records"]
    assert rec["system"] == "CPU / current" and rec["compliance"] == "PASS"


@pytest.mark.slow
def test_demo_report_fits_the_window_and_says_only_what_it_ran(runner_sweep, tmp_path):
    """The demo's report at 1280 px: the main table's verdict columns (CV, epochs, throughput, the "too few runs"
    mark) in view without a horizontal scroll, seen in a screenshot; no waiver of a benchmark not run, no Python
    dict in the Method, no link to tables/*.csv it did not write."""
    import subprocess

    from PIL import Image

    from test_report_html_chromium import CHROMIUM

    out = tmp_path / "report"
    build_report([runner_sweep], out, formats=("html", "md", "json"))
    dom = render(out / "report.html", tmp_path, window="1280,1400")  # the width the README and the screenshot claim
    assert dom.body.get("data-scores-overflow") == "0" and dom.body.get("data-page-overflow") == "0"
    (row,) = by_column(dom, "scores")
    assert row["Mark"].startswith("too few runs") and row["CV"].endswith("%")
    md = (out / "report.md").read_text()
    assert "tables/" not in md and "tables/" not in dom.html and "{'" not in md + dom.html
    assert "waived" in dom.texts["gpulab-exceptions"] and "resnet" not in dom.texts["gpulab-exceptions"]
    assert "Targets and run counts: ncf HR@10 0.635" in md and "maskrcnn" not in md
    png = tmp_path / "report.png"
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'shot'}",
            "--window-size=1280,1400",
            "--proxy-server=127.0.0.1:9",
            f"--screenshot={png}",
            (out / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]
    img = Image.open(png).convert("RGB")
    px, (w, h) = img.load(), img.size
    badge = [
        (x, y)
        for y in range(0, h, 2)
        for x in range(0, w, 2)
        if all(abs(a - b) <= 8 for a, b in zip(px[x, y], (245, 194, 66)))
    ]  # the "too few runs" badge
    assert badge and max(x for x, _ in badge) < w - 16, "the Mark column is not in view"
