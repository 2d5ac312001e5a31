"""Expected stack versions for validation come from the stack profiles of the inventory."""

from pathlib import Path

from lab.hosts import inventory
from lab.validate import fleet, hostchecks

REPO = Path(__file__).resolve().parents[3]


def test_example_lab_expects_the_mlperf_v05_profile():
    inv = REPO / "inventory" / "hosts.yml"
    got = fleet.stacks_for(inventory.load(inv).select(), inv)
    assert got == {
        "mlperf-v0.5": {
            "driver": "410.72",
            "cuda": "10.0.130",
            "cudnn": "7.4.1.5",
            "nccl": "2.3.7",
            "torch": "1.0.0",
            "tensorflow": "1.12.0",
        }
    }


def test_a_driver_branch_agrees_with_any_version_of_it(tmp_path):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (REPO / "inventory" / "stacks" / "current.yml").read_text()
    (stacks / "current.yml").write_text(text.replace('version: "580.159.04", ', "", 1))
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  hosts:\n    h1:\n      gpulab_gpu_model: T4\n      gpulab_gpu_count: 1\n"
        "      gpulab_stack: current\n      gpulab_os: Debian 12\n"
    )
    want = fleet.stacks_for(inventory.load(inv).select(), inv)["current"]
    assert want["driver"] == "580.*"
    probe = {
        "stack": {"driver": "580.65.06", "cuda_toolkit": "13.0.2", "cudnn": "9.19.0", "nccl": "2.28.9"},
        "frameworks": {"torch": "2.13.0+cu130", "tensorflow": "2.21.0"},
    }
    checks = {c["check"]: c["verdict"] for c in hostchecks.stack_checks(probe, want)}
    assert checks["stack driver"] == "PASS"
    probe["stack"]["driver"] = "575.57.08"
    checks = {c["check"]: c["verdict"] for c in hostchecks.stack_checks(probe, want)}
    assert checks["stack driver"] == "FAIL"
