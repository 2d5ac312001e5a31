"""A run's state is lab.core.fields.RunState, a str-valued Enum: sweep.json keeps its values ("complete"), a
sweep.json written before the enum reads back into members and is written again unchanged."""

from __future__ import annotations

import json

import pytest

from lab.core.errors import ConfigError
from lab.core.fields import STATES, RunState
from lab.sweep import plan as pl
from lab.sweep import state as sweepstate


def old_sweep_json(root) -> dict:
    """A sweep.json as gpulab wrote it with plain strings for states (before issue 44): one run in each state."""
    runs = []
    for seed, st in enumerate(("planned", "running", "complete", "failed", "interrupted"), start=1):
        run = pl.PlannedRun("h1", "ncf", 1, seed, "ttt", "tiny", reason="" if st != "failed" else "run crashed: x")
        doc = dict(run.to_json(), state=st, outcome="success" if st == "complete" else None)
        runs.append(doc)
    doc = {
        "schema": pl.SCHEMA,
        "name": "s1",
        "created": "2026-12-01T10:00:00.000Z",
        "updated": "2026-12-01T11:00:00.000Z",
        "controller": None,
        "options": {},
        "hosts": {},
        "runs": runs,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return doc


def test_an_old_sweep_json_reads_into_the_enum_and_is_written_back_the_same(tmp_path):
    root = tmp_path / "s1"
    before = old_sweep_json(root)
    sweep = sweepstate.Sweep.load(root)
    assert [r.state for r in sweep.runs] == list(RunState)
    assert all(type(r.state) is RunState for r in sweep.runs)
    assert sweep.runs[2].state == "complete" and f"{sweep.runs[3].state}" == "failed"  # str as before
    sweep.save()
    after = json.loads((root / "sweep.json").read_text(encoding="utf-8"))
    assert after["runs"] == before["runs"]
    assert '"state": "interrupted"' in (root / "sweep.json").read_text(encoding="utf-8")
    assert [r.state for r in sweepstate.Sweep.load(root).runs] == list(RunState)


def test_a_state_outside_the_enum_is_refused_in_one_line(tmp_path):
    root = tmp_path / "s1"
    doc = old_sweep_json(root)
    doc["runs"][0]["state"] = "done"
    (root / "sweep.json").write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(
        ConfigError,
        match=r"runs\[0\]\.state: 'done' is not one of planned, running, complete, "
        r"failed, interrupted",
    ):
        sweepstate.Sweep.load(root)


def test_the_enum_is_the_states_sweep_json_takes():
    assert STATES == ("planned", "running", "complete", "failed", "interrupted")
    assert pl.PlannedRun("h1", "ncf", 1, 1).state is RunState.PLANNED
    assert {RunState.COMPLETE: 1}.get("complete") == 1 and str(RunState.FAILED) == "failed"
