"""nccl-tests' and nvbandwidth's figures in the verdicts (lab.validate.toolchecks): the
hand-written fixtures in each tool's own form (tests/unit/burnin/fixtures, read by the runner's
parser as a burn-in would) each drive a PASS, a WARN and a FAIL against the H200 references, and
gpulab's own figures are shown beside the tools'."""

import copy
import json
import re
from pathlib import Path

import pytest
from snapshots import FIXTURES as VALIDATE_FIXTURES
from snapshots import checks_of, inventory_for, stack_of

from lab.validate import fleet, toolchecks
from runner import bwtools

TOOL_FIXTURES = Path(__file__).resolve().parents[1] / "burnin" / "fixtures"


@pytest.fixture(scope="module")
def x8() -> dict:
    """The hand-made 8-GPU H200 burn-in document."""
    return json.loads((VALIDATE_FIXTURES / "h200-x8-standard.handmade.json").read_text())


def nccl(scale: float = 1.0, wrong: int = 0) -> dict:
    doc = json.loads((TOOL_FIXTURES / "nccl-tests-allreduce-h200x8.handmade.json").read_text())
    for r in doc["results"]:
        for place in ("out_of_place", "in_place"):
            r[place]["bus_bw"] *= scale
    doc["results"][-1]["out_of_place"]["nwrong"] = float(wrong)
    return {"ran": True, **bwtools.parse_nccl_tests(json.dumps(doc))}


def nvb_json(scale: float = 1.0) -> dict:
    doc = json.loads((TOOL_FIXTURES / "nvbandwidth-h200x8.handmade.json").read_text())
    for t in doc["nvbandwidth"]["testcases"]:
        t["bandwidth_matrix"] = [
            [v if v == "N/A" else f"{float(v) * scale:.2f}" for v in row] for row in t["bandwidth_matrix"]
        ]
    return {"ran": True, **bwtools.parse_nvbandwidth(json.dumps(doc))}


def nvb_text(h2d: str = "55.41") -> dict:
    text = (TOOL_FIXTURES / "nvbandwidth-h200x1.handmade.txt").read_text()
    return {"ran": True, **bwtools.parse_nvbandwidth(re.sub(r"55\.41", h2d, text))}


def verdicts(doc: dict, **tools):
    doc = copy.deepcopy(doc)
    doc["tools"] = tools
    return fleet.evaluate({"h200-01": doc}, [inventory_for(doc)], fleet.load_references(), stack_of(doc))


@pytest.mark.parametrize("scale, verdict", [(1.0, "PASS"), (0.905, "WARN"), (0.85, "FAIL")])
def test_nccl_tests_busbw_pass_warn_fail(x8, scale, verdict):
    c = checks_of(verdicts(x8, nccl_tests=nccl(scale)))["nccl-tests busbw"]
    assert c["verdict"] == verdict and "Azure HPC health checks" in c["reason"]  # the reference's provenance
    assert abs(c["measured"] - 481.72 * scale) < 0.01


def test_nccl_tests_wrong_results_fail_with_their_action(x8):
    v = verdicts(x8, nccl_tests=nccl(wrong=3))
    c = checks_of(v)["nccl-tests data check"]
    assert c["verdict"] == "FAIL" and "3 wrong element(s)" in c["reason"]
    assert c["action"]["kind"] == "reset_gpu" and "nccl-tests.json" in c["action"]["evidence"]


@pytest.mark.parametrize("corruption", [True, "yes", 5])
def test_a_malformed_nvbandwidth_section_hides_no_nccl_tests_failure(x8, corruption):
    """One tool's section of the wrong shape is that tool's WARN; the other tool's FAIL stands."""
    nvb = {**nvb_json(), "corruption": corruption}
    c = checks_of(verdicts(x8, nccl_tests=nccl(wrong=3), nvbandwidth=nvb))
    assert c["nccl-tests data check"]["verdict"] == "FAIL" and c["nccl-tests busbw"]["verdict"] == "PASS"
    assert c["nvbandwidth"]["verdict"] == "WARN"
    assert c["nvbandwidth"]["reason"].startswith("not judged: the host's nvbandwidth facts are malformed")
    assert "standard tools" not in c


def test_a_gpu_missing_from_nvbandwidths_output_is_not_judged_never_a_silent_pass(x8):
    nvb = nvb_json()
    del nvb["gpus"]["7"]
    v = verdicts(x8, nvbandwidth=nvb)
    seven = {k: c for k, c in checks_of(v, gpu=7).items() if k.startswith("nvbandwidth")}
    assert {k: (c["verdict"], c["reason"]) for k, c in seven.items()} == {
        f"nvbandwidth {f}": ("WARN", f"not judged: nvbandwidth's output has no {f} figure of this GPU")
        for f in ("H2D", "D2H", "P2P read (slowest peer)")
    }
    assert {c["verdict"] for k, c in checks_of(v, gpu=6).items() if k.startswith("nvbandwidth")} == {"PASS"}


@pytest.mark.parametrize("scale, verdict", [(1.0, "PASS"), (0.92, "WARN"), (0.8, "FAIL")])
def test_nvbandwidth_json_pass_warn_fail(x8, scale, verdict):
    v = verdicts(x8, nvbandwidth=nvb_json(scale))
    for gpu in range(8):
        c = checks_of(v, gpu=gpu)
        assert c["nvbandwidth H2D"]["verdict"] == verdict and c["nvbandwidth D2H"]["verdict"] == verdict
        assert c["nvbandwidth P2P read (slowest peer)"]["verdict"] == ("FAIL" if scale < 0.86 else "PASS")
        action = c["nvbandwidth H2D"].get("action")
        assert (action or {}).get("kind") == {"PASS": None, "WARN": "rerun", "FAIL": "reseat"}[verdict]


@pytest.mark.parametrize("h2d, verdict", [("55.41", "PASS"), ("51.00", "WARN"), ("40.00", "FAIL")])
def test_nvbandwidth_plain_output_pass_warn_fail(snap, h2d, verdict):
    tools = {"nvbandwidth": nvb_text(h2d), "nccl_tests": {"ran": False, "error": "one GPU: no all-reduce"}}
    c = checks_of(verdicts(snap, **tools), gpu=0)
    assert c["nvbandwidth H2D"]["verdict"] == verdict and c["nvbandwidth D2H"]["verdict"] == "PASS"
    assert "nvbandwidth P2P read (slowest peer)" not in c  # waived on one GPU


def test_failed_tools_warn_and_tools_not_built_say_nothing(x8):
    v = verdicts(
        x8,
        nccl_tests={"ran": True, "error": "all_reduce_perf exit 3: unhandled cuda error"},
        nvbandwidth={"ran": False, "error": "nvbandwidth not found (in /opt/gpulab/tools/bin or on PATH)"},
    )
    c = checks_of(v)
    assert c["nccl-tests"]["verdict"] == "WARN" and c["nccl-tests"]["reason"].endswith("unhandled cuda error")
    assert "nvbandwidth" not in c and v.hosts["h200-01"]["beside"] == []


def test_not_judged_without_a_reference_or_over_fewer_gpus(x8, refs):
    t4 = copy.deepcopy(x8)
    for g in t4["probe"]["gpus"]:
        g["name"] = "Tesla T4"
    out = toolchecks.host_tool_checks({"tools": {"nccl_tests": nccl(), "nvbandwidth": nvb_json()}}, t4["probe"], refs)
    by = {c["check"]: c for c in out}
    assert (
        by["nccl-tests busbw"]["verdict"] == "WARN"
        and "no nccl_tests_busbw_gbs for T4" in by["nccl-tests busbw"]["reason"]
    )
    assert by["nvbandwidth"]["reason"] == "nvbandwidth's figures not judged: no reference for T4"
    four = nccl()
    four["ngpus"] = 4
    c = toolchecks.host_tool_checks({"tools": {"nccl_tests": four}}, x8["probe"], refs)[0]
    assert c["verdict"] == "WARN" and "measured over 4 of the host's 8 GPUs" in c["reason"]


def test_gpulab_figures_beside_the_tools_in_json_and_html(x8):
    v = verdicts(x8, nccl_tests=nccl(), nvbandwidth=nvb_json())
    rows = v.hosts["h200-01"]["beside"]
    assert rows[0] == {
        "figure": "all-reduce bus bandwidth",
        "gpu": None,
        "unit": "GB/s",
        "gpulab": 478.2,
        "tool": 481.72,
        "by": "nccl-tests all_reduce_perf (NCCL 2.26.2)",
    }
    h2d0 = next(r for r in rows if r["gpu"] == 0 and r["figure"] == "H2D")
    assert h2d0["gpulab"] == x8["gpus"]["0"]["solo"]["h2d_bandwidth_gbs"] and h2d0["tool"] == 55.31
    assert h2d0["by"] == "nvbandwidth v0.8"
    page = fleet.render_html(v)
    assert "gpulab's figures beside the standard tools" in page and "nccl-tests all_reduce_perf (NCCL 2.26.2)" in page
    assert json.loads(v.to_json())["hosts"]["h200-01"]["beside"][0]["tool"] == 481.72


def test_nccl_version_codes():
    assert toolchecks.nccl_version(22602) == "2.26.2"
    assert toolchecks.nccl_version(2708) == "2.7.8"
    assert toolchecks.nccl_version(None) is None and toolchecks.nccl_version(True) is None


def test_a_baseline_takes_the_tools_figures(x8, refs):
    doc = copy.deepcopy(x8)
    doc["tools"] = {"nccl_tests": nccl(), "nvbandwidth": nvb_json()}
    out = fleet.build_references({"h200-01": doc}, refs)
    m = out["models"]["H200"]["metrics"]
    assert m["nccl_tests_busbw_gbs"]["value"] == 481.72 and m["nccl_tests_busbw_gbs"]["scope"] == "host"
    assert m["nvbandwidth_h2d_gbs"]["value"] == 55.305 and m["nvbandwidth_h2d_gbs"]["source"].startswith("baseline ")
    assert 389.4 <= m["nvbandwidth_d2d_read_gbs"]["value"] <= 390.6
