""".ci/setup's choice of the PyTorch build (.ci/torch_build.py), with stand-in nvidia-smi and /proc files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "torch_build.py"
PROC_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(dvs-builder@U22-I3-AE18-23-3)  Mon Sep 29 23:04:19 UTC 2025\nGCC version:  gcc version 12.2.0\n"
)


def choose(tmp_path, smi_lines=None, proc=None, smi_rc=0):
    """Run the script as .ci/setup does; returns its spec, index and why."""
    smi = ""
    if smi_lines is not None:
        smi = tmp_path / "nvidia-smi"
        out = "\n".join(smi_lines)
        smi.write_text(f"#!/bin/sh\nprintf '%s\\n' '{out}'\nexit {smi_rc}\n")
        smi.chmod(0o755)
    proc_path = tmp_path / "version"
    if proc is not None:
        proc_path.write_text(proc)
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--smi", str(smi), "--proc", str(proc_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return dict(line.split("=", 1) for line in res.stdout.splitlines())


def test_no_driver_gives_the_cpu_build(tmp_path):
    got = choose(tmp_path)
    assert got == {
        "spec": "torch==2.13.0+cpu",
        "index": "https://download.pytorch.org/whl/cpu",
        "why": "no NVIDIA driver found: the CPU build",
    }


@pytest.mark.parametrize(
    "lines, tag",
    [
        (["580.159.04, 9.0"], "cu130"),  # H200 on the 580 branch
        (["580.159.04, 7.5", "580.159.04, 7.5"], "cu130"),  # T4s
        (["580.159.04, 7.0"], "cu126"),  # V100: CUDA 13 dropped Volta
        (["575.57.08, 8.0"], "cu126"),  # a driver older than CUDA 13.0 needs
        (["550.144.03, 7.5"], "cu126"),
    ],
)
def test_a_driver_gives_the_newest_cuda_build_it_and_its_gpus_run(tmp_path, lines, tag):
    got = choose(tmp_path, smi_lines=lines)
    assert got["spec"] == f"torch==2.13.0+{tag}"
    assert got["index"] == f"https://download.pytorch.org/whl/{tag}"
    assert got["why"] == f"NVIDIA driver {lines[0].split(',')[0]}: the {tag} build"


def test_the_proc_file_stands_in_when_nvidia_smi_cannot_answer(tmp_path):
    got = choose(tmp_path, smi_lines=["NVIDIA-SMI has failed because it couldn't communicate"], smi_rc=9, proc=PROC_580)
    assert got["spec"] == "torch==2.13.0+cu130" and "580.159.04" in got["why"]


def test_a_driver_too_old_for_every_cuda_build_falls_back_to_the_cpu_build_and_says_why(tmp_path):
    got = choose(tmp_path, smi_lines=["410.72, 7.0"])
    assert got["spec"] == "torch==2.13.0+cpu"
    assert got["why"].startswith("NVIDIA driver 410.72 runs none of PyTorch 2.13.0's CUDA builds")


def test_setup_and_the_readme_name_the_same_torch_release():
    setup = (REPO / ".ci" / "setup").read_text()
    script = SCRIPT.read_text()
    assert 'TORCH = "2.13.0"' in script and "PyTorch 2.13.0" in setup
    readme = (REPO / "README.md").read_text()
    assert "GPULAB_TORCH_SPEC" in readme and "GPULAB_TORCH_INDEX_URL" in readme
