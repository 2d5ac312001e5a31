"""`invoke validate --baseline --from-history`: references from the percentiles of known-good GPUs in the
history database (SQLite and a real PostgreSQL), with their count and time range as provenance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from test_history_trends import doc_with, write_val

from lab.history import memory as history
from lab.core.errors import CheckFailed
from lab.history import db as hdb, quarantine as q
from lab.history.models import Check
from lab.validate import gpurefs

ROOT = Path(__file__).resolve().parents[3]
BW = "memory_bandwidth_gbs"


def past_validations(url, tmp_path, values):
    """One validate a day of the H200 host, every GPU measuring ``values[day]`` of memory bandwidth."""
    for day, bw in enumerate(values, start=1):
        doc = doc_with()
        for g in doc["gpus"].values():
            g["solo"][BW] = bw
        history.record([write_val(tmp_path / f"v{day}", doc, f"2026-11-{day:02d}T10:00:00Z")], url)


def test_known_good_gpus_make_the_references(db_url, tmp_path):
    with pytest.raises(CheckFailed, match="holds no figure of a known-good GPU"):
        gpurefs.baseline_from_history(
            history.known_good(db_url, gpurefs.history_sources()), gpurefs.REFERENCES, tmp_path / "none", "test"
        )
    past_validations(db_url, tmp_path, [4100.0, 4200.0, 4300.0])
    d = hdb.open_db(db_url)
    try:
        q.add(d, q.parse_target("h200-01:3"), reason="fans", who="ops")
        with d.session() as s:  # planted absurd figures of a good GPU (its check and trend record) are left out
            vid = s.scalar(sa.select(sa.func.min(Check.validation_id)))
            for row in s.scalars(
                sa.select(Check).where(
                    Check.name.in_([BW, BW + " trend"]), Check.gpu_index == 4, Check.validation_id == vid
                )
            ):
                row.value = 1e300
    finally:
        d.close()
    stats = history.known_good(db_url, gpurefs.history_sources())
    bw = stats["H200"][BW]
    # GPUs 0 and 1 fail a check in every validate of the H200 document, GPU 3 is quarantined: 2, 4..7 are good
    assert (bw["gpus"], bw["validations"], len(bw["values"])) == (5, 3, 14)
    assert (bw["first"], bw["last"]) == ("2026-11-01T10:00:00Z", "2026-11-03T10:00:00Z")
    path = gpurefs.baseline_from_history(stats, gpurefs.REFERENCES, tmp_path / "out", "test")
    refs = gpurefs.load_references(path)  # a references file as `invoke validate --references` reads it
    ref = refs["models"]["H200"]["metrics"][BW]
    assert ref["value"] == 4200.0 and ref["unit"] == "GB/s"
    assert ref["source"].startswith(
        "history 2026-11-01..2026-11-03: median of 14 value(s) of 5 known-good GPU(s) "
        "in 3 validate(s) (p10 4100, p90 4300 GB/s)"
    )
    assert "load_power_w" in refs["models"]["H200"]["metrics"]


def test_the_task_writes_the_references_and_refuses_from_history_alone(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    past_validations(url, tmp_path, [4100.0, 4200.0, 4300.0])
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        INVOKE_GPULAB_HISTORY_URL=url,
        INVOKE_GPULAB_REFERENCES=str(gpurefs.REFERENCES),
    )
    run = [sys.executable, "-m", "invoke", "-r", str(ROOT), "validate"]
    p = subprocess.run(
        run + ["--baseline", "--from-history", "--out", str(tmp_path / "refs")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert (
        p.stdout.startswith(f"wrote {tmp_path / 'refs'}/") and "references-baseline.yml (from the history: " in p.stdout
    )
    [written] = (tmp_path / "refs").glob("*/references-baseline.yml")
    source = gpurefs.load_references(written)["models"]["H200"]["metrics"][BW]["source"]
    assert source.startswith("history 2026-11-01..2026-11-03: median of 18 value(s) of 6 known-good GPU(s) in 3 ")
    p = subprocess.run(run + ["--from-history"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout, p.stderr.strip()) == (
        2,
        "",
        "gpulab: validate: --from-history goes with --baseline",
    )
