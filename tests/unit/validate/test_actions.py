"""The actions table (lab/data/actions.yml, lab.validate.actions): it covers what gpulab judges,
each failing record gets its action, and a wrong table is one line naming the file."""

import copy

import pytest
import yaml

from lab.core.errors import ConfigError
from lab.validate import actions

# every check name gpulab's own checks give (lab.validate: hostchecks, gpuchecks, linkchecks, toolchecks, fleet)
GPULAB_CHECKS = (
    "reachable",
    "runner",
    "GPU present",
    "GPU count",
    "GPUs readable",
    "readable",
    "stack",
    "stack driver",
    "driver supports CUDA",
    "model",
    "references",
    "PCIe link",
    "PCIe replays",
    "PCIe AER",
    "NVLink links",
    "NVLink errors",
    "ECC mode",
    "ECC uncorrected",
    "retired pages",
    "row remapping",
    "idle temperature",
    "load temperature",
    "throttling",
    "load SM clock",
    "power vs limit",
    "power limit",
    "burn-in tests",
    "matmul_bf16_tflops",
    "matmul_fp32_tflops (all GPUs at once)",
    "memory_bandwidth_gbs",
    "h2d_bandwidth_gbs",
    "resnet50_images_per_s",
    "power under load",
    "memory_bandwidth_gbs vs fleet",
    "nccl_allreduce_busbw_gbs",
    "nccl-tests",
    "nccl-tests busbw",
    "nccl-tests data check",
    "nvbandwidth",
    "nvbandwidth H2D",
    "nvbandwidth P2P read (slowest peer)",
    # DCGM and Fabric Manager (lab.validate.dcgm, lab.validate.fabric)
    "DCGM diagnostic",
    "DCGM version",
    "DCGM memtest",
    "Fabric Manager",
    "Fabric Manager version",
    "Fabric Manager service",
)


@pytest.fixture(scope="module")
def table():
    return actions.load_actions()


def rec(name, verdict="FAIL", **extra):
    return {"check": name, "verdict": verdict, "measured": None, "expected": "", "reason": "", **extra}


def test_every_check_and_xid_gpulab_knows_has_its_own_action(table, refs):
    for name in GPULAB_CHECKS:  # each has its own entry for the verdicts it can give (references only WARNs)
        assert any(actions.action_for(rec(name, v), table)["from"] != "default" for v in ("FAIL", "WARN")), name
    known = {str(x) for x in refs["checks"]["xid"]["names"]} | {str(x) for x in refs["checks"]["xid"]["fail"]}
    assert known <= set(table["xid"])
    for entry in [e for byv in table["checks"].values() for e in byv.values()] + list(table["xid"].values()):
        assert entry["action"] != "rma" or entry["evidence"]


def test_pass_has_none_warn_and_fail_differ(table):
    assert actions.action_for(rec("PCIe link", "PASS"), table) is None
    fail = actions.action_for(rec("PCIe link"), table)
    warn = actions.action_for(rec("PCIe link", "WARN"), table)
    assert fail["kind"] == "reseat" and fail["escalate"] == "rma" and fail["from"] == "checks PCIe link"
    assert warn["kind"] == "rerun" and fail["means"].startswith("Power the host down")
    assert actions.action_for(rec("a check nobody wrote an entry for"), table)["from"] == "default"


def test_patterns_take_the_first_match_in_file_order(table):
    assert actions.action_for(rec("matmul_bf16_tflops vs fleet"), table)["from"] == "checks * vs fleet"
    assert actions.action_for(rec("matmul_bf16_tflops (all GPUs at once)"), table)["from"] == "checks matmul_*"
    assert actions.action_for(rec("stack cudnn", "WARN"), table)["from"] == "checks stack*"


def test_xid_checks_take_the_most_invasive_action_of_their_xids(table):
    a = actions.action_for(rec("XID events", measured=[13, 79]), table)
    assert a["kind"] == "reboot" and a["from"] == "xid 79" and a["xids"] == {"13": "rerun", "79": "reboot"}
    a = actions.action_for(rec("XID events (other devices)", "FAIL", measured=[64, 79]), table)
    assert a["kind"] == "rma" and "nvidia-bug-report.log.gz" in a["evidence"]
    # an XID nobody describes: the check's own entry, else the default
    assert actions.action_for(rec("XID events", "WARN", measured=[999]), table)["from"] == "checks XID events"


def test_dcgm_results_by_their_codes(table):
    a = actions.action_for(rec("DCGM pcie", dcgm_code="DCGM_FR_NVLINK_DOWN"), table)
    assert a["kind"] == "reset_gpu" and a["from"] == "dcgm DCGM_FR_NVLINK_DOWN"
    errors = [{"code": 14, "name": "DCGM_FR_NVLINK_DOWN"}, {"code": 52, "name": "DCGM_FR_FAULTY_MEMORY"}]
    a = actions.action_for(rec("DCGM memtest", dcgm_code="DCGM_FR_NVLINK_DOWN", dcgm_errors=errors), table)
    assert a["kind"] == "rma" and a["from"] == "dcgm DCGM_FR_FAULTY_MEMORY"
    assert actions.action_for(rec("DCGM x", dcgm_code="DCGM_FR_NOT_IN_THE_TABLE"), table)["from"] == "checks DCGM *"
    assert actions.action_for(rec("DCGM diagnostic", "WARN"), table)["kind"] == "fix_config"  # not run: not installed


def test_attach_gives_hosts_the_actions_of_their_verdict(table):
    data = {
        "hosts": {
            "h": {
                "verdict": "FAIL",
                "checks": [rec("stack driver"), rec("references", "WARN")],
                "gpus": {"0": {"checks": [rec("PCIe link"), rec("PCIe link"), rec("idle temperature", "PASS")]}},
            }
        }
    }
    actions.attach_actions(data, table)
    h = data["hosts"]["h"]
    assert [a["where"] for a in h["actions"]] == ["stack driver", "GPU 0 PCIe link"]  # each step once
    assert h["checks"][1]["action"]["kind"] == "fix_config"  # the WARN has its action on its record
    assert "action" not in h["gpus"]["0"]["checks"][2]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d["checks"]["PCIe link"]["fail"].update(action="pray"),
            "checks.PCIe link.fail.action: 'pray' is not one of",
        ),
        (lambda d: d["xid"][79].update(action="rma", evidence=[]), "xid.79.evidence"),
        (lambda d: d["kinds"].pop("reseat"), "action 'reseat' is not described under kinds"),
        (lambda d: d["dcgm"].update({"NOT_A_CODE": d["xid"][79]}), "dcgm: 'NOT_A_CODE' does not match"),
        (lambda d: d.update(extra=1), "unknown key(s) extra"),
    ],
)
def test_a_wrong_table_is_one_line(tmp_path, change, message):
    data = copy.deepcopy(yaml.safe_load(actions.ACTIONS.read_text()))
    change(data)
    path = tmp_path / "actions.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        actions.load_actions(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value) and "\n" not in str(err.value)
