"""The one version rule (lab/core/versions.py): audit (the stack facts module on a host) and validate agree."""

from __future__ import annotations

import pytest

from lab.validate import fleet, hostchecks
from lab.core import versions
from tests.unit.test_provision_summary import REPO, facts_module, stack

CASES = [
    # found, expected, satisfied
    ("2.7.1+cu128", "2.7.1", True),  # a PyTorch build's local label
    ("2.7.1", "2.7.1+cu128", True),
    ("2.7.10", "2.7.1", False),
    ("2.7.1", "2.7.10", False),
    ("9.19.0", "9.19.0.56", True),  # cuDNN from its header (three components)
    ("9.19.0.56", "9.19.0.56", True),
    ("9.19.1", "9.19.0.56", False),
    ("13.0", "13.0.2", True),  # torch.version.cuda against a toolkit update
    ("13.1", "13.0.2", False),
    ("12", "12.4.1", False),  # one component says too little
    ("12", "12", True),
    ("1:580.159.04-0ubuntu1", "580.159.04", True),  # a package version: epoch and revision
    ("580.159.04", "580.*", True),  # a driver branch
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
        probe = {
            "stack": {
                "driver": found if comp == "driver" else None,
                "cuda_toolkit": found if comp == "cuda" else None,
                "nccl": found if comp == "nccl" else None,
            },
            "frameworks": {"torch": found if comp == "torch" else None},
        }
        checks = hostchecks.stack_checks(probe, {comp: expected})
        verdicts = [c["verdict"] for c in checks if c["check"] == f"stack {comp}"]
        assert (audit_drift == []) is ok, (comp, audit_drift)
        assert verdicts == ["PASS" if ok else "FAIL"], (comp, checks)


def test_the_module_ships_this_very_file():
    shipped = REPO / "playbooks" / "module_utils" / "gpulab_versions.py"
    assert shipped.resolve() == (REPO / "lab" / "core" / "versions.py").resolve()
    text = shipped.read_text()
    assert "from __future__" not in text.split('"""', 2)[2]  # runs on Python 3.6 hosts


def test_a_host_with_two_cudnns_is_read_alike_by_audit_and_validate():
    """The GPU machine's recorded probe: a CUDA image's cuDNN 9.14.0 and NCCL 2.28.3, and PyTorch's wheels
    (nvidia-cudnn-cu13 9.19.0.56, nvidia-nccl-cu13 2.28.9). Both readers take the system's, as the profile's
    packages are the system's; the environment's stand in only where the system has none."""
    import json

    probe = json.loads((REPO / "tests/unit/validate/fixtures/probe-h200-x1.recorded.json").read_text())
    assert fleet.installed_version(probe["stack"], "cudnn") == "9.14.0"
    assert fleet.installed_version(probe["stack"], "nccl") == "2.28.3"
    real = {"driver": "580.159.04", "cuda": "13.0", "cudnn": "9.14.0", "nccl": "2.28.3", "torch": "2.11.0"}
    assert {
        c["check"]: c["verdict"] for c in hostchecks.stack_checks(probe, real) if c["check"].startswith("stack")
    } == {f"stack {k}": "PASS" for k in real}
    wrong = {**real, "nccl": "2.27.7"}
    failed = [c["check"] for c in hostchecks.stack_checks(probe, wrong) if c["verdict"] != "PASS"]
    assert failed == ["stack nccl"]
    # the audit's module, given the same host: system first, the environment's wheels set aside
    mod = facts_module()
    s = stack(driver="580.159.04", cuda="13.0", cudnn=("9.14.0",), nccl="2.28.3", torch="2.11.0", gpus=1)
    mod.from_python_env(
        s,
        {
            "cudnn": "9.19.0.56",
            "cudnn_dist": "nvidia-cudnn-cu13",
            "nccl": "2.28.9",
            "nccl_dist": "nvidia-nccl-cu13",
            "cuda": "13.0",
        },
    )
    assert mod.drift(s, real, "auto", "auto") == []
    assert [d["component"] for d in mod.drift(s, wrong, "auto", "auto")] == ["nccl"]
    # without a system cuDNN or NCCL, both read the environment's
    bare = {k: v for k, v in probe["stack"].items()}
    bare["cudnn_found"] = [f for f in bare["cudnn_found"] if f["source"].startswith("python package")]
    assert fleet.installed_version(bare, "cudnn") == "9.19.0.56"
