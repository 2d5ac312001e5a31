"""nccl-tests' -J results file and nvbandwidth's output (runner.bwtools): hand-written fixtures in
the tools' documented forms (NVIDIA/nccl-tests src/util.cu JSON writer, file version 3;
NVIDIA/nvbandwidth v0.8 -j JSON and plain output), hostile variants, and stand-in tools."""

import json
import stat
import time
from pathlib import Path

import pytest

from runner import bwtools

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NCCL = FIXTURES / "nccl-tests-allreduce-h200x8.handmade.json"
NVB_JSON = FIXTURES / "nvbandwidth-h200x8.handmade.json"
NVB_TEXT = FIXTURES / "nvbandwidth-h200x1.handmade.txt"


def test_nccl_tests_figures():
    f = bwtools.parse_nccl_tests(NCCL.read_text())
    assert f == {
        "file_version": 3,
        "nccl_version": 22602,
        "ngpus": 8,
        "max_bytes": 8589934592,
        "busbw_gbs": 481.72,
        "busbw_peak_gbs": 481.72,
        "avg_busbw_gbs": 292.882,
        "wrong": 0,
        "out_of_bounds": 0,
        "complete": True,
        "min_bw_failed": False,
    }


def test_nccl_tests_unchecked_nan_and_in_place_only():
    doc = json.loads(NCCL.read_text())
    for r in doc["results"]:
        r["out_of_place"] = None
        r["in_place"]["nwrong"] = None
    doc["results"][-1]["in_place"]["bus_bw"] = "nan"
    f = bwtools.parse_nccl_tests(json.dumps(doc))
    assert f["wrong"] is None and f["max_bytes"] == 1073741824 and f["busbw_gbs"] == 477.81  # in-place at 1 GiB


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "not JSON"),
        ('{"results": [{"size": 8, "out_of_place": {"bus_bw": inf}}]}', "not JSON"),
        ("[1, 2]", "no results list"),
        ('{"results": [{"count": 1}]}', "results[0] has no size"),
        (
            '{"results": [{"size": 8, "in_place": {"bus_bw": "fast"}}]}',
            "results[0].in_place.bus_bw: 'fast' is not a number",
        ),
        ('{"results": [{"size": 8, "in_place": [1]}]}', "results[0].in_place is not an object"),
        ('{"results": []}', "no bus bandwidth"),
    ],
)
def test_nccl_tests_hostile_output(text, message):
    with pytest.raises(bwtools.ToolOutputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        bwtools.parse_nccl_tests(text)


def test_nvbandwidth_json_figures():
    f = bwtools.parse_nvbandwidth(NVB_JSON.read_text())
    assert f["version"] == "v0.8" and f["driver"] == "580.105.08"
    assert set(f["gpus"]) == {str(i) for i in range(8)}
    assert f["gpus"]["0"]["h2d_gbs"] == 55.31 and f["gpus"]["7"]["d2h_gbs"] == 55.13
    assert 389.4 <= f["gpus"]["3"]["d2d_read_min_gbs"] <= 390.6
    assert f["testcases"]["device_to_device_memcpy_read_ce"] == {"status": "Passed", "error": None}
    assert f["matrices"]["device_to_device_memcpy_read_ce"][2][2] is None  # the diagonal, "N/A"


def test_nvbandwidth_plain_output_of_one_gpu():
    f = bwtools.parse_nvbandwidth(NVB_TEXT.read_text())
    assert f["version"] == "v0.8"
    assert f["gpus"] == {"0": {"h2d_gbs": 55.41, "d2h_gbs": 55.22}}
    assert f["testcases"]["device_to_device_memcpy_read_ce"]["status"] == "Waived"


@pytest.mark.parametrize(
    "text, message",
    [
        ("hello\n", "no 'Running <testcase>.' line"),
        ('{"nvbandwidth": {"testcases": [{"status": "Passed"}]}}', "testcases\\[0\\] has no name"),
        ('{"nvbandwidth": {"testcases": [{"name": "x", "bandwidth_matrix": "1"}]}}', "not a list of rows"),
        ('{"nvbandwidth": {"testcases": [{"name": "x", "bandwidth_matrix": [["1", "x"]]}]}}', "'x' is not a number"),
        ('{"other": 1}', "not nvbandwidth's JSON"),
        ('{"nvbandwidth": ', "not JSON"),
    ],
)
def test_nvbandwidth_hostile_output(text, message):
    with pytest.raises(bwtools.ToolOutputError, match=message):
        bwtools.parse_nvbandwidth(text)


def _stand_in(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_stand_in_tools_run_and_their_output_is_kept(tmp_path, monkeypatch):
    tools = tmp_path / "bin"
    tools.mkdir()
    # all_reduce_perf writes its -J file (the last argument) and prints its table
    _stand_in(
        tools / "all_reduce_perf",
        f'for a; do last="$a"; done\ncp {NCCL} "$last"\n'
        'echo "# nccl-tests version 2.19.6 nccl-headers=22602 nccl-library=22602"\necho "# Avg bus bandwidth : 292.882"\n',
    )
    _stand_in(tools / "nvbandwidth", f"cat {NVB_JSON}\n")
    monkeypatch.setattr(bwtools, "TOOLS_DIR", tools)
    out = tmp_path / "out"
    out.mkdir()
    n = bwtools.run_nccl_tests([0, 1], out)
    assert (
        n["ran"]
        and n["busbw_gbs"] == 481.72
        and n["path"] == str(tools / "all_reduce_perf")
        and n["version"] == "2.19.6"
    )
    assert (out / "nccl-tests.json").exists() and "Avg bus bandwidth" in (out / "nccl-tests.log").read_text()
    v = bwtools.run_nvbandwidth([0], out)
    assert v["ran"] and v["gpus"]["0"]["h2d_gbs"] == 55.31
    assert json.loads((out / "nvbandwidth.json").read_text())["nvbandwidth"]["version"] == "v0.8"


def test_missing_failing_and_garbled_tools_are_one_line(tmp_path, monkeypatch):
    tools = tmp_path / "bin"
    tools.mkdir()
    monkeypatch.setattr(bwtools, "TOOLS_DIR", tools)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    out = tmp_path / "out"
    out.mkdir()
    assert bwtools.run_nccl_tests([0], out) == {
        "ran": False,
        "expected": False,
        "error": f"all_reduce_perf not found (in {tools} or on PATH)",
    }
    _stand_in(
        tools / "all_reduce_perf", "echo \"Test NCCL failure common.cu:1005 'unhandled cuda error'\" >&2\nexit 3\n"
    )
    r = bwtools.run_nccl_tests([0], out)
    assert r["ran"] and r["exit_code"] == 3 and "busbw_gbs" not in r
    assert r["error"] == "all_reduce_perf exit 3: Test NCCL failure common.cu:1005 'unhandled cuda error'"
    _stand_in(tools / "nvbandwidth", "echo 'garbage'\n")
    r = bwtools.run_nvbandwidth([0], out)
    assert r["ran"] and r["error"].startswith("nvbandwidth.json: no 'Running <testcase>.' line")
    _stand_in(tools / "nvbandwidth", "/bin/sleep 30 &\n/bin/sleep 30\n")  # a child that outlives the tool: killed too
    t0 = time.monotonic()
    r = bwtools.run_nvbandwidth([0], out, timeout_s=0.5)
    assert r["ran"] and r["exit_code"] is None and time.monotonic() - t0 < 10
    assert r["error"] == "nvbandwidth timed out after 0.5 s and was killed"
