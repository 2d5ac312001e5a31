"""Probe and telemetry sampler on a real NVIDIA GPU (skipped without NVML)."""

import json
import subprocess
import sys
import time

from gpu_helpers import GPU_COUNT as _count
from gpu_helpers import needs_nvml

from runner import probe, telemetry

pytestmark = needs_nvml()


def test_probe_reads_every_gpu():
    out = subprocess.run(
        [sys.executable, "-m", "runner", "probe", "--json"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["nvidia"] is None
    assert doc["gpu_count"] == _count == len(doc["gpus"])
    assert doc["stack"]["driver"] and doc["stack"]["cuda_driver"]
    for g in doc["gpus"]:
        assert "error" not in g, g
        assert g["name"] and g["uuid"].startswith(("GPU-", "MIG-"))
        assert g["pci_bus_id"] and g["memory_total_mib"] > 1000
        assert g["pcie"]["width_max"] in (1, 2, 4, 8, 16, 32)
        assert g["pcie"]["gen_max"] >= 1
        assert g["temperature_c"] is not None and 0 < g["temperature_c"] < 110
        assert g["power"]["limit_w"] is None or g["power"]["limit_w"] > 10
        assert g["clocks"]["sm_max_mhz"] and g["clocks"]["sm_max_mhz"] > 300
        assert isinstance(g["throttle_reasons"], list)
        # a data-centre GPU reports ECC; a consumer one says not supported (null)
        assert g["ecc"]["enabled"] in (True, False, None)
        # interconnect: NVLink (null on a GPU without it), PCIe replay, AER (null with a reason)
        nv = g["nvlink"]
        assert nv is None or (nv["links_present"] >= 1 and 0 <= nv["links_up"] <= nv["links_present"])
        assert g["pcie"]["replay_count"] is None or g["pcie"]["replay_count"] >= 0
        assert g["aer"] is not None or g["unavailable"]["aer"]


def test_probe_one_gpu_only():
    doc = probe.gather([_count - 1])
    assert [g["index"] for g in doc["gpus"]] == [_count - 1]


def test_sampler_writes_rows_for_each_gpu(tmp_path):
    path = tmp_path / "telemetry.csv"
    with telemetry.Sampler(None, path, interval_s=0.2) as s:
        time.sleep(1.1)
    rows = telemetry.read_csv(path)
    assert s.error is None and s.samples >= 4
    assert len(rows) == s.samples * _count
    assert {r["gpu"] for r in rows} == set(range(_count))
    for r in rows:
        assert r["uuid"].startswith(("GPU-", "MIG-"))
        assert r["temp_c"] is not None and r["sm_clock_mhz"] is not None and r["mem_used_mib"] is not None
    summary = telemetry.summarize(rows)
    assert set(summary) == set(range(_count))
