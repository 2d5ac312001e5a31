"""Each validate check is declared once (lab/data/checks.yml, lab.validate.catalogue): every check name the
code of lab/validate writes belongs to a declared check, and every declared check has an action for each
verdict it can give (so a check without an action cannot be written), its trend section exists, and the
verdicts, actions and validate.html carry its id."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lab.validate import catalogue, trends
from lab.validate.actions import action_for, load_actions

LAB = Path(__file__).resolve().parents[3] / "lab"


def written_names() -> set[str]:
    """The names lab/validate's code passes to check() or judge_metric(label=...): literals, and f-strings
    with each placeholder as '*' (shell pattern)."""
    out = set()
    for path in sorted((LAB / "validate").glob("*.py")) + [LAB / "sweep" / "gate.py"]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            arg = None
            if fn == "check" and node.args:
                arg = node.args[0]
            elif fn == "judge_metric" and len(node.args) >= 4:
                arg = node.args[3]
            elif fn == "guarded" and node.args:
                arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.add(arg.value)
            elif isinstance(arg, ast.JoinedStr):
                out.add("".join(v.value if isinstance(v, ast.Constant) else "*" for v in arg.values))
    return out


def test_every_check_written_is_declared():
    cat = catalogue.load()
    names = written_names()
    assert {"GPU count", "DCGM **", "nccl-tests data check", "Fabric registration"} <= names
    missing = sorted(n for n in names if catalogue.entry_for(n.replace("*", "x"), cat) is None)
    assert missing == [], f"checks written in lab/validate but not declared in lab/data/checks.yml: {missing}"


@pytest.mark.parametrize(
    "name",
    [
        "ECC corrected trend",
        "idle temperature trend",
        "matmul_bf16_tflops trend",
        "memory_bandwidth_gbs vs fleet",
        "matmul_fp32_tflops (all GPUs at once)",
        "DCGM memory",
        "nvbandwidth P2P read (slowest peer)",
        "stack torch",
        "XID events",
    ],
)
def test_names_find_their_declared_check(name):
    entry = catalogue.entry_for(name)
    assert entry is not None
    if name.endswith(" trend"):
        assert entry["trend"] is not None  # not the figure's own entry
    if name.endswith(" vs fleet"):
        assert entry["id"] == "* vs fleet"


def test_every_declared_check_has_an_action_for_each_verdict_it_gives():
    assert catalogue.problems(catalogue.load(), load_actions(), trends.load_trends()) == []


def test_a_check_without_an_action_cannot_be_written(tmp_path):
    table = load_actions()
    extra = dict(catalogue.load())
    extra["new check"] = {
        "id": "new check",
        "action": "new check",
        "trend": "nowhere",
        "codes": None,
        "unit": None,
        "thresholds": "x",
        "verdicts": ["fail"],
    }
    assert catalogue.problems(extra, table, trends.load_trends()) == [
        "new check: no action for FAIL (actions.yml checks.new check.fail)",
        "new check: trend section 'nowhere' is not in trends.yml",
    ]


@pytest.mark.parametrize(
    "name, verdict, kind",
    [
        ("ECC corrected trend", "FAIL", "reset_gpu"),
        ("idle temperature trend", "WARN", "reseat"),
        ("matmul_bf16_tflops trend", "FAIL", "rerun"),
    ],
)
def test_the_trend_checks_have_their_own_action(name, verdict, kind):
    """They fell out of the hand-kept list and got "rerun: nothing is known to be broken"."""
    act = action_for({"check": name, "verdict": verdict}, load_actions())
    assert act["kind"] == kind and act["from"] != "default"
    if name == "ECC corrected trend":
        assert "corrected ecc" in act["do"].lower()


def test_records_and_the_page_carry_the_check_id(snap, refs):
    from snapshots import inventory_for, stack_of

    from lab.validate import fleet
    from lab.validate.verdict import render_html

    v = fleet.evaluate({"h200-01": snap}, [inventory_for(snap)], refs, stack_of(snap))
    recs = v.hosts["h200-01"]["checks"] + [c for g in v.hosts["h200-01"]["gpus"].values() for c in g["checks"]]
    assert all(r["check_id"] is not None for r in recs), [r["check"] for r in recs if r["check_id"] is None]
    assert {r["check_id"] for r in recs if r["check"].startswith("matmul_")} <= {"matmul_*", "* (all GPUs at once)"}
    assert re.search(r'data-check-id="GPU count"', render_html(v))
