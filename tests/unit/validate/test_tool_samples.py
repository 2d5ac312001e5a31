"""The standard tools as they really print (tests/samples/*/SOURCE.md: each sample built from the tool's
own writer at a pinned version), run as stand-ins that print those samples and exit as the tool does,
read by the burn-in's runner.bwtools and judged by lab.validate: each class of real output gives the
verdict a lab expects, with the tool's own error and the action of lab/data/actions.yml."""

from __future__ import annotations

import copy
import stat
import time
from pathlib import Path

import pytest

from lab.validate import toolchecks
from lab.validate.actions import action_for, load_actions
from runner import burnin_xid, bwtools, probe_link

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
H100 = "NVIDIA H100 80GB HBM3"


def stand_in(
    tools: Path, name: str, stdout: Path | None, code: int, results: Path | None = None, sleep: int = 0
) -> None:
    """A stand-in that prints a sample, writes a -J file from one (nccl-tests) and exits as the tool did."""
    body = '#!/bin/sh\nprev=\'\'\nfor a; do [ "$prev" = -J ] && out="$a"; prev="$a"; done\n'
    if results is not None:
        body += f'cp "{results}" "$out"\n'
    if stdout is not None:
        body += f'cat "{stdout}"\n'
    if sleep:
        body += f"/bin/sleep {sleep}\n"
    body += f"exit {code}\n"
    (tools / name).write_text(body)
    (tools / name).chmod((tools / name).stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def tools(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setattr(bwtools, "TOOLS_DIR", bin_dir)
    (tmp_path / "out").mkdir()
    return bin_dir


def burnin(n: int, **tools) -> tuple[dict, dict]:
    probe = {"gpu_count": n, "gpus": [{"index": i, "name": H100} for i in range(n)]}
    return {"gpus": {str(i): {} for i in range(n)}, "tools": tools}, probe


def refs_with_h100_p2p(refs: dict) -> dict:
    out = copy.deepcopy(refs)
    out["models"]["H100-TEST"] = {
        "names": [H100],
        "metrics": {
            "nvbandwidth_d2d_read_gbs": {"value": 360.0, "unit": "GB/s", "lower": 0.15, "source": "test reference"}
        },
    }
    return out


def by_name(records: list[dict]) -> dict:
    return {r["check"]: r for r in records}


# ------------------------------------------------------------------ nccl-tests 2.19.6


def test_nccl_tests_data_check_failure_is_that_checks_fail_not_a_tool_warning(tools, refs):
    """all_reduce_perf exits 7 (testNumResults) after writing every result when its data check found
    wrong elements: the FAIL of "nccl-tests data check", with the tool's own line and its action."""
    s = SAMPLES / "nccl-tests"
    stand_in(tools, "all_reduce_perf", s / "datacheck-h100x2.stdout", 7, s / "datacheck-h100x2.json")
    t = bwtools.run_nccl_tests([0, 1], tools.parent / "out")
    assert t["exit_code"] == 7 and t["wrong"] == 2 and t["out_of_bounds"] == 1 and "error" not in t
    doc, probe = burnin(2, nccl_tests=t)
    recs = by_name(toolchecks.host_tool_checks(doc, probe, refs))
    c = recs["nccl-tests data check"]
    assert c["verdict"] == "FAIL" and "2 wrong element(s)" in c["reason"]
    assert "exit 7: .. h100-01 pid 41235: Test failure common.cu:1454" in c["reason"]
    assert "nccl-tests" not in recs  # not "the tool failed"
    assert action_for(c, load_actions())["kind"] == "reset_gpu"


def test_nccl_tests_pass_gives_its_figures(tools, refs):
    s = SAMPLES / "nccl-tests"
    stand_in(tools, "all_reduce_perf", s / "pass-h100x2.stdout", 0, s / "pass-h100x2.json")
    t = bwtools.run_nccl_tests([0, 1], tools.parent / "out")
    assert t["version"] == "2.19.6" and t["nccl_version"] == 22809 and t["ngpus"] == 2
    assert t["max_bytes"] == 8589934592 and 364 < t["busbw_gbs"] < 366 and t["wrong"] == 0 and t["complete"]
    doc, probe = burnin(2, nccl_tests=t)
    verdicts = {c["check"]: c["verdict"] for c in toolchecks.host_tool_checks(doc, probe, refs)}
    assert "FAIL" not in verdicts.values() and "nccl-tests" not in verdicts


def test_nccl_tests_that_hangs_is_killed_and_its_partial_file_is_not_read_as_results(tools, refs):
    s = SAMPLES / "nccl-tests"
    stand_in(tools, "all_reduce_perf", s / "partial-h100x2.stdout", 0, s / "partial-h100x2.json", sleep=30)
    t0 = time.monotonic()
    t = bwtools.run_nccl_tests([0, 1], tools.parent / "out", timeout_s=1)
    assert time.monotonic() - t0 < 10 and t["exit_code"] is None
    assert t["error"].startswith("all_reduce_perf: timed out after 1 s and was killed")
    doc, probe = burnin(2, nccl_tests=t)
    c = by_name(toolchecks.host_tool_checks(doc, probe, refs))["nccl-tests"]
    assert c["verdict"] == "WARN" and "timed out" in c["reason"]


def test_nccl_tests_cuda_error_is_a_warning_with_its_own_line(tools, refs):
    stand_in(tools, "all_reduce_perf", SAMPLES / "nccl-tests" / "cuda-error.stdout", 2)
    t = bwtools.run_nccl_tests([0, 1], tools.parent / "out")
    assert t["error"] == "all_reduce_perf exit 2: .. h100-01 pid 41235: Test failure common.cu:1454"
    doc, probe = burnin(2, nccl_tests=t)
    assert by_name(toolchecks.host_tool_checks(doc, probe, refs))["nccl-tests"]["verdict"] == "WARN"


# ------------------------------------------------------------------ nvbandwidth v0.8


def test_nvbandwidth_verification_failure_is_read_and_fails_its_data_check(tools, refs):
    """Lines before the JSON (the compare kernel's printf) and the document's ASSERT error, exit 1."""
    stand_in(tools, "nvbandwidth", SAMPLES / "nvbandwidth" / "verify-fail-h100x2.stdout", 1)
    t = bwtools.run_nvbandwidth([0, 1], tools.parent / "out")
    assert t["corruption"]["testcase"] == "device_to_host_memcpy_ce"
    assert t["gpus"]["0"]["h2d_gbs"] == pytest.approx(55.2391)  # what it measured before is kept
    doc, probe = burnin(2, nvbandwidth=t)
    c = by_name(toolchecks.host_tool_checks(doc, probe, refs))["nvbandwidth data check"]
    assert c["verdict"] == "FAIL" and "Invalid value when checking the pattern" in c["reason"]
    assert "h_errorFlag == 0" in c["reason"]
    assert action_for(c, load_actions())["kind"] == "reset_gpu"


@pytest.mark.parametrize(
    "sample, ngpus, failing", [("nopeer-gpu2-h100x3.stdout", 3, {"2"}), ("waived-d2d-h100x2.stdout", 2, {"0", "1"})]
)
def test_a_gpu_without_peer_access_fails_where_references_require_p2p(tools, refs, sample, ngpus, failing):
    stand_in(tools, "nvbandwidth", SAMPLES / "nvbandwidth" / sample, 0)
    t = bwtools.run_nvbandwidth(list(range(ngpus)), tools.parent / "out")
    doc, _probe = burnin(ngpus, nvbandwidth=t)
    mine = refs_with_h100_p2p(refs)["models"]["H100-TEST"]
    for i in range(ngpus):
        recs = by_name(toolchecks.gpu_tool_checks(doc, i, mine))
        c = recs.get(toolchecks.P2P_LABEL)
        if str(i) in failing:
            assert c["verdict"] == "FAIL" and "references require GPU-to-GPU bandwidth" in c["reason"]
            assert action_for(c, load_actions())["kind"] == "reseat"
        else:
            assert c["verdict"] == "PASS"
    # without a GPU-to-GPU reference the N/A is not judged
    assert toolchecks.P2P_LABEL not in by_name(toolchecks.gpu_tool_checks(doc, 0, None))


@pytest.mark.parametrize(
    "sample, code, sleep, words",
    [
        ("cuda-error.stdout", 1, 0, "[CUDA_ERROR_NO_DEVICE] no CUDA-capable device is detected"),
        ("partial-h100x2.stdout", 0, 30, "timed out after 1 s and was killed (its output stops mid-document)"),
    ],
)
def test_nvbandwidth_that_could_not_run_is_a_warning_saying_why(tools, refs, sample, code, sleep, words):
    stand_in(tools, "nvbandwidth", SAMPLES / "nvbandwidth" / sample, code, sleep=sleep)
    t0 = time.monotonic()
    t = bwtools.run_nvbandwidth([0, 1], tools.parent / "out", timeout_s=1)
    assert time.monotonic() - t0 < 10
    doc, probe = burnin(2, nvbandwidth=t)
    c = by_name(toolchecks.host_tool_checks(doc, probe, refs))["nvbandwidth"]
    assert c["verdict"] == "WARN" and words in c["reason"]


def test_a_tool_gone_where_provisioning_built_it_is_a_warning(tools, refs):
    t = bwtools.run_nvbandwidth([0, 1], tools.parent / "out")
    assert t["ran"] is False and not t["expected"]  # never built here (bwtools_tools: {}): no record
    doc, probe = burnin(2, nvbandwidth=t)
    assert toolchecks.host_tool_checks(doc, probe, refs) == []
    (tools.parent / "nvbandwidth.json").write_text('{"version": "0.8"}')  # the bwtools role's marker
    t = bwtools.run_nvbandwidth([0, 1], tools.parent / "out")
    doc, probe = burnin(2, nvbandwidth=t)
    c = by_name(toolchecks.host_tool_checks(doc, probe, refs))["nvbandwidth"]
    assert c["verdict"] == "WARN" and c["reason"].startswith("not run: nvbandwidth not found")
    assert "says it was built" in c["reason"]


# ------------------------------------------------------------------ XID lines, AER counters


def test_xid_lines_of_mig_gpus_are_matched():
    gpus = [{"index": 0, "pci_bus_id": "00000000:18:00.0"}, {"index": 1, "pci_bus_id": "00000000:2A:00.0"}]
    events = burnin_xid.parse_xids((SAMPLES / "xid" / "kernel-log.txt").read_text(), gpus)
    assert [(e["xid"], e["gpu"]) for e in events] == [(79, 0), (43, 1), (31, 1), (45, 1), (94, 1), (63, None)]
    assert events[1]["mig"] == {"gpu_instance": 1, "compute_instance": 0} and events[2]["mig"] == {"gpu_instance": 2}
    assert events[3]["text"].endswith("caused by previous Xid 43")


@pytest.mark.parametrize("case, totals", [("clean", (0, 0, 0)), ("corrected", (16, 0, 0)), ("fatal", (2, 1, 1))])
def test_aer_counters_as_the_kernel_writes_them(case, totals):
    counters, why = probe_link.aer_counters(SAMPLES / "aer" / case)
    assert why is None
    assert tuple(counters[k]["total"] for k in ("correctable", "nonfatal", "fatal")) == totals
    if case == "corrected":
        assert counters["correctable"]["counts"] == {"RxErr": 3, "BadTLP": 12, "BadDLLP": 1}


def test_the_test_labs_all_reduce_perf_stand_in_ends_a_data_check_failure_as_the_real_one(tools, refs, monkeypatch):
    """tests/testlab's C stand-in (what the integration tests build on their hosts) writes what the
    samples show: its data-check failure is read and judged as the real tool's."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here")
    src = Path(__file__).resolve().parents[2] / "testlab" / "toolsrc" / "nccl-tests" / "src"
    build = tools.parent / "build"
    build.mkdir()
    (build / "nccl.h").write_text("#define NCCL_VERSION_CODE 22809\n")
    (build / "common.h").write_text((src / "common.h").read_text().replace("@VERSION@", "2.19.6"))
    shutil.copy(src / "all_reduce.c", build / "all_reduce.c")
    subprocess.run(
        [cc, "-O0", "-I", str(build), "-o", str(tools / "all_reduce_perf"), str(build / "all_reduce.c")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    gpus = tools.parent / "gpus.json"
    gpus.write_text('{"gpus": [{"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H100 80GB HBM3"}]}')
    monkeypatch.setenv("GPULAB_FAKE_GPUS", str(gpus))
    out = tools.parent / "out"
    good = bwtools.run_nccl_tests([0, 1], out, max_bytes="64M")
    assert good["exit_code"] == 0 and good["wrong"] == 0 and good["complete"] and "error" not in good
    monkeypatch.setenv("GPULAB_FAKE_NWRONG", "2")
    (out / "nccl-tests.json").unlink()
    t = bwtools.run_nccl_tests([0, 1], out, max_bytes="64M")
    assert t["exit_code"] == 7 and t["wrong"] == 2 and t["out_of_bounds"] == 1 and "error" not in t
    doc, probe = burnin(2, nccl_tests=t)
    c = by_name(toolchecks.host_tool_checks(doc, probe, refs))["nccl-tests data check"]
    assert c["verdict"] == "FAIL" and "Test failure common.cu:1454" in c["reason"]
