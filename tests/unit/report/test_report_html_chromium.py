"""report.html opened in headless Chromium: tables and figures checked as rendered.

Needs Debian's `chromium` package (CI installs it). Chromium loads the file with
network access switched off, runs the page's own script after the load event
(it records each image's decoded naturalWidth), and --dump-dom prints the DOM
as rendered, which the test reads back.
"""

import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from lab.report.build import build_report
from report_logs import T0, v05_run, write_lines, write_rundir

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Dom(HTMLParser):
    """Tables (by id), images and <body> attributes of a dumped DOM."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.body = {}
        self.images = []
        self.tables = {}
        self.figures = []
        self.texts = {}  # text of every element with an id (nested ones included)
        self._ids = []
        self._table = None
        self._row = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id") and tag not in ("img", "meta", "br"):
            self._ids.append((tag, a["id"]))
            self.texts[a["id"]] = []
        if tag == "body":
            self.body = a
        elif tag == "img":
            self.images.append(a)
        elif tag == "figure":
            self.figures.append(a.get("id"))
        elif tag == "table" and a.get("id"):
            self._table = self.tables.setdefault(a["id"], [])
        elif tag == "tr" and self._table is not None:
            self._row = {"attrs": a, "cells": []}
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if self._ids and self._ids[-1][0] == tag:
            _, name = self._ids.pop()
            self.texts[name] = " ".join("".join(self.texts[name]).split())
        if tag in ("td", "th") and self._cell is not None:
            self._row["cells"].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row["attrs"].get("class") is not None or self._row["cells"]:
                self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        for _, name in self._ids:
            self.texts[name].append(data)
        if self._cell is not None:
            self._cell.append(data)


def render(html_path, tmp_path, window: str | None = None) -> Dom:
    """The page as headless Chromium laid it out (its DOM after the load script); ``window`` "W,H" sets the
    window the layout is measured in (Chromium's default otherwise)."""
    if CHROMIUM is None:
        if os.environ.get("CI") or os.environ.get("GPULAB_REQUIRE_LAB", "") not in ("", "0"):
            pytest.fail("chromium is not installed (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    profile = tmp_path / "chromium-profile"
    out = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            *([f"--window-size={window}"] if window else []),
            html_path.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    dom = Dom()
    dom.feed(out.stdout)
    dom.html = out.stdout
    return dom


def data_rows(dom, table):
    return [r for r in dom.tables[table][1:]]


@pytest.fixture(scope="module")
def rendered(mini_study, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    # Run directories with telemetry (Figure 4), a bad file, and a compared set.
    telemetry = [(t, 0, 65.0) for t in range(0, 301, 30)]
    for i, seed in enumerate((1, 2, 3)):
        write_rundir(
            tmp / "lab" / "r740-01" / f"gnmt-1g-s{seed}",
            seed=seed,
            telemetry=telemetry,
            result={"samples_per_s": 30000.0},
            mllog_kwargs={"epochs": 3, "epoch_s": 100.0, "start": T0 + 1000 * i},
        )
    write_lines(
        tmp / "lab" / "broken" / "result_0.txt",
        [x for x in v05_run("ssd", epochs=2, epoch_s=10.0, target=0.212) if "run_stop" not in x],
    )
    # NCF (not in the mini-study) before and after, 1x T4: 101 -> 111 minutes.
    before = tmp / "before"
    for i, m in enumerate((100, 101, 102)):
        write_lines(
            before / "1xT4" / "ncf" / f"result_{i}.txt",
            v05_run("ncf", start=T0 + 10_000 * i, epochs=2, epoch_s=m * 30.0, target=0.635),
        )
    for i, m in enumerate((110, 111, 112)):
        write_lines(
            tmp / "after" / "1xT4" / "ncf" / f"result_{i}.txt",
            v05_run("ncf", start=T0 + 10_000 * i, epochs=2, epoch_s=m * 30.0, target=0.635),
        )
    out = tmp / "report"
    res = build_report([mini_study, tmp / "lab", tmp / "after"], out, compare=before)
    return render(out / "report.html", tmp), res


def test_every_figure_decoded(rendered):
    dom, res = rendered
    assert dom.figures == ["fig1", "fig2", "fig3", "fig4"]
    assert len(dom.images) == 4
    assert dom.body.get("data-images-total") == "4"
    assert dom.body.get("data-images-loaded") == "4"
    for img in dom.images:
        assert img["src"].startswith("data:image/png;base64,")
        assert int(img["data-natural-width"]) > 400


def test_scores_table_as_rendered(rendered):
    dom, res = rendered
    rows = data_rows(dom, "scores")
    assert len(rows) == len(res.summary) == 30  # 28 of the mini-study, gnmt 1x T4 / mlperf-v0.5, ncf 1x T4
    by = {(r["cells"][0], r["cells"][2]): r for r in rows}
    gnmt4 = by[("gnmt", "4xT4")]  # the results folder names the system
    assert gnmt4["cells"][3:5] == ["T4", "4"]  # device and GPUs from the folder name
    assert gnmt4["cells"][10] == "72.00"  # score, minutes to 0.01
    assert gnmt4["cells"][11] == "not checked"  # v0.5 logs: no compliance ruleset
    assert gnmt4["cells"][17] == "too few runs 1 successful of 10 required"
    assert gnmt4["attrs"]["class"] == "warn"
    lab = by[("gnmt", "1x T4 / driver 410.72, cuda 10.0.130, torch 1.0.0")]
    # GPUs, nodes, framework, runs, successes, required, score (3 x 100 s), compliance
    assert lab["cells"][4:12] == ["1", "—", "—", "3", "3", "10", "5.00", "PASS training 0.7.0 + gpulab exceptions"]


def test_ratio_scaling_and_seed_tables_as_rendered(rendered):
    dom, _ = rendered
    ratios = {(r["cells"][1], r["cells"][2]): r["cells"] for r in data_rows(dom, "ratios")}
    assert ratios[("resnet", "1")][0] == "V100-PCIe / T4" and ratios[("resnet", "1")][6] == "3.60x"
    assert ratios[("gnmt", "2")][7] == "3.00x"
    scaling = {(r["cells"][0], r["cells"][1], r["cells"][3]): r for r in data_rows(dom, "scaling")}
    g4 = scaling[("gnmt", "T4", "4")]
    assert scaling[("resnet", "T4", "4")]["attrs"]["class"] == ""
    assert g4["attrs"]["class"] == "flag" and g4["cells"][5] == "10.00x"
    assert g4["cells"][12].startswith("super-linear 10.00x on 4x the GPUs of 1: converged in 4 epochs instead of 12")
    seeds = {r["cells"][0]: r["cells"] for r in data_rows(dom, "seed-effects")}
    assert seeds["gnmt"][5] == "yes" and seeds["resnet"][5] == "no"


def test_energy_compare_and_skipped_as_rendered(rendered):
    dom, _ = rendered
    (energy,) = [r["cells"] for r in data_rows(dom, "energy")]
    assert (
        energy[:3] == ["gnmt", "1x T4 / driver 410.72, cuda 10.0.130, torch 1.0.0", "65"] and energy[5] == "462"
    )  # 30000 / 65
    compare = {(r["cells"][0], r["cells"][1]): r for r in data_rows(dom, "compare")}
    cmp_row = compare[("ncf", "1x T4")]
    assert cmp_row["attrs"]["class"] == "flag"
    assert compare[("gnmt", "4x T4")]["cells"][3] == "only in this report"
    assert cmp_row["cells"][5] == "+9.9%" and cmp_row["cells"][7] == "worse"
    skipped = [r["cells"] for r in data_rows(dom, "skipped")]
    assert [c[1] for c in skipped if c[0].endswith("broken/result_0.txt")] == [
        "no run_stop: the log is truncated or the run did not finish"
    ]


def test_published_tree_report_as_rendered(trees, tmp_path):
    out = tmp_path / "report"
    res = build_report([trees / "training_results_v0.5"], out, formats=("html",))
    dom = render(out / "report.html", tmp_path)
    assert dom.body.get("data-images-loaded") == dom.body.get("data-images-total") == "2"
    rows = data_rows(dom, "scores")
    assert len(rows) == len(res.summary) == 5
    by = {(r["cells"][1], r["cells"][2]): r["cells"] for r in rows}
    # submitter, system as the tree names them; device, GPUs, nodes, framework from entry.json
    # (TPU and GPU systems in one table: each count names its unit)
    assert by[("google", "8xV100")][3:7] == ["V100-SXM2", "8 GPUs", "1", "TensorFlow 1.12.0"]
    assert by[("google", "8xV100")][10] == "137.80"
    assert ("google", "tpu (cloud_v2.8/resnet-tpuv2-8)") in by
    # entry.json counts a TPU slice's TensorCores (tpuv3-8: 8), the header no GPU
    assert by[("google", "tpu (cloud_v3.8/resnet-tpuv3-8)")][3:5] == ["tpuv3-8", "8 TPU cores"]
    assert dom.tables["scores"][0]["cells"][4] == "Accelerators"
