"""The README's walk through the lab's memory ("The lab's memory"), its commands read from the README and
run as written against an SSH test host named r740-03 (the README's host), with its health gate real.

The host has three stand-in T4 GPUs: the stand-in NVML library (tests/testlab/fake_nvml.c, what
nvidia-ml-py loads there as it would the driver's libnvidia-ml.so.1) reports GPU 1 with a row remap
pending. GPU 2 is quarantined by hand (README); the gated sweep's health check then quarantines GPU 1
("gpulab sweep", with the row remapper's action) and plans its runs on GPU 0 alone, and its output
and summary say so. What the lab host cannot do, and what the test expects of it instead: it has no
CUDA, so the sweep's one run fails (exit 1: "cannot use CUDA") and leaves its health epilogue; its
burn-in cannot pass, so `invoke validate` fails (exit 1) and the release that asks for a passing
validate refuses (exit 1), as the README says; the forced release goes through. results/ starts with
one run the runner made here (the import of existing results).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tests.testlab.fixtures", reason="the SSH test lab (tests/testlab) is not in this checkout")

from lab.results import checksums
from tests.testlab import fakenvml

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
GPUS = [
    {"name": "Tesla T4"},
    {"name": "Tesla T4", "remap_uncorrectable": 1, "remap_pending": True},
    {"name": "Tesla T4"},
]
REMAP = "row remapping: row remap pending (1 uncorrectable): reset the GPU"


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## The lab's memory\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_walk_on_a_lab_host_with_a_pending_row_remap(testlab, tmp_path):
    lab = testlab(
        names=["r740-03"], all_vars={"gpulab_gpu_model": "T4", "gpulab_gpu_count": 3, "gpulab_stack": "current"}
    )
    fakenvml.install(lab, "r740-03", fakenvml.build(tmp_path), json.dumps(GPUS))
    work = tmp_path / "lab"
    earlier = work / "results" / "earlier" / "localhost" / "ncf-throughput-tiny-cpu-s1"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "run",
            "ncf",
            "--scale",
            "tiny",
            "--mode",
            "throughput",
            "--gpus",
            "0",
            "--seed",
            "1",
            "--out",
            str(earlier),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    env = {
        **os.environ,
        **lab.ansible_env(),
        "PYTHONPATH": str(ROOT),
        "INVOKE_GPULAB_INVENTORY": str(lab.inventory),
        "INVOKE_GPULAB_WORKLOADS": "ncf",
        "INVOKE_GPULAB_SCALE": "tiny",
        "INVOKE_GPULAB_REFERENCES": str(ROOT / "inventory" / "references" / "gpus.yml"),
    }
    for key in ("INVOKE_GPULAB_RESULTS", "INVOKE_GPULAB_HISTORY_URL"):
        env.pop(key, None)
    ran = []
    for line in readme_commands():
        argv = shlex.split(line)
        assert argv[0] == "invoke", line
        invoke = [str(INVOKE)] if INVOKE.exists() else [sys.executable, "-m", "invoke"]
        p = subprocess.run(
            [*invoke, "-r", str(ROOT), *argv[1:]], cwd=work, env=env, capture_output=True, text=True, timeout=600
        )
        print(f"$ {line} -> {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-2000:]}")
        ran.append((argv[1:3], p))
    names = [a[0] for a, _ in ran]
    assert names == [
        "history.import",
        "history",
        "quarantine.add",
        "quarantine",
        "sweep",
        "sweep",
        "history",
        "validate",
        "quarantine.release",
        "quarantine.release",
    ]
    (imp, hist, add, listed, dry, gated, hist1, validate, release, forced) = [p for _, p in ran]
    for p in (imp, hist, add, listed, dry, hist1, forced):
        assert p.returncode == 0, p.stdout + p.stderr
    assert imp.stdout.startswith("1 run(s) added, 0 already there")
    assert add.stdout.strip() == "r740-03 GPU 2: quarantined"
    assert (
        "r740-03 GPU 2" in listed.stdout
        and "row remap pending" in listed.stdout
        and "reset the GPU, then validate" in listed.stdout
    )
    assert "quarantine: r740-03: GPU(s) 2 quarantined (GPU 2: row remap pending): runs use GPU(s) 0,1" in dry.stdout

    # the gated sweep: GPU 1 fails the health check, is quarantined and planned around; the plan and the summary
    # say so; its one run (GPU 0) fails for want of CUDA and leaves its health epilogue, verified
    out = gated.stdout
    assert gated.returncode == 1, out + gated.stderr
    assert f"health r740-03: GPU 1: {REMAP}" in out
    assert (
        "quarantine: r740-03 GPU 1: quarantined (row remapping: row remap pending (1 uncorrectable): reset the "
        "GPU; action reset_gpu: A remap is pending: reset the GPU to apply it"
    ) in out
    kept_out = (
        f"r740-03: GPU(s) 1,2 quarantined (GPU 2: row remap pending; GPU 1: health check: {REMAP}): runs use GPU(s) 0"
    )
    assert f"sweep gated: quarantine: {kept_out}" in out
    assert f"  QUARANTINE {kept_out}" in out
    (run,) = json.loads((work / "results" / "gated" / "sweep.json").read_text())["runs"]
    assert run["gpu_ids"] == [0] and run["state"] == "failed" and "cannot use CUDA" in run["reason"], run
    rundir = work / "results" / "gated" / "r740-03" / run["run_id"]
    assert checksums.verify(rundir) == [] and "health.json" in (rundir / "SHA256SUMS").read_text()
    epilogue = json.loads((rundir / "health.json").read_text())
    assert epilogue["kind"] == "gpulab-health" and epilogue["gpus"][1]["row_remap"]["pending"] is True
    assert f"health r740-03 after {run['run_id']}: GPU 1: {REMAP}" in out
    assert "history: 0 run(s) added, 1 already there" in out  # recorded when collected, not only at the end
    assert "row remapping" in hist1.stdout and "FAIL" in hist1.stdout

    # release: validate cannot pass on a host without CUDA, so the release that asks for it refuses; --force
    assert validate.returncode == 1, validate.stdout + validate.stderr
    assert release.returncode == 1 and "quarantine release: r740-03 GPU 2: " in release.stderr, release.stderr
    assert forced.stdout.strip() == "r740-03 GPU 1: released (GPU reset by hand; validate next)"
