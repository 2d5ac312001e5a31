"""A published round's numbers taken only within sense (issue 45): a scaling.json factor that would make a
score zero or infinite is not applied, and a systems/*.json count that is negative, fractional or absurd is
not taken as it is."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from lab.results import resulttree, roundtree


@pytest.mark.parametrize("factor", [5e-324, 1e-9, 1e300, 1e308])
def test_a_scaling_factor_out_of_range_is_not_applied(tmp_path, factor):
    (tmp_path / roundtree.SCALING_FILE).write_text(json.dumps({"scaling_factor": factor}))
    got, note = roundtree.scaling_factor(tmp_path, tmp_path)
    assert got == 1.0 and "not applied" in note


def test_a_scaling_factor_in_range_is_applied(tmp_path):
    (tmp_path / roundtree.SCALING_FILE).write_text(json.dumps({"scaling_factor": 1.5}))
    assert roundtree.scaling_factor(tmp_path, tmp_path)[0] == 1.5


@pytest.mark.parametrize(
    "doc",
    [
        {"accelerator_model_name": "NVIDIA H100", "accelerators_per_node": -8, "number_of_nodes": 1},
        {"accelerator_model_name": "NVIDIA H100", "accelerators_per_node": 1e308, "number_of_nodes": 1},
        {"accelerator_model_name": "NVIDIA H100", "accelerators_per_node": 8, "number_of_nodes": 1e308},
        {"accelerator_model_name": "NVIDIA H100", "accelerators_per_node": 8, "number_of_nodes": -2},
        {"nodes": [{"accelerator": "NVIDIA H100", "num_accelerators": 1e308, "num_nodes": 1}]},
    ],
)
def test_a_system_count_out_of_range_is_not_taken(tmp_path, doc):
    reader = resulttree.TreeReader.__new__(resulttree.TreeReader)
    reader.rules = SimpleNamespace(device=lambda name, published=True: name)
    reader.root = tmp_path
    reader._inside = lambda p: True
    facts = resulttree.SystemFacts(submitter="org", system="sys", key="org/results/sys")
    reader._apply(facts, doc, tmp_path / "systems" / "sys.json")
    assert facts.accelerators in (None, 8) and (facts.nodes or 1) <= resulttree.NODES[1]
