"""An unreachable host is a failed host in every task, as in Fabric's group model: its reason in the
summary, exit 1, the other hosts go on, and nothing is built or written for it.

Real SSH test hosts (tests/testlab) and a 'ghost' at an address of the lab's network that nobody owns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("tests.testlab.fixtures", reason="the SSH test lab (tests/testlab) is not in this checkout")

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
LAB_VARS = {"gpulab_gpu_model": "cpu", "gpulab_gpu_count": 0, "gpulab_stack": "current", "gpulab_os": "Debian 12"}


def invoke(*args, artifacts: Path, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_ARTIFACTS=str(artifacts))
    return subprocess.run(
        [sys.executable, "-m", "invoke", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def lab(testlab):
    return testlab(1, prefix="ur", all_vars=LAB_VARS)


@pytest.fixture
def inventory(lab, tmp_path):
    inv = yaml.safe_load(lab.inventory.read_text())
    inv["all"].setdefault("hosts", {})["ghost"] = {"ansible_host": str(lab.net.network_address + 200)}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def test_audit_reports_the_unreachable_host_and_audits_the_other(lab, inventory, tmp_path):
    artifacts = tmp_path / "artifacts"
    p = invoke("audit", "--inventory", inventory, "--json", artifacts=artifacts)
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    ghost, real = doc["hosts"]["ghost"], doc["hosts"]["ur-01"]
    assert ghost["state"] == "unreachable" and ghost["error"].startswith("Connect: "), ghost
    assert real["state"] in ("ok", "changed"), real  # audited: the other host went on
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("task", [["provision"], ["datasets", "--names", "ncf"]])
def test_nothing_is_built_or_written_when_no_host_answers(inventory, tmp_path, task):
    artifacts = tmp_path / "artifacts"
    p = invoke(*task, "--inventory", inventory, "--host", "ghost", artifacts=artifacts)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    assert "unreachable" in p.stdout and "ghost" in p.stdout
    assert "artifacts: none (no host could be reached; nothing written)" in p.stdout
    assert not artifacts.exists()  # no wheel, no artifacts folder
