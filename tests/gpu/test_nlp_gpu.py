"""gnmt and transformer throughput mode on a real GPU (skipped without CUDA): small scale in the
timed tests/gpu run, full model size marked ``long``."""

import csv
import json

import pytest
from gpu_helpers import needs_cuda
from gpu_helpers import runner as _run

pytestmark = needs_cuda()


@pytest.mark.parametrize("scale", ["small", pytest.param("full", marks=pytest.mark.long)])
@pytest.mark.parametrize("name", ["gnmt", "transformer"])
def test_throughput_fills_telemetry_and_manifest(tmp_path, name, scale):
    out = tmp_path / "run"
    r = _run(
        "run",
        name,
        "--mode",
        "throughput",
        "--scale",
        scale,
        "--gpus",
        "1",
        "--seed",
        "1",
        "--measure-seconds",
        "3",
        "--cache-dir",
        tmp_path / "cache",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stdout + r.stderr + (out / "stdout.log").read_text()
    st = json.loads((out / "status.json").read_text())
    res = st["result"]
    assert st["outcome"] == "success" and st["precision"] == "bf16"
    assert res["sample_unit"] == "tokens" and res["samples_per_s"] > 0 and res["steps"] >= 10
    assert res["time_to_first_step_s"] > 0
    man = json.loads((out / "manifest.json").read_text())
    g = man["probe"]["gpus"][0]
    assert g["name"] and g["uuid"].startswith("GPU-") and man["probe"]["stack"]["driver"]
    assert man["launch_env"]["CUDA_VISIBLE_DEVICES"] == "0"
    rows = list(csv.DictReader((out / "telemetry.csv").open()))
    assert rows, "no telemetry sample"
    assert all(row["uuid"] == g["uuid"] for row in rows)
    assert max(float(row["power_w"]) for row in rows if row["power_w"]) > 0
    assert any(row["sm_clock_mhz"] for row in rows) and any(row["mem_used_mib"] for row in rows)
    ev = [json.loads(line[len(":::MLLOG ") :]) for line in (out / "mllog.log").read_text().splitlines()]
    tp = next(e for e in ev if e["key"] == "throughput")
    assert tp["metadata"]["unit"] == "tokens/s" and tp["value"] == pytest.approx(res["samples_per_s"], rel=1e-3)
