"""The vision workloads' throughput mode on a real GPU (skipped without CUDA).

Each runs ``python -m runner run NAME --mode throughput --scale S`` on GPU 0
for a few seconds (bf16, channels-last, compiled, synthetic data) and leaves a
run directory whose telemetry and manifest carry the GPU's facts. No speed is
asserted here: benchmarks/throughput.py measures speed. At small scale in the
timed tests/gpu run; at full model size marked ``long`` (each full-size
compile takes about a minute on an empty cache).
"""

import csv
import json

import pytest
from gpu_helpers import needs_cuda
from gpu_helpers import runner as run

pytestmark = needs_cuda()


SCALES = ["small", pytest.param("full", marks=pytest.mark.long)]


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("name", ["resnet50", "ssd", "maskrcnn"])
def test_throughput_fills_result_telemetry_and_manifest(tmp_path, name, scale):
    out = tmp_path / "run"
    r = run(
        "run",
        name,
        "--mode",
        "throughput",
        "--scale",
        scale,
        "--gpus",
        "0,",
        "--seed",
        "1",
        "--measure-seconds",
        "4",
        "--warmup-steps",
        "3",
        "--cache-dir",
        tmp_path.parent / "gpulab-cache",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stdout + r.stderr + (out / "stdout.log").read_text()[-3000:]
    st = json.loads((out / "status.json").read_text())
    assert st["outcome"] == "success" and st["precision"] == "bf16" and st["gpus"] == [0]
    res = st["result"]
    assert res["samples_per_s"] > 0 and res["sample_unit"] == "images"
    assert res["batch_per_process"] >= 2 and res["time_to_first_step_s"] > 0
    # where the start went (runner.phases): the last moment is the first step, whose line splits the compile
    assert res["phases_s"]["first step"] == pytest.approx(res["time_to_first_step_s"], abs=0.01)
    assert list(res["phases_s"])[-2:] == ["model built", "first step"]
    assert f"[runner] +{res['time_to_first_step_s']:.1f} s first step: compile " in (out / "stdout.log").read_text()
    assert "notes" not in res, res.get("notes")
    rows = list(csv.DictReader((out / "telemetry.csv").open()))
    assert rows, "no telemetry rows"
    busy = [r_ for r_ in rows if r_["power_w"] and float(r_["power_w"]) > 0]
    assert busy and all(r_["uuid"].startswith("GPU-") for r_ in rows)
    for field in ("temp_c", "sm_clock_mhz", "mem_clock_mhz", "mem_used_mib", "pcie_gen", "pcie_width"):
        assert any(r_[field] for r_ in rows), field
    assert max(float(r_["mem_used_mib"]) for r_ in rows if r_["mem_used_mib"]) > (1000 if scale == "full" else 256)
    man = json.loads((out / "manifest.json").read_text())
    gpu = man["probe"]["gpus"][0]
    assert gpu["name"] and gpu["uuid"].startswith("GPU-") and gpu["pcie"]["width_max"]
    assert man["probe"]["stack"]["driver"] and man["launch_env"]["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.parametrize("scale", SCALES)
def test_bench_step_baseline_and_optimized_run_on_the_gpu(scale):
    from runner.workloads import base

    for name in ("resnet50", "ssd", "maskrcnn"):
        for optimized in (False, True):
            step, n = base.bench_step(name, "cuda", optimized, scale=scale, batch_size=4 if name != "maskrcnn" else 2)
            step()
            import torch

            torch.cuda.synchronize()
            assert n in (2, 4)
