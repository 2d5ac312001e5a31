"""The one version rule (lab/versions.py): audit (the stack facts module on a host) and validate agree."""

from __future__ import annotations

import pytest

from lab import validate, versions
from tests.unit.test_provision_summary import REPO, facts_module, stack

CASES = [
    # found, expected, satisfied
    ("2.7.1+cu128", "2.7.1", True),       # a PyTorch build's local label
    ("2.7.1", "2.7.1+cu128", True),
    ("2.7.10", "2.7.1", False),
    ("2.7.1", "2.7.10", False),
    ("9.19.0", "9.19.0.56", True),        # cuDNN from its header (three components)
    ("9.19.0.56", "9.19.0.56", True),
    ("9.19.1", "9.19.0.56", False),
    ("13.0", "13.0.2", True),             # torch.version.cuda against a toolkit update
    ("13.1", "13.0.2", False),
    ("12", "12.4.1", False),              # one component says too little
    ("12", "12", True),
    ("1:580.159.04-0ubuntu1", "580.159.04", True),  # a package version: epoch and revision
    ("580.159.04", "580.*", True),        # a driver branch
    ("580.65.06", "580.*", True),
    ("5800.1", "580.*", False),
    ("575.57.08", "580.*", False),
    ("2.28.9-1+cuda13.0", "2.28.9", True),
    ("2.11.0a0+git1234", "2.11.0", False),  # a pre-release is not the release
    (None, "2.13.0", False),
    ("", "2.13.0", False),
    ("unknown", "2.13.0", False),
]


@pytest.mark.parametrize("found, expected, ok", CASES)
def test_the_rule(found, expected, ok):
    assert versions.agrees(found, expected) is ok


@pytest.mark.parametrize("found, expected, ok", CASES)
def test_audit_and_validate_judge_alike(found, expected, ok):
    """The same host facts, read by audit's module and by validate's stack checks, give the same verdict."""
    mod = facts_module()
    for comp in ("driver", "cuda", "nccl", "torch"):
        kwargs = {comp: found}
        audit_drift = mod.drift(stack(**kwargs), {comp: expected}, "auto", "auto")
        probe = {"stack": {"driver": found if comp == "driver" else None,
                           "cuda_toolkit": found if comp == "cuda" else None,
                           "nccl": found if comp == "nccl" else None},
                 "frameworks": {"torch": found if comp == "torch" else None}}
        checks = validate._stack_checks(probe, {comp: expected})
        verdicts = [c["verdict"] for c in checks if c["check"] == f"stack {comp}"]
        assert (audit_drift == []) is ok, (comp, audit_drift)
        assert verdicts == ["PASS" if ok else "FAIL"], (comp, checks)


def test_the_module_ships_this_very_file():
    shipped = REPO / "playbooks" / "module_utils" / "gpulab_versions.py"
    assert shipped.resolve() == (REPO / "lab" / "versions.py").resolve()
    text = shipped.read_text()
    assert "from __future__" not in text.split('"""', 2)[2]  # runs on Python 3.6 hosts
