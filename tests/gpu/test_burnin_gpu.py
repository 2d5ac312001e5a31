"""runner burnin on a real NVIDIA GPU (skipped without one). Values are
checked for presence and sanity, never for speed."""

import json
import subprocess
import sys

import pytest

from gpu_helpers import GPU_COUNT as _count
from gpu_helpers import needs_nvml

pytestmark = needs_nvml()


def _burnin(tmp_path, *argv, timeout=900):
    out = tmp_path / "burnin"
    p = subprocess.run(
        [sys.executable, "-m", "runner", "burnin", "--out", str(out), "--json", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p, json.loads(p.stdout), out


def test_quick_is_health_only(tmp_path):
    p, doc, out = _burnin(tmp_path, "--level", "quick")
    assert p.returncode == 0, p.stderr
    assert doc["outcome"] == "completed" and doc["results"] == []
    assert len(doc["gpus"]) == _count
    for g in doc["gpus"].values():
        assert g["idle"]["samples"] >= 2 and g["idle"]["temp_c_max"] is not None
    assert doc["xid"]["source"] or doc["xid"]["error"]
    after = doc["interconnect_after"]
    assert "error" not in after and after["collected_at"] >= doc["probe"]["collected_at"]
    assert set(after["gpus"]) == set(doc["gpus"])


@pytest.mark.slow
def test_standard_on_one_gpu(tmp_path):
    p, doc, out = _burnin(tmp_path, "--level", "standard", "--gpus", "1", "--resnet", "builtin")
    assert p.returncode == 0, p.stderr + json.dumps(doc["results"])[-2000:]
    g = doc["gpus"]["0"]
    for key in (
        "matmul_fp32_tflops",
        "matmul_tf32_tflops",
        "matmul_bf16_tflops",
        "matmul_fp16_tflops",
        "memory_bandwidth_gbs",
        "h2d_bandwidth_gbs",
        "d2h_bandwidth_gbs",
        "resnet50_images_per_s",
    ):
        assert g["solo"][key] > 0, key
    for r in doc["results"]:
        if r["test"] == "matmul":
            assert r["detail"]["max_rel_error"] <= r["detail"]["tolerance"]
    assert g["load"]["samples"] > 10 and g["load"]["power_w_max"] > g["idle"]["power_w_max"]
    rows = (out / "telemetry.csv").read_text().splitlines()
    assert len(rows) > 20
    # the standard tools: nvbandwidth's figures where provisioning built it, else why not
    assert doc["tools"]["nccl_tests"] == {"ran": False, "error": "one GPU: no all-reduce"}
    nvb = doc["tools"]["nvbandwidth"]
    assert nvb.get("error") or nvb["gpus"]["0"]["h2d_gbs"] > 1


@pytest.mark.slow
@pytest.mark.skipif(_count < 2, reason="NCCL all-reduce needs two GPUs")
def test_worker_nccl(tmp_path):
    from runner import burnin

    (tmp_path / "logs").mkdir()
    recs = burnin.run_workers(
        sys.executable, [([0, 1], None, [{"test": "nccl", "iters": 5, "sizes": [1 << 24]}])], tmp_path, "host", False
    )
    nccl = [r for r in recs if r["test"] == "nccl"][0]
    assert nccl["ok"], nccl["error"]
    assert nccl["value"] > 0 and nccl["detail"]["world_size"] == 2
