"""The quick health document (the sweep's gate, Slurm's node health program) as a node prints it is
hostile input: whatever it holds is a FAIL that says why, never a traceback and never a pass."""

from __future__ import annotations

import copy
import stat

import pytest

from lab.validate import health, nodehealth


def gpu(index: int, **over) -> dict:
    return {
        "index": index,
        "name": "NVIDIA H200",
        "uuid": f"GPU-{index}",
        "ecc": {"uncorrected_volatile": 0, "uncorrected_aggregate": 0},
        **over,
    }


DOC = {
    "kind": "gpulab-health",
    "schema": 1,
    "gpu_count": 2,
    "boot_id": "b1",
    "uptime_s": 100.0,
    "gpus": [gpu(0), gpu(1)],
    "xid": {"source": "dmesg", "error": None, "events": []},
}


def test_a_health_document_that_lists_one_gpu_index_twice_is_refused():
    doc = copy.deepcopy(DOC)
    doc["gpus"][0]["ecc"]["uncorrected_volatile"] = 4  # the record the second index 0 would hide
    doc["gpus"][1]["index"] = 0
    assert health.check_document(doc) == "its 'gpus' lists GPU index 0 more than once"
    assert nodehealth.verdict(doc, expect_gpus=True) == (
        "health",
        "runner health: its 'gpus' lists GPU index 0 more than once",
        None,
    )


def test_validate_and_the_gate_name_a_gpu_index_listed_twice_with_one_rule():
    """lab.validate.evaluation and lab.validate.health each spelled the rule out (numbers sorted as text in one)."""
    from lab.validate import burnindoc, evaluation

    assert evaluation.listed_twice is health.listed_twice is burnindoc.listed_twice
    gpus = [{"index": i} for i in (10, 2, 10, 2, 3)]
    assert health.listed_twice(gpus) == "lists GPU index 2, 10 more than once"
    assert health.listed_twice([{"index": 0}, {"index": "0"}]) == "lists GPU index 0 more than once"
    assert health.listed_twice([{"index": 0}, {"index": 1}]) is None


def test_a_gpu_the_document_counts_but_does_not_list_is_lost_never_passed():
    doc = copy.deepcopy(DOC)
    doc["gpu_count"] = 3
    assert [(f.gpu, f.reason) for f in health.judge(doc, expect_gpus=True).failures] == [
        (2, "GPU count: GPU 2 lost: NVML no longer lists it")
    ]


@pytest.mark.parametrize("index", [None, 7])
def test_an_xid_of_no_gpu_the_node_lists_fails_the_host(index):
    """A GPU that fell off the bus is no longer listed: its XID 79 is the host's, as in validate."""
    doc = copy.deepcopy(DOC)
    doc["xid"]["events"] = [{"xid": 79, "pci": "0000:3b:00", "gpu": index, "uptime_s": 50.0, "text": "off"}]
    judged = health.judge(doc, expect_gpus=True)
    assert [(f.gpu, f.reason) for f in judged.failures] == [
        (None, "XID events (other devices): XID 79 (GPU has fallen off the bus) x1 since boot")
    ]
    assert judged.failures[0].action.startswith(("reboot: ", "reset_gpu: ", "reseat: ", "rma: "))
    later = health.judge(doc, expect_gpus=True, mark=("b1", 20.0))
    assert later.failures[0].reason.endswith("x1 since the last health check")
    assert health.judge(doc, expect_gpus=True, mark=("b1", 60.0)).ok  # seen by the last check already


@pytest.mark.parametrize(
    "printed, code, error",
    [
        (b"[" * 100000 + b"]" * 100000, 0, "runner health printed no usable JSON document (nested deeper than 64"),
        (b'{"kind": "gpulab-health", "gpus": [{"index": 0, "ecc": NaN}]}', 0, "(NaN is not a finite number)"),
        (b'{"kind": "gpulab-health\\udcff"}', 0, "(a string escape makes a lone surrogate"),
        (b"\xff\xfe not UTF-8", 3, "runner health exited 3: \ufffd\ufffd not UTF-8"),
    ],
)
def test_what_a_node_prints_is_one_failure_line_never_a_traceback(tmp_path, printed, code, error):
    out = tmp_path / "printed"
    out.write_bytes(printed)
    runner = tmp_path / "python"
    runner.write_text(f'#!/bin/sh\ncat "{out}"\ncat "{out}" >&2\nexit {code}\n')
    runner.chmod(runner.stat().st_mode | stat.S_IXUSR)
    doc = nodehealth.gather(str(runner), None)
    assert set(doc) == {"_error"} and error in doc["_error"] and "\n" not in doc["_error"]
    check, why, action = nodehealth.verdict(doc, expect_gpus=True)
    assert (check, action) == ("health", None) and why == doc["_error"]
