"""What the GPU tests share: the skip conditions and running ``python -m runner`` as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _nvml_gpus() -> tuple[int, str]:
    from runner import probe

    try:
        nvml = probe.load_nvml()
        count = nvml.nvmlDeviceGetCount()
        nvml.nvmlShutdown()
    except Exception as exc:  # no driver, no library, no GPU
        return 0, str(exc)
    return count, "the driver reports 0 GPUs"


GPU_COUNT, _WHY = _nvml_gpus()  # GPUs NVML sees (0 without driver, library or GPU)


def needs_nvml() -> list:
    """pytestmark of tests that read GPUs through NVML."""
    return [pytest.mark.gpu, pytest.mark.skipif(GPU_COUNT == 0, reason=f"needs an NVIDIA GPU with NVML: {_WHY}")]


def needs_cuda() -> list:
    """pytestmark of tests that train with PyTorch on a CUDA GPU."""
    torch = pytest.importorskip("torch")
    return [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def runner(*args, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run(
        [sys.executable, "-m", "runner", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
