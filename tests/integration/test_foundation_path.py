"""The one path from an inventory to a report, end to end on two SSH lab hosts, through the CLI.

`invoke provision` brings both hosts to the `current` profile from the lab's
stand-in NVIDIA packages (the driver package ends up installed; that a second
run changes nothing is test_provision.py's, on the same profile with the tools
built too); `invoke sweep` installs the runner with Fabric and trains a
tiny CPU ncf run on both hosts at once, detached; the fetched run directories
verify against their SHA256SUMS; `invoke report` writes Markdown and HTML that
name the runs.

The lab hosts have no GPU: provisioning is told they have two stand-in T4s
(the stand-in nvidia-smi reads /etc/gpulab-testlab/fake-gpus.json, so the
verify role can check count and model), while the sweep's inventory declares
them CPU hosts (`gpulab_gpu_model: cpu`, count 0), which is what the runner
finds there. The steps a namespace host cannot take (kernel modules, systemd,
initramfs, reboot) are switched off by their opt-out variables, as in
test_provision.py. The bandwidth tools are not built here (`bwtools_tools: {}`, which the
audit then does not expect either): test_provision.py builds them, and this path stays fast.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.results import checksums
from tests.integration import provisioning_lab
from tests.integration.provisioning_lab import PROVISION_VARS

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
RUN_ID = "ncf-ttt-tiny-cpu-s1"


@pytest.fixture(scope="module")
def flab(testlab, tmp_path_factory):
    lab = testlab(names=["fp-01", "fp-02"], prefix="fp", all_vars={**PROVISION_VARS, "bwtools_tools": {}})
    provisioning_lab.prepare(lab)
    lab.work = tmp_path_factory.mktemp("foundation")
    # the same hosts as CPU hosts, for the sweep
    inv = yaml.safe_load(lab.inventory.read_text())
    inv["all"]["vars"].update({"gpulab_gpu_model": "cpu", "gpulab_gpu_count": 0})
    lab.cpu_inventory = lab.work / "inventory-cpu.yml"
    lab.cpu_inventory.write_text(yaml.safe_dump(inv))
    return lab


def invoke(lab, *args, timeout=900):
    env = {
        **os.environ,
        **lab.ansible_env(),
        "PYTHONPATH": str(REPO),
        "INVOKE_GPULAB_ARTIFACTS": str(lab.work / "artifacts"),
        "INVOKE_GPULAB_RESULTS": str(lab.work / "results"),
    }
    res = subprocess.run([str(INVOKE), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"$ invoke {' '.join(args)}  -> {res.returncode}\n{res.stdout}\n{res.stderr}")
    return res


def recap(stdout: str) -> dict[str, tuple[str, int]]:
    return {
        m.group(1): (m.group(2), int(m.group(3)))
        for m in re.finditer(
            r"^\s+(\S+)\s+(ok|changed|failed|unreachable|not run)\s+stack \S+\s+ok=\d+ changed=(\d+)", stdout, re.M
        )
    }


def test_provision_sweep_report_on_two_hosts(flab):
    # provision: the stand-in driver from the lab's repository lands on both hosts, with live progress
    first = invoke(flab, "provision", "--inventory", str(flab.inventory))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    assert {h: s for h, (s, _) in recap(first.stdout).items()} == {"fp-01": "changed", "fp-02": "changed"}
    assert re.search(r"^\s+\[fp-02\] changed\s+\S+ : ", first.stdout, re.M)  # per-task progress lines
    for name in flab.names:
        status = flab.exec(name, "dpkg-query -W -f '${Version} ${db:Status-Abbrev}' nvidia-driver-580-open").stdout
        assert status.split()[0].startswith("580.159.04") and status.split()[1] == "hi", status
        assert json.loads(flab.exec(name, "cat /etc/gpulab/stack.json").stdout)["drift"] == []

    # sweep: one tiny CPU run on both hosts at once, detached, fetched and verified
    sweep = invoke(
        flab,
        "sweep",
        "--inventory",
        str(flab.cpu_inventory),
        "--workloads",
        "ncf",
        "--seeds",
        "1",
        "--scale",
        "tiny",
        "--name",
        "e2e",
    )
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr
    root = flab.work / "results" / "e2e"
    starts = []
    for name in flab.names:
        run = root / name / RUN_ID
        assert checksums.verify(run) == [], name
        listed = {line.split()[-1] for line in (run / "SHA256SUMS").read_text().splitlines()}
        assert {"mllog.log", "status.json", "manifest.json", "telemetry.csv", "stdout.log"} <= listed
        status = json.loads((run / "status.json").read_text())
        assert status["outcome"] == "success" and status["exit_code"] == 0
        assert json.loads((run / "manifest.json").read_text())["probe"]["host"]["hostname"] == name
        starts.append((status["start"], status["end"]))
    # both runs were under way at the same time
    assert max(s for s, _ in starts) < min(e for _, e in starts), starts
    # detached: no runner process is left behind, and the run directory also stays on the host
    for name in flab.names:
        assert flab.exec(name, "pgrep -f '[r]unner run' || true").stdout.strip() == ""

    # report: Markdown and HTML name both runs
    rep = invoke(flab, "report", str(root), "--format", "md,html")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    md = (root / "report" / "report.md").read_text()
    html = (root / "report" / "report.html").read_text()
    for name in flab.names:
        assert f"{name}/{RUN_ID}" in md or (name in md and RUN_ID in md), md[:2000]
        assert name in html and RUN_ID in html
    assert re.search(r"ncf", md) and "2" in md
