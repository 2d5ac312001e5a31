"""References for the GPUs labs run today (inventory/references/gpus.yml): each figure with its source
(DCGM's per-SKU diagnostic thresholds, or a recorded run), and the burn-in's own figures judged against
them: the H100 run of 2026-12-06 passes its own references, a GPU 20 % slower fails them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from snapshots import checks_of, inventory_for, stack_of

from lab.validate import fleet, gpurefs

# the figures of the H100 run the references were recorded from (the trend records of
# ../shared/gpu-records/h100-2026-12-06/call3-validate.json carry them)
H100_RUN = {
    "matmul_fp32_tflops": 51.527,
    "matmul_tf32_tflops": 362.1,
    "matmul_bf16_tflops": 691.057,
    "matmul_fp16_tflops": 642.899,
    "memory_bandwidth_gbs": 3049.422,
    "h2d_bandwidth_gbs": 55.461,
    "d2h_bandwidth_gbs": 55.317,
}


@pytest.mark.parametrize(
    "nvml_name, model",
    [
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM5"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("Tesla T4", "T4"),
        ("Tesla V100-PCIE-16GB", "V100-PCIe"),
    ],
)
def test_the_gpus_labs_run_today_have_references_with_sources(refs, nvml_name, model):
    assert gpurefs.model_key(nvml_name, refs) == model
    metrics = refs["models"][model]["metrics"]
    assert metrics and all(m["source"].strip() for m in metrics.values())
    assert all(
        ("DCGM" in m["source"]) or m["source"].startswith(("recorded", "FAIL below", "published"))
        for m in metrics.values()
    )


def _as_h100(snap: dict, scale: float = 1.0) -> dict:
    snap = copy.deepcopy(snap)
    for g in snap["probe"]["gpus"]:
        g["name"] = "NVIDIA H100 80GB HBM3"
    for bg in snap["gpus"].values():
        bg["solo"] = {k: v * scale for k, v in H100_RUN.items()}
        bg["concurrent"] = {}
        if (bg.get("load") or {}).get("power_w_max") is not None:
            bg["load"]["power_w_max"] = 702.2 * scale
    return snap


@pytest.mark.parametrize("scale, verdict", [(1.0, "PASS"), (0.93, "WARN"), (0.8, "FAIL")])
def test_the_burn_ins_own_figures_are_judged_against_the_h100_references(snap, refs, scale, verdict):
    doc = _as_h100(snap, scale)
    v = fleet.evaluate({"h100-01": doc}, [inventory_for(doc, "h100-01", gpu_model="H100-SXM5")], refs, stack_of(doc))
    c = checks_of(v, "h100-01", 0)
    assert "references" not in c  # no "no references for NVIDIA H100 80GB HBM3" any more
    for metric in H100_RUN:
        assert c[metric]["verdict"] == verdict, (metric, c[metric]["reason"])
        assert "recorded: one H100 80GB HBM3" in c[metric]["reason"] or verdict != "PASS"


RECORDED = Path(__file__).resolve().parents[3] / "benchmarks/recorded/h100-2026-12-06b"


@pytest.mark.parametrize("name", ["burnin-standard.json", "burnin-burnin.json"])
def test_the_recorded_h100_burn_ins_are_judged_whole_resnet50_and_nvbandwidth_included(refs, name):
    """The burn-in documents that the H100 itself wrote (validate at 94f895f): every figure of theirs has a
    reference now, resnet50's images/s and nvbandwidth's H2D/D2H included, and they pass it; 20 % slower fails."""
    doc = json.loads((RECORDED / name).read_text())
    v = fleet.evaluate({"h100-01": doc}, [inventory_for(doc, "h100-01", gpu_model="H100-SXM5")], refs, stack_of(doc))
    c = checks_of(v, "h100-01", 0)
    assert c["resnet50_images_per_s"]["verdict"] == "PASS", c["resnet50_images_per_s"]["reason"]
    if doc["tools"]["nvbandwidth"].get("ran"):
        assert "nvbandwidth" not in c, c["nvbandwidth"]["reason"]  # not "figures not judged: no reference"
        assert c["nvbandwidth H2D"]["verdict"] == c["nvbandwidth D2H"]["verdict"] == "PASS"
    slow = copy.deepcopy(doc)
    slow["gpus"]["0"]["solo"]["resnet50_images_per_s"] *= 0.8
    v = fleet.evaluate({"h100-01": slow}, [inventory_for(slow, "h100-01", gpu_model="H100-SXM5")], refs, stack_of(slow))
    assert checks_of(v, "h100-01", 0)["resnet50_images_per_s"]["verdict"] == "FAIL"
