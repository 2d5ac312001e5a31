"""DCGM's diagnostic and Fabric Manager in `invoke validate`, from dcgmi's output as its writer prints it
(tests/samples/dcgm/SOURCE.md: DCGM 3.3.9 and 4.2.3) and plain data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snapshots import findings, inventory_for, stack_of

from lab.core.errors import ConfigError
from lab.validate import dcgm, fabric, fleet
from lab.validate.actions import action_for, load_actions

FIXTURES = Path(__file__).resolve().parents[2] / "samples" / "dcgm"  # as dcgmi prints (SOURCE.md there)
REQUIRED = {"version": "4.5.2", "required": True}
OPTIONAL = {"version": "4.5.2", "required": False}


def gathered(name: str, level: int = 2, code: int = 0, version: str = "4.5.2") -> dict:
    return {
        "installed": True,
        "version": version,
        "level": level,
        "exit_code": code,
        "stdout": (FIXTURES / name).read_text(),
        "stderr": "",
    }


def by_name(records: list[dict]) -> dict:
    return {r["check"]: r for r in records}


def test_a_passing_diagnostic_gives_one_pass_record_per_test_on_its_gpu():
    host, gpus = dcgm.checks(gathered("v4-r2-pass.json"), [0, 1], OPTIONAL)
    assert by_name(host)["DCGM version"]["verdict"] == "PASS" and len(host) == 1
    recs = by_name(gpus["0"])
    assert list(recs) == ["DCGM software", "DCGM pcie", "DCGM memory"]
    assert {r["verdict"] for g in gpus.values() for r in g} == {"PASS"}
    assert recs["DCGM pcie"]["reason"] == "level 2 Integration: passed (GPU 0 GPU to Host bandwidth:\t\t55.21 GB/s)"
    assert recs["DCGM memory"]["source"] == "dcgm" and recs["DCGM memory"]["dcgm_code"] is None


def test_real_dcgmi_prints_a_warning_as_fail_and_one_gpus_setting_fails_no_other_gpu():
    """dcgmi's JSON has no "Warn": DCGM's software plugin warns about GPU 1's persistence mode with one
    result for every GPU, all printed "Fail", the error on GPU 1 alone (tests/samples/dcgm)."""
    _, gpus = dcgm.checks(gathered("v4-r1-persistence-gpu1.json", level=1, code=226), [0, 1], OPTIONAL)
    sw0, sw1 = by_name(gpus["0"])["DCGM software"], by_name(gpus["1"])["DCGM software"]
    assert sw1["verdict"] == "WARN" and sw1["measured"] == "Fail" and sw1["dcgm_code"] == "DCGM_FR_PERSISTENCE_MODE"
    assert sw1["reason"].startswith(
        "level 1 Deployment: DCGM_FR_PERSISTENCE_MODE: Persistence mode for GPU 1 is disabled."
    )
    assert sw1["dcgm_errors"] == [
        {
            "code": 29,
            "name": "DCGM_FR_PERSISTENCE_MODE",
            "message": sw1["dcgm_errors"][0]["message"],
            "severity": "DCGM_ERROR_CONFIG",
            "category": "DCGM_FR_EC_SOFTWARE_OTHER",
        }
    ]
    assert sw0["verdict"] == "PASS" and sw0["measured"] == "Fail" and "its error is GPU 1's" in sw0["reason"]
    assert sw0["dcgm_code"] is None


def test_a_failure_fails_its_gpu_only():
    host, gpus = dcgm.checks(gathered("v4-r2-memory-gpu0.json", code=205), [0, 1], OPTIONAL)
    mem0, mem1 = by_name(gpus["0"])["DCGM memory"], by_name(gpus["1"])["DCGM memory"]
    assert mem0["verdict"] == "FAIL" and mem0["dcgm_code"] == "DCGM_FR_VOLATILE_DBE_DETECTED"
    assert mem0["dcgm_errors"][0]["severity"] == "DCGM_ERROR_RESET" and mem1["verdict"] == "PASS"
    # a GPU the probe does not list: the host's record, naming it
    host, gpus = dcgm.checks(gathered("v4-r2-memory-gpu0.json", code=205), [1], OPTIONAL)
    assert (
        by_name(host)["DCGM memory (GPU 0)"]["verdict"] == "FAIL"
        and by_name(gpus["1"])["DCGM memory"]["verdict"] == "PASS"
    )


@pytest.mark.parametrize(
    "sample, test, code, verdict",
    [
        ("v4-r2-fabric-training.json", "memory", "DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR", "FAIL"),
        ("v4-r1-denylist.json", "software", "DCGM_FR_DENYLISTED_DRIVER", "FAIL"),
    ],
)
def test_dcgm_4_errors_of_no_gpu_keep_their_code_on_the_host(sample, test, code, verdict):
    """DCGM 4 writes an error of no GPU in the test's test_summary only; every GPU's result is "Fail"
    without an error of its own. The host record carries the code (so the action is the code's)."""
    host, gpus = dcgm.checks(gathered(sample, code=226), [0, 1], OPTIONAL)
    rec = by_name(host)[f"DCGM {test}"]
    assert rec["verdict"] == verdict and rec["dcgm_code"] == code and code in rec["reason"]
    for g in ("0", "1"):
        r = by_name(gpus[g])[f"DCGM {test}"]
        assert r["verdict"] == "PASS" and "no GPU (the host)" in r["reason"]
    table = load_actions()
    assert action_for(rec, table)["from"] == f"dcgm {code}"


def test_dcgm_3_form_after_warning_lines():
    host, gpus = dcgm.checks(gathered("v3-r2-remap-gpu0.txt", version="3.3.9"), [0, 1], {"version": "3.3.9"})
    assert by_name(host)["DCGM Denylist"]["verdict"] == "PASS"  # no gpu_id: the host's
    remap = by_name(gpus["0"])["DCGM Page Retirement/Row Remap"]
    assert remap["verdict"] == "FAIL" and remap["dcgm_code"] == "DCGM_FR_ROW_REMAP_FAILURE"
    assert by_name(gpus["1"])["DCGM Persistence Mode"]["verdict"] == "WARN"
    assert by_name(gpus["1"])["DCGM PCIe"]["verdict"] == "PASS"
    # a GPU the probe does not list: the host's record, naming it
    host, gpus = dcgm.checks(gathered("v3-r2-remap-gpu0.txt"), [1], None)
    assert "0" not in gpus and by_name(host)["DCGM Page Retirement/Row Remap (GPU 0)"]["verdict"] == "FAIL"


def test_a_runtime_error_or_no_document_fails_the_host():
    host, gpus = dcgm.checks(gathered("v4-runtime-error.json", code=226), [0], None)
    assert gpus == {} and [(r["check"], r["verdict"]) for r in host] == [("DCGM diagnostic", "FAIL")]
    assert "unable to establish a connection" in host[0]["reason"]
    no_engine = {
        "installed": True,
        "version": "4.5.2",
        "level": 1,
        "exit_code": 235,
        "stderr": "",
        "stdout": "Error: unable to establish a connection to the specified host: localhost\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n",
    }
    host, _ = dcgm.checks(no_engine, [0], None)
    assert host[0]["verdict"] == "FAIL" and host[0]["reason"] == (
        "level 1: dcgmi exited 235, no DCGM diagnostic document in dcgmi's output: "
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected."
    )
    host, _ = dcgm.checks(
        {**no_engine, "stdout": '{"DCGM Diagnostic": {"test_categories": [', "exit_code": 0}, [0], None
    )
    assert host[0]["verdict"] == "FAIL" and "dcgmi exited 0" in host[0]["reason"]
    host, _ = dcgm.checks({**no_engine, "stdout": '{"a": ' * 100000 + "1" + "}" * 100000}, [0], None)
    assert host[0]["verdict"] == "FAIL" and "nested deeper than 64 levels" in host[0]["reason"]
    host, _ = dcgm.checks({**no_engine, "stdout": '{"DCGM Diagnostic": {"test_categories": []}}'}, [0], None)
    assert host[0]["reason"] == "level 1: no test results in dcgmi's output"
    host, _ = dcgm.checks(
        {"installed": True, "version": "4.5.2", "level": 3, "error": "dcgmi diag -r 3 did not finish within 10800 s"},
        [0],
        None,
    )
    assert host[0]["verdict"] == "FAIL" and "did not finish" in host[0]["reason"]


@pytest.mark.parametrize(
    "root",
    [
        {"test_categories": 5},
        {"test_categories": [{"category": "Hardware", "tests": 5}]},
    ],
)
def test_a_document_of_the_wrong_shape_fails_the_host_in_one_record(root):
    host, gpus = dcgm.checks(
        {"installed": True, "level": 2, "stdout": json.dumps({"DCGM Diagnostic": root})}, [0], None
    )
    assert gpus == {} and [(r["check"], r["verdict"], r["reason"]) for r in host] == [
        ("DCGM diagnostic", "FAIL", "level 2: no test results in dcgmi's output")
    ]


def test_a_gpu_that_a_test_leaves_out_is_not_judged_by_dcgm_never_a_silent_pass():
    doc = json.loads((FIXTURES / "v4-r2-pass.json").read_text())
    memory = doc["DCGM Diagnostic"]["test_categories"][2]["tests"][0]
    memory["results"] = [r for r in memory["results"] if r["entity_id"] == 0]
    _, gpus = dcgm.checks(gathered("v4-r2-pass.json") | {"stdout": json.dumps(doc)}, [0, 1], OPTIONAL)
    left_out = by_name(gpus["1"])["DCGM memory"]
    assert left_out["verdict"] == "WARN" and left_out["reason"] == (
        "level 2 Hardware: dcgmi's output has no result for this GPU (it reports GPU 0): not judged by DCGM"
    )
    assert action_for(left_out, load_actions())["kind"] == "rerun"
    assert by_name(gpus["1"])["DCGM pcie"]["verdict"] == by_name(gpus["0"])["DCGM memory"]["verdict"] == "PASS"
    # results of a GPU index the host does not have: every GPU it has is left out
    for cat in doc["DCGM Diagnostic"]["test_categories"]:
        for r in cat["tests"][0]["results"]:
            r["entity_id"] = 99
    _, gpus = dcgm.checks(gathered("v4-r2-pass.json") | {"stdout": json.dumps(doc)}, [0, 1], OPTIONAL)
    assert {(g, r["check"], r["verdict"]) for g, rs in gpus.items() for r in rs} == {
        (g, f"DCGM {t}", "WARN") for g in "01" for t in ("software", "pcie", "memory")
    }
    # DCGM 3's basic tests name only the GPU of their last error (a number): no GPU is left out by them
    _, gpus = dcgm.checks(gathered("v3-r2-remap-gpu0.txt", version="3.3.9"), [0, 1, 2], None)
    assert [r["check"] for r in gpus["2"] if r["verdict"] == "WARN"] == ["DCGM PCIe"]


def test_dcgmis_texts_are_kept_as_excerpts_never_whole():
    """A megabyte in runtime_error, a test's name, its status or info went whole into the records (validate.json,
    the history): each is kept to its first 500 characters (a name, status or id to 100)."""
    mb = "x" * 1_000_000
    host, _ = dcgm.checks(
        {"installed": True, "level": 2, "stdout": json.dumps({"DCGM Diagnostic": {"runtime_error": mb}})}, [0], None
    )
    assert host[0]["reason"] == f"level 2: {'x' * 500}"
    result = {"entity_group": "GPU", "entity_id": 0, "status": mb, "info": [mb]}
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": mb, "tests": [{"name": mb, "results": [result]}]}]}}
    _, gpus = dcgm.checks({"installed": True, "level": 2, "stdout": json.dumps(doc)}, [0], None)
    (rec,) = gpus["0"]
    assert rec["check"] == "DCGM " + "x" * 100 and rec["measured"] == "x" * 100 and len(rec["reason"]) < 400


def test_without_dcgm_one_record_warn_or_fail_when_required():
    for expect, verdict in ((None, "WARN"), (OPTIONAL, "WARN"), (REQUIRED, "FAIL")):
        host, gpus = dcgm.checks({"installed": False, "level": 2}, [0], expect)
        assert gpus == {} and [(r["check"], r["verdict"]) for r in host] == [("DCGM diagnostic", verdict)]
        assert host[0]["reason"].startswith("not run: DCGM not installed")
    assert dcgm.checks(None, [0], REQUIRED) == ([], {})  # not gathered (a baseline, an older snapshot)


def test_a_dcgm_of_another_version_than_the_profiles_fails():
    host, _ = dcgm.checks(gathered("v4-r2-pass.json", version="4.4.1"), [0], OPTIONAL)
    assert by_name(host)["DCGM version"]["verdict"] == "FAIL"
    assert by_name(host)["DCGM version"]["reason"] == "DCGM is 4.4.1, the profile says 4.5.2"


def test_unknown_statuses_and_codes_are_named_not_dropped():
    doc = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "memory",
                            "results": [
                                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Exploded"},
                                {
                                    "entity_group": "GPU",
                                    "entity_group_id": 1,
                                    "entity_id": 1,
                                    "status": "Fail",
                                    "warnings": [
                                        {"warning": "new", "error_id": 999, "error_category": 99, "error_severity": 9}
                                    ],
                                },
                                {
                                    "entity_group": "GPU",
                                    "entity_group_id": 1,
                                    "entity_id": 2,
                                    "status": "Pass",
                                    "info": "not a list",
                                    "warnings": [
                                        {
                                            "warning": ["odd"],
                                            "error_id": "52",
                                            "error_category": [1],
                                            "error_severity": {"a": 1},
                                        }
                                    ],
                                },
                            ],
                        }
                    ],
                }
            ]
        }
    }
    _, gpus = dcgm.checks({"installed": True, "level": 2, "stdout": json.dumps(doc)}, [0, 1, 2], None)
    assert gpus["0"][0]["verdict"] == "FAIL" and "'Exploded' is not one DCGM reports" in gpus["0"][0]["reason"]
    assert gpus["1"][0]["dcgm_code"] == "DCGM error 999" and gpus["1"][0]["dcgm_errors"][0]["severity"] is None
    odd = gpus["2"][0]  # ill-typed fields: kept as text or left out, never a crash
    assert (
        odd["verdict"] == "PASS" and odd["dcgm_errors"][0]["code"] is None and odd["dcgm_errors"][0]["severity"] is None
    )


def test_levels_follow_validate_and_can_be_configured():
    assert [dcgm.level_for(lv) for lv in ("quick", "standard", "burn-in")] == [1, 2, 3]
    assert dcgm.level_for("quick", {"quick": 2}) == 2 and dcgm.level_for("burn-in", None, "4") == 4
    assert dcgm.level_for("standard", None, 0) == 0  # no diagnostic at all
    with pytest.raises(ConfigError, match=r"^--dcgm-level: '7' is not a DCGM run level"):
        dcgm.level_for("quick", None, "7")
    with pytest.raises(ConfigError, match=r"^gpulab.validate.dcgm_levels.standard: 'x' is not"):
        dcgm.level_for("standard", {"standard": "x"})


def test_the_error_table_names_every_code_dcgm_numbers():
    table = dcgm.codes()
    assert table["codes"][52] == "DCGM_FR_FAULTY_MEMORY" and table["codes"][101] == "DCGM_FR_XID_ERROR"
    assert sorted(table["codes"]) == list(range(len(table["codes"])))
    assert table["severities"][2] == "DCGM_ERROR_ISOLATE"


def test_the_test_labs_stand_in_prints_what_the_parser_reads(tmp_path):
    """The stand-in dcgmi of tests/testlab (what the integration tests run) speaks this form."""
    from tests.testlab.aptrepo import load_spec

    pkg = next(p for p in load_spec() if p["name"] == "datacenter-gpu-manager-4-core")
    script = tmp_path / "dcgmi"
    script.write_text(next(f["content"] for f in pkg["files"] if f["path"] == "/usr/bin/dcgmi"))
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "gpus": 1,
                "results": {
                    "memory": {
                        "0": {
                            "status": "Fail",
                            "error_id": 52,
                            "error_category": 10,
                            "error_severity": 2,
                            "warning": "bad cell",
                        }
                    }
                },
            }
        )
    )
    res = subprocess.run(
        [sys.executable, str(script), "diag", "-r", "2", "-j"],
        capture_output=True,
        text=True,
        env={"GPULAB_FAKE_DCGM": str(spec), "PATH": "/usr/bin:/bin"},
    )
    _, gpus = dcgm.checks({"installed": True, "level": 2, "exit_code": res.returncode, "stdout": res.stdout}, [0], None)
    assert [(r["check"], r["verdict"]) for r in gpus["0"]] == [
        ("DCGM software", "PASS"),
        ("DCGM pcie", "PASS"),
        ("DCGM memory", "FAIL"),
    ]
    # as the real one: a warning prints "Fail", an error of no GPU goes to the test's summary only
    spec.write_text(
        json.dumps(
            {
                "gpus": 2,
                "results": {
                    "software": {
                        "1": {
                            "status": "Warn",
                            "error_id": 29,
                            "error_category": 8,
                            "error_severity": 5,
                            "warning": "pm off",
                        },
                        "host": {
                            "status": "Fail",
                            "error_id": 23,
                            "error_category": 3,
                            "error_severity": 5,
                            "warning": "nouveau",
                        },
                    }
                },
            }
        )
    )
    res = subprocess.run(
        [sys.executable, str(script), "diag", "-r", "1", "-j"],
        capture_output=True,
        text=True,
        env={"GPULAB_FAKE_DCGM": str(spec), "PATH": "/usr/bin:/bin"},
    )
    assert '"Warn"' not in res.stdout
    host, gpus = dcgm.checks(
        {"installed": True, "level": 1, "exit_code": res.returncode, "stdout": res.stdout}, [0, 1], None
    )
    assert by_name(host)["DCGM software"]["dcgm_code"] == "DCGM_FR_DENYLISTED_DRIVER"
    assert gpus["1"][0]["verdict"] == "WARN" and gpus["0"][0]["verdict"] == "PASS"


@pytest.mark.parametrize(
    "found, nvswitch, driver, verdicts",
    [
        (
            {"version": "580.159.04", "service": "active"},
            True,
            "580.159.04",
            [("Fabric Manager version", "PASS"), ("Fabric Manager service", "PASS")],
        ),
        (
            {"version": "580.126.20", "service": "active"},
            True,
            "580.159.04",
            [("Fabric Manager version", "FAIL"), ("Fabric Manager service", "PASS")],
        ),
        (
            {"version": "580.159.04", "service": "failed"},
            True,
            "580.159.04",
            [("Fabric Manager version", "PASS"), ("Fabric Manager service", "FAIL")],
        ),
        ({"version": None, "service": "inactive"}, True, "580.159.04", [("Fabric Manager", "FAIL")]),
        (
            {"version": "580.159.04", "service": "active"},
            True,
            None,
            [("Fabric Manager version", "FAIL"), ("Fabric Manager service", "PASS")],
        ),
        ({"version": None, "service": "inactive"}, False, "580.159.04", []),  # no NVSwitches: nothing to judge
    ],
)
def test_fabric_manager_on_nvswitch_hosts(found, nvswitch, driver, verdicts):
    assert [(r["check"], r["verdict"]) for r in fabric.checks(found, nvswitch, driver)] == verdicts


@pytest.mark.parametrize(
    "fixture, level, gpu_verdict",
    [("v4-r2-pass.json", 2, "PASS"), ("v4-r1-persistence-gpu1.json", 1, "PASS"), ("v4-r2-memory-gpu0.json", 2, "FAIL")],
)
def test_dcgm_records_join_gpulabs_own_in_one_verdict(snap, refs, fixture, level, gpu_verdict):
    driver = snap["probe"]["stack"]["driver"]
    snap.update(dcgm=gathered(fixture, level=level), fabricmanager={"version": driver, "service": "active"})
    for g in snap["probe"]["gpus"]:
        g["fabric"] = {"state": 3, "state_name": "completed", "status": 0, "clique_id": 32766}
    tools = {"current": {"dcgm": OPTIONAL, "nvswitch": True, "driver": "580.159.04"}}
    v = fleet.evaluate({"h200-01": snap}, [inventory_for(snap)], refs, stack_of(snap), level="standard", tools=tools)
    h = v.hosts["h200-01"]
    own = [f for f in findings(h) if "DCGM" not in f]
    assert own == []  # gpulab's own checks as before
    g0 = {c["check"]: c for c in h["gpus"]["0"]["checks"]}
    assert "matmul_bf16_tflops" in g0 and ("DCGM memory" in g0 or "DCGM software" in g0)  # side by side
    assert h["gpus"]["0"]["verdict"] == gpu_verdict
    # GPU 1 of the samples is not the snapshot's: its persistence-mode warning is the host's record
    assert h["verdict"] == ("WARN" if "persistence" in fixture else gpu_verdict)
    host = {c["check"]: c for c in h["checks"]}
    assert host["Fabric Manager version"]["verdict"] == "PASS"  # the running driver's (the probe's), not the profile's
    assert host["Fabric Manager service"]["verdict"] == "PASS"
    if gpu_verdict == "FAIL":
        assert h["reason"].startswith("GPU 0 DCGM memory: level 2 Hardware: DCGM_FR_VOLATILE_DBE_DETECTED: Detected 2")


@pytest.mark.parametrize(
    "fabric_info, unavailable, verdict",
    [
        ({"state": 3, "state_name": "completed", "status": 0, "clique_id": 4}, None, "PASS"),
        ({"state": 2, "state_name": "in progress", "status": 0, "clique_id": 0}, None, "FAIL"),
        ({"state": 1, "state_name": "not started", "status": 0, "clique_id": 0}, None, "FAIL"),
        ({"state": 3, "state_name": "completed", "status": 999, "clique_id": 0}, None, "FAIL"),
        (None, "Function Not Found", "WARN"),
        ({"state": 0, "state_name": "not supported", "status": 0, "clique_id": 0}, None, None),
    ],
)
def test_fabric_manager_is_judged_by_each_gpus_registration(snap, refs, fabric_info, unavailable, verdict):
    """An active nvidia-fabricmanager at the driver's version is not enough: each GPU of an NVSwitch host
    must have completed its fabric registration (NVML's GPU fabric info, nvidia-smi -q "Fabric")."""
    snap["fabricmanager"] = {"version": snap["probe"]["stack"]["driver"], "service": "active"}
    for g in snap["probe"]["gpus"]:
        g["fabric"] = fabric_info
        if unavailable:
            g.setdefault("unavailable", {})["fabric"] = unavailable
    tools = {"current": {"dcgm": None, "nvswitch": True, "driver": "580.159.04"}}
    h = fleet.evaluate({"h200-01": snap}, [inventory_for(snap)], refs, stack_of(snap), tools=tools).hosts["h200-01"]
    assert {c["check"]: c["verdict"] for c in h["checks"]}["Fabric Manager service"] == "PASS"
    rec = {c["check"]: c for c in h["gpus"]["0"]["checks"]}.get("Fabric registration")
    if verdict is None:
        assert rec is None  # before Hopper: no registration to judge
        return
    assert rec["verdict"] == verdict
    if verdict == "FAIL":
        assert h["verdict"] == "FAIL" and rec["action"]["kind"] == "fix_config"
    if verdict == "WARN":
        assert "Function Not Found" in rec["reason"]


def test_without_dcgm_the_host_warns_or_fails_as_its_profile_says(snap, refs):
    snap["dcgm"] = {"installed": False, "level": 2}
    for required, verdict in ((False, "WARN"), (True, "FAIL")):
        tools = {"current": {"dcgm": {"version": "4.5.2", "required": required}, "nvswitch": False, "driver": None}}
        h = fleet.evaluate({"h200-01": snap}, [inventory_for(snap)], refs, stack_of(snap), tools=tools).hosts["h200-01"]
        rec = next(c for c in h["checks"] if c["check"] == "DCGM diagnostic")
        assert rec["verdict"] == verdict and rec["reason"].startswith("not run: DCGM not installed")
        assert not any(c["check"].startswith("Fabric Manager") for c in h["checks"])  # no NVSwitches


def test_validate_fleet_passes_the_dcgm_level_and_checks_it_first(snap, tmp_path):
    from lab.hosts.inventory import Host

    host = Host(
        name="h200-01",
        address="192.0.2.1",
        port=22,
        user="root",
        connection="ssh",
        gpu_model="H200",
        gpu_count=snap["probe"]["gpu_count"],
        stack="current",
        groups=(),
        workdir="/var/lib/gpulab",
        python=None,
        ssh_key=None,
        known_hosts="/dev/null",
    )
    seen = []

    def gather(h, level, stamp, out):
        seen.append(level)
        return {**snap, "dcgm": {"installed": False, "level": 1}}

    v = fleet.validate_fleet([host], level="quick", out_dir=tmp_path / "out", gather=gather, echo=lambda s: None)
    assert seen == ["quick"] and any(c["check"] == "DCGM diagnostic" for c in v.hosts["h200-01"]["checks"])
    with pytest.raises(ConfigError, match="--dcgm-level: 'x'"):
        fleet.validate_fleet(
            [host], level="quick", out_dir=tmp_path / "out2", gather=gather, dcgm_level="x", echo=lambda s: None
        )
    assert seen == ["quick"] and not (tmp_path / "out2").exists()


def test_gather_on_a_host_with_and_without_dcgmi(tmp_path):
    """dcgm.gather and vendor.gather against this machine's shell, a stand-in dcgmi on the PATH."""
    from lab.hosts.remote import LocalRemote
    from lab.validate import vendor

    class Local(LocalRemote):
        def __init__(self, path):
            self.name, self.host, self._home, self.path = "local", None, None, path

        def _run(self, text, timeout):
            return super()._run(f"PATH={self.path}; {text}", timeout)

    assert dcgm.gather(Local("/nonexistent"), 2) == {"installed": False, "level": 2}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dcgmi").write_text(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then printf '\\ndcgmi  version: 4.5.2\\n\\n'; "
        f"else echo 'Warning: old config'; cat {FIXTURES / 'v4-r1-persistence-gpu1.json'}; exit 226; fi\n"
    )
    (bin_dir / "dcgmi").chmod(0o755)
    found = vendor.gather(Local(f"{bin_dir}:/usr/bin:/bin"), 2, tmp_path / "out")
    assert found["dcgm"]["installed"] and found["dcgm"]["version"] == "4.5.2" and found["dcgm"]["exit_code"] == 226
    assert found["dcgm"]["argv"] == ["dcgmi", "diag", "-r", "2", "-j"]
    assert found["fabricmanager"] == {"version": None, "service": "inactive"}
    saved = json.loads((tmp_path / "out" / "dcgm-diag.json").read_text())  # the document, without the warning
    assert saved == json.loads((FIXTURES / "v4-r1-persistence-gpu1.json").read_text())
    _, gpus = dcgm.checks(found["dcgm"], [0, 1], None)
    assert gpus["1"][0]["verdict"] == "WARN" and gpus["0"][0]["verdict"] == "PASS"


def test_the_probe_reads_each_gpus_fabric_registration_from_nvml():
    import pynvml

    from runner.probe_gpu import fabric_facts

    class Nvml:
        c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t

        def nvmlDeviceGetGpuFabricInfo(self, handle, ref):
            ref._obj.state, ref._obj.status, ref._obj.cliqueId = 2, 0, 7

    unavailable: dict = {}
    assert fabric_facts(Nvml(), None, unavailable) == {
        "state": 2,
        "state_name": "in progress",
        "status": 0,
        "clique_id": 7,
    }
    assert fabric_facts(object(), None, unavailable) is None and unavailable == {"fabric": "not in this nvidia-ml-py"}
