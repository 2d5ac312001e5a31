"""`invoke validate` against the SSH test lab: real SSH (strict host keys),
the real runner installed and run on each host. The lab's hosts have no
NVIDIA GPU, so each must FAIL with "no NVIDIA GPU"; a host nobody answers
for must FAIL as unreachable, in the same run, without a crash."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

pytest.importorskip("tests.testlab.fixtures", reason="the SSH test lab (tests/testlab) is not in this checkout")

pytestmark = pytest.mark.lab

LAB_VARS = {
    "gpulab_gpu_model": "T4",
    "gpulab_gpu_count": 4,
    "gpulab_stack": "current",
    "gpulab_pcie": {"gen": 3, "width": 16},
}


def test_validate_gpu_less_and_unreachable_hosts(testlab, tmp_path):
    from lab.hosts import inventory
    from lab.validate import fleet

    lab = testlab(2, prefix="val", all_vars=LAB_VARS)
    # the lab's inventory plus a host at an address of the lab's network that nobody owns
    inv = yaml.safe_load(lab.inventory.read_text())
    inv["all"].setdefault("hosts", {})["ghost"] = {"ansible_host": str(lab.net.network_address + 200)}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    hosts = inventory.load(path).select()
    lines = []
    v = fleet.validate_fleet(hosts, level="quick", out_dir=tmp_path / "out", stacks={}, echo=lines.append)
    assert not v.ok
    for name in lab.names:
        h = v.hosts[name]
        assert h["verdict"] == "FAIL", h
        assert h["reason"].startswith("GPU present: no NVIDIA GPU: "), h["reason"]
        dcgm = [c for c in h["checks"] if c["check"] == "DCGM diagnostic"]  # nothing of DCGM on these hosts
        assert [(c["verdict"], c["reason"]) for c in dcgm] == [("WARN", "not run: DCGM not installed")]
        fetched = list((tmp_path / "out").glob(f"*/{name}/burnin.json"))
        assert len(fetched) == 1 and json.loads(fetched[0].read_text())["outcome"] == "no_gpu"
    ghost = v.hosts["ghost"]
    assert ghost["verdict"] == "FAIL" and "unreachable" in ghost["reason"]
    summary = lines[0].splitlines()
    assert summary[0] == "validate: FAIL (0 pass, 0 warn, 3 fail of 3 host(s))"
    assert any(ln.startswith("FAIL  ghost: reachable: ghost (") for ln in summary)
    # each failure with what to do about it (lab/data/actions.yml)
    assert (
        summary.count(
            "      action for GPU present: reboot: Load the NVIDIA driver (reboot after provisioning); "
            "if NVML still sees no GPU, inspect the seating and power"
        )
        == 2
    )
    assert any(ln.startswith("      action for reachable: fix_config: Make the host reachable") for ln in summary)

    # the same through the invoke task: exit code 1, the verdicts on disk, into a history of its own
    env = {**os.environ, "INVOKE_GPULAB_HISTORY_URL": f"sqlite:///{tmp_path / 'history.sqlite'}"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "validate",
            "--inventory",
            str(path),
            "--host",
            ",".join(lab.names),
            "--json",
            "--out",
            str(tmp_path / "task"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert sorted(doc["hosts"]) == sorted(lab.names)
    assert all("no NVIDIA GPU" in h["reason"] for h in doc["hosts"].values())
    assert all(
        h["actions"][0]["kind"] == "reboot" and h["checks"][0]["action"]["evidence"] == ["nvidia-bug-report.log.gz"]
        for h in doc["hosts"].values()
    )
    # each failing host quarantined with its reason and action (said beside --json, on stderr)
    assert "history: 0 run(s) added, 0 already there; 1 validation(s) added" in p.stderr, p.stderr
    for name in lab.names:
        assert re.search(
            rf"^quarantined {name}: validate \S+: GPU present: no NVIDIA GPU: .*; action: reboot: "
            "Load the NVIDIA driver",
            p.stderr,
            re.M,
        ), p.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "invoke", "quarantine"], capture_output=True, text=True, timeout=120, env=env
    )
    assert listed.returncode == 0 and all(f"{n} " in listed.stdout for n in lab.names), listed.stdout
    assert listed.stdout.count("gpulab valid") == len(lab.names)
