"""`python -m runner health` (the probe's GPU health fields, the kernel log's XIDs, the boot mark) and
its verdict (lab.validate.health: validate's own checks and actions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fake_nvml import FakeNvml, h200_like

from lab.validate import health as judge
from runner import health

ROOT = Path(__file__).resolve().parents[3]
PENDING = h200_like(uuid="GPU-22222222-1111-2222-3333-444444444444", bus_id="00000000:9A:00.0", remap=(0, 1, 1, 0))


def doc_with(monkeypatch, gpus, events=()):
    monkeypatch.setattr(
        health,
        "xid_scan",
        lambda probed: {
            "source": "dmesg",
            "error": None,
            "events": [{"xid": x, "pci": "0000:1b:00", "gpu": g, "uptime_s": t, "text": "..."} for x, g, t in events],
        },
    )
    return health.gather(None if gpus is None else FakeNvml(gpus))


def test_the_document_carries_the_probe_fields_and_a_boot_mark(monkeypatch):
    doc = doc_with(monkeypatch, [h200_like(), PENDING])
    assert judge.check_document(doc) is None
    assert doc["kind"] == "gpulab-health" and doc["nvidia"] is None and doc["gpu_count"] == 2
    assert doc["gpus"][1]["row_remap"] == {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}
    assert doc["gpus"][1]["uuid"] == PENDING["uuid"] and "clocks" not in doc["gpus"][1]
    assert len(doc["boot_id"]) == 36 and doc["uptime_s"] > 0


def test_a_pending_row_remap_fails_its_gpu_with_validates_action(monkeypatch):
    v = judge.judge(doc_with(monkeypatch, [h200_like(), PENDING]), expect_gpus=True)
    assert not v.ok
    (f,) = v.failures
    assert f.gpu == 1 and f.reason == "row remapping: row remap pending (1 uncorrectable): reset the GPU"
    assert f.action.startswith("reset_gpu: A remap is pending: reset the GPU to apply it")
    assert [c["verdict"] for c in v.gpus[0]["checks"]] == ["PASS"] * 3
    assert v.gpus[1]["uuid"] == PENDING["uuid"]


def test_xids_count_only_after_the_last_check_of_the_same_boot(monkeypatch):
    doc = doc_with(monkeypatch, [h200_like()], events=[(79, 0, 100.0), (79, 0, 900.0)])
    assert [f.reason for f in judge.judge(doc, expect_gpus=True).failures] == [
        "XID events: XID 79 (GPU has fallen off the bus) x2 since boot"
    ]
    late = judge.judge(doc, expect_gpus=True, mark=(doc["boot_id"], 500.0))
    assert [(f.gpu, f.reason) for f in late.failures] == [
        (0, "XID events: XID 79 (GPU has fallen off the bus) x1 since the last health check")
    ]
    assert late.failures[0].action.startswith("reboot: ") or late.failures[0].action.startswith("reset_gpu: ")
    assert judge.judge(doc, expect_gpus=True, mark=(doc["boot_id"], 1000.0)).ok
    assert not judge.judge(doc, expect_gpus=True, mark=("another-boot", 1000.0)).ok


def test_without_nvml_a_gpu_host_fails_and_a_cpu_host_passes(monkeypatch):
    monkeypatch.setattr(
        health.probe,
        "load_nvml",
        lambda: (_ for _ in ()).throw(
            health.probe.NvmlUnavailable("NVML could not start: NVML Shared Library Not Found")
        ),
    )
    doc = doc_with(monkeypatch, None)
    assert judge.judge(doc, expect_gpus=False).ok
    v = judge.judge(doc, expect_gpus=True)
    assert [(f.gpu, f.reason) for f in v.failures] == [
        (None, "GPU present: no NVIDIA driver/GPU found: NVML could not start: NVML Shared Library Not Found")
    ]
    assert v.failures[0].action.startswith("reboot: Load the NVIDIA driver")


def test_bad_documents_are_named():
    assert judge.check_document([]) == "not a health document (kind 'gpulab-health' expected)"
    assert "schema 9" in judge.check_document({"kind": "gpulab-health", "schema": 9})
    assert "'gpus'" in judge.check_document({"kind": "gpulab-health", "schema": 1, "gpus": [{"index": True}]})


def test_the_command_prints_one_json_line_here():
    p = subprocess.run(
        [sys.executable, "-m", "runner", "health"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.splitlines()
    assert judge.check_document(json.loads(line)) is None
