"""`invoke history.page OUT`: the history as an HTML page, one trend plot per GPU and metric (SQLite and a real
PostgreSQL), read as a user reads it: the plots are there, each with its values."""

from __future__ import annotations

import base64
import html.parser
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from test_history_baseline import BW, past_validations

from lab.core.errors import ConfigError
from lab.history import db as hdb, page
from lab.history.models import Check

ROOT = Path(__file__).resolve().parents[3]


class Page(html.parser.HTMLParser):
    """What a reader sees: each figure (its id, data, image and caption) and the text of the page."""

    def __init__(self, text: str):
        super().__init__()
        self.figures: list[dict] = []
        self.text: list[str] = []
        self._fig = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure":
            self._fig = {**a, "img": None, "caption": "", "cells": []}
            self.figures.append(self._fig)
        elif tag == "img" and self._fig is not None:
            self._fig["img"] = a

    def handle_endtag(self, tag):
        if tag == "figure":
            self._fig = None

    def handle_data(self, data):
        self.text.append(data)
        if self._fig is not None and data.strip():
            self._fig["cells"].append(data.strip())


def read(path: Path) -> Page:
    return Page(path.read_text(encoding="utf-8"))


def test_a_plot_per_gpu_and_metric_with_its_values(db_url, tmp_path):
    past_validations(db_url, tmp_path, [4100.0, 4200.0, 4300.0, 3000.0])  # the last below its reference: FAIL
    d = hdb.open_db(db_url)
    try:
        out, drawn, found = page.write_page(d, tmp_path / "site" / "history.html", host="h200-01", metric=BW)
    finally:
        d.close()
    p = read(out)
    figs = {(f["data-gpu"], f["data-metric"]): f for f in p.figures}
    # the host's eight GPUs, each with its figure (its check and its trend record: one series), the figure with
    # all GPUs at once, and against the fleet
    assert set(figs) == {(str(i), m) for i in range(8) for m in (BW, f"{BW} (all GPUs at once)", f"{BW} vs fleet")}
    assert (drawn, found) == (24, 24) == (len(p.figures), len(p.figures))
    f = figs[("2", BW)]
    assert f["img"]["src"].startswith("data:image/svg+xml;base64,")  # drawn by the page itself (a fleet's worth)
    assert base64.b64decode(f["img"]["src"].split(",", 1)[1]).startswith(b"<svg ")
    assert f["img"]["alt"] == f"h200-01 GPU 2: {BW} over time"
    caption = " ".join(f["cells"])
    assert (
        f"h200-01 GPU 2: {BW} (GB/s): 4 point(s) from 2026-11-01 10:00 to 2026-11-04 10:00 UTC; last 3000 (FAIL); "
        "median of passing points 4200."
    ) in caption
    # the values under the plot, newest first, with their verdicts
    assert f["cells"][-12:] == [
        "2026-11-04 10:00",
        "3000",
        "FAIL",
        "2026-11-03 10:00",
        "4300",
        "PASS",
        "2026-11-02 10:00",
        "4200",
        "PASS",
        "2026-11-01 10:00",
        "4100",
        "PASS",
    ]
    text = " ".join(p.text)
    assert "24 plot(s)" in text and "h200-01 GPU 2 GPU-5a1c0e2f-7d3b-4c8e-9f10-2b6d8e4a1c02" in " ".join(text.split())


def test_hostile_rows_are_counted_not_drawn(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    past_validations(url, tmp_path, [4100.0, 4200.0, 4300.0])
    eng = sa.create_engine(url)
    with eng.begin() as conn:
        ids = conn.execute(sa.select(Check.id).where(Check.name == BW, Check.gpu_index == 2)).scalars().all()
        conn.execute(sa.text("UPDATE checks SET value = 'abc' WHERE id = :i"), {"i": ids[0]})
        conn.execute(sa.text("UPDATE checks SET value = 1e300 WHERE id = :i"), {"i": ids[1]})
        conn.execute(sa.text("UPDATE checks SET at = 'garbage' WHERE id = :i"), {"i": ids[2]})
    eng.dispose()
    d = hdb.open_db(url)
    try:
        out, drawn, _ = page.write_page(d, tmp_path / "h.html", host="h200-01", gpu="2", metric=BW)
    finally:
        d.close()
    p = read(out)
    [f] = [f for f in p.figures if f["data-metric"] == BW]
    # the trend records of the same validates still carry good values: three points, three rows left out
    assert "3 point(s)" in " ".join(f["cells"]) and "3 row(s) left out" in " ".join(p.text)


def test_the_task_writes_the_page_and_refuses_a_link(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    past_validations(url, tmp_path, [4100.0, 4200.0, 4300.0])
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_HISTORY_URL=url)
    run = [sys.executable, "-m", "invoke", "-r", str(ROOT), "history.page"]
    p = subprocess.run(
        run + [str(tmp_path / "h.html"), "--host", "h200-01", "--gpu", "3"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    figs = read(tmp_path / "h.html").figures
    assert p.stdout.strip() == f"wrote {tmp_path / 'h.html'} ({len(figs)} plot(s))"
    assert {f["data-gpu"] for f in figs} == {"3"} and BW in {f["data-metric"] for f in figs}
    assert "idle temperature" in {f["data-metric"] for f in figs}
    (tmp_path / "target").write_text("keep")
    (tmp_path / "link.html").symlink_to(tmp_path / "target")
    p = subprocess.run(
        run + [str(tmp_path / "link.html")], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert (p.returncode, p.stderr.strip()) == (
        2,
        f"gpulab: history page: {tmp_path / 'link.html'} is a symbolic link; gpulab does not write through links",
    )
    assert (tmp_path / "target").read_text() == "keep"


def test_bad_filters_are_one_line(tmp_path):
    d = hdb.open_db(f"sqlite:///{tmp_path / 'history.sqlite'}")
    try:
        with pytest.raises(ConfigError, match="--since: 'yesterday' is not a date"):
            page.write_page(d, tmp_path / "h.html", since="yesterday")
        with pytest.raises(ConfigError, match="--gpu INDEX needs --host"):
            page.write_page(d, tmp_path / "h.html", gpu="2")
        out, drawn, found = page.write_page(d, tmp_path / "h.html")
        assert (drawn, found) == (0, 0) and "No GPU has been checked yet" in out.read_text()  # and what records them
    finally:
        d.close()
