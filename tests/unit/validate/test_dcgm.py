"""DCGM's diagnostic and Fabric Manager in `invoke validate`, from hand-written outputs in
DCGM's JSON form (fixtures/dcgm/README.md) and plain data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snapshots import findings, inventory_for, stack_of

from lab.core.errors import ConfigError
from lab.validate import dcgm, fabric, fleet

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dcgm"
REQUIRED = {"version": "4.5.2", "required": True}
OPTIONAL = {"version": "4.5.2", "required": False}


def gathered(name: str, level: int = 2, code: int = 0, version: str = "4.5.2") -> dict:
    return {"installed": True, "version": version, "level": level, "exit_code": code,
            "stdout": (FIXTURES / name).read_text(), "stderr": ""}


def by_name(records: list[dict]) -> dict:
    return {r["check"]: r for r in records}


def test_a_passing_diagnostic_gives_one_pass_record_per_test_on_its_gpu():
    host, gpus = dcgm.checks(gathered("r2-pass.json"), [0], OPTIONAL)
    assert by_name(host)["DCGM version"]["verdict"] == "PASS" and len(host) == 1
    recs = by_name(gpus["0"])
    assert list(recs) == ["DCGM software", "DCGM pcie", "DCGM memory"]
    assert {r["verdict"] for r in recs.values()} == {"PASS"}
    assert recs["DCGM memory"]["reason"] == "level 2 Hardware: passed (Allocated 147334834176 bytes (97.3%))"
    assert recs["DCGM memory"]["source"] == "dcgm" and recs["DCGM memory"]["dcgm_code"] is None


def test_a_warning_carries_its_dcgm_code_and_message():
    _, gpus = dcgm.checks(gathered("r2-warn.json", code=226), [0], OPTIONAL)
    pcie = by_name(gpus["0"])["DCGM pcie"]
    assert pcie["verdict"] == "WARN" and pcie["measured"] == "Warn"
    assert pcie["dcgm_code"] == "DCGM_FR_PCIE_REPLAY_VIOLATION"
    assert pcie["reason"].startswith("level 2 Integration: DCGM_FR_PCIE_REPLAY_VIOLATION: GPU 0 had 112 PCIe replays")
    assert pcie["dcgm_errors"] == [{"code": 104, "name": "DCGM_FR_PCIE_REPLAY_VIOLATION",
                                    "message": pcie["dcgm_errors"][0]["message"],
                                    "severity": "DCGM_ERROR_MONITOR", "category": "DCGM_FR_EC_HARDWARE_PCIE"}]


def test_a_failure_fails_its_gpu_and_other_entities_are_the_hosts():
    host, gpus = dcgm.checks(gathered("r3-fail.json", level=3, code=205), [0], OPTIONAL)
    recs = by_name(gpus["0"])
    assert recs["DCGM memory"]["verdict"] == "FAIL"
    assert recs["DCGM memory"]["dcgm_code"] == "DCGM_FR_FAULTY_MEMORY"
    assert recs["DCGM memory"]["dcgm_errors"][0]["severity"] == "DCGM_ERROR_ISOLATE"
    assert recs["DCGM targeted_power"]["verdict"] == "PASS"
    assert recs["DCGM targeted_power"]["reason"] == "level 3 Stress: skipped by DCGM"
    assert by_name(host)["DCGM nvswitch_health (Switch 0)"]["verdict"] == "PASS"


def test_dcgm_3_form_after_warning_lines():
    host, gpus = dcgm.checks(gathered("v3-fail.txt", level=1, version="3.3.9"), [0, 1], {"version": "3.3.9"})
    assert by_name(host)["DCGM Denylist"]["verdict"] == "PASS"            # gpu_ids "0,1": the host's
    page = by_name(gpus["1"])["DCGM Page Retirement/Row Remap"]
    assert page["verdict"] == "FAIL" and page["dcgm_code"] == "DCGM_FR_DBE_PENDING_PAGE_RETIREMENTS"
    assert page["dcgm_errors"][0]["severity"] == "DCGM_ERROR_RESET"
    # a GPU the probe does not list: the host's record, naming it
    host, gpus = dcgm.checks(gathered("v3-fail.txt", level=1), [0], None)
    assert "1" not in gpus and by_name(host)["DCGM Page Retirement/Row Remap (GPU 1)"]["verdict"] == "FAIL"


def test_a_runtime_error_or_no_document_fails_the_host():
    host, gpus = dcgm.checks(gathered("runtime-error.json", code=226), [0], None)
    assert gpus == {} and [(r["check"], r["verdict"]) for r in host] == [("DCGM diagnostic", "FAIL")]
    assert "GPU 0 is in use by another process" in host[0]["reason"]
    no_engine = {"installed": True, "version": "4.5.2", "level": 1, "exit_code": 235, "stderr": "",
                 "stdout": "Error: unable to establish a connection to the specified host: localhost\n"
                           "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"}
    host, _ = dcgm.checks(no_engine, [0], None)
    assert host[0]["verdict"] == "FAIL" and host[0]["reason"] == (
        "level 1: dcgmi exited 235, no DCGM diagnostic document in dcgmi's output: "
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")
    host, _ = dcgm.checks({**no_engine, "stdout": '{"DCGM Diagnostic": {"test_categories": [', "exit_code": 0}, [0], None)
    assert host[0]["verdict"] == "FAIL" and "dcgmi exited 0" in host[0]["reason"]
    host, _ = dcgm.checks({**no_engine, "stdout": '{"a": ' * 100000 + "1" + "}" * 100000}, [0], None)
    assert host[0]["verdict"] == "FAIL" and "nested deeper than 64 levels" in host[0]["reason"]
    host, _ = dcgm.checks({**no_engine, "stdout": '{"DCGM Diagnostic": {"test_categories": []}}'}, [0], None)
    assert host[0]["reason"] == "level 1: no test results in dcgmi's output"
    host, _ = dcgm.checks({"installed": True, "version": "4.5.2", "level": 3,
                           "error": "dcgmi diag -r 3 did not finish within 10800 s"}, [0], None)
    assert host[0]["verdict"] == "FAIL" and "did not finish" in host[0]["reason"]


def test_without_dcgm_one_record_warn_or_fail_when_required():
    for expect, verdict in ((None, "WARN"), (OPTIONAL, "WARN"), (REQUIRED, "FAIL")):
        host, gpus = dcgm.checks({"installed": False, "level": 2}, [0], expect)
        assert gpus == {} and [(r["check"], r["verdict"]) for r in host] == [("DCGM diagnostic", verdict)]
        assert host[0]["reason"].startswith("not run: DCGM not installed")
    assert dcgm.checks(None, [0], REQUIRED) == ([], {})   # not gathered (a baseline, an older snapshot)


def test_a_dcgm_of_another_version_than_the_profiles_fails():
    host, _ = dcgm.checks(gathered("r2-pass.json", version="4.4.1"), [0], OPTIONAL)
    assert by_name(host)["DCGM version"]["verdict"] == "FAIL"
    assert by_name(host)["DCGM version"]["reason"] == "DCGM is 4.4.1, the profile says 4.5.2"


def test_unknown_statuses_and_codes_are_named_not_dropped():
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "results": [
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Exploded"},
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail",
         "warnings": [{"warning": "new", "error_id": 999, "error_category": 99, "error_severity": 9}]},
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 2, "status": "Pass", "info": "not a list",
         "warnings": [{"warning": ["odd"], "error_id": "52", "error_category": [1], "error_severity": {"a": 1}}]}]}]}]}}
    _, gpus = dcgm.checks({"installed": True, "level": 2, "stdout": json.dumps(doc)}, [0, 1, 2], None)
    assert gpus["0"][0]["verdict"] == "FAIL" and "'Exploded' is not one DCGM reports" in gpus["0"][0]["reason"]
    assert gpus["1"][0]["dcgm_code"] == "DCGM error 999" and gpus["1"][0]["dcgm_errors"][0]["severity"] is None
    odd = gpus["2"][0]                       # ill-typed fields: kept as text or left out, never a crash
    assert odd["verdict"] == "PASS" and odd["dcgm_errors"][0]["code"] is None and odd["dcgm_errors"][0]["severity"] is None


def test_levels_follow_validate_and_can_be_configured():
    assert [dcgm.level_for(lv) for lv in ("quick", "standard", "burn-in")] == [1, 2, 3]
    assert dcgm.level_for("quick", {"quick": 2}) == 2 and dcgm.level_for("burn-in", None, "4") == 4
    assert dcgm.level_for("standard", None, 0) == 0          # no diagnostic at all
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
    spec.write_text(json.dumps({"gpus": 1, "results": {"memory": {"0": {
        "status": "Fail", "error_id": 52, "error_category": 10, "error_severity": 2, "warning": "bad cell"}}}}))
    res = subprocess.run([sys.executable, str(script), "diag", "-r", "2", "-j"], capture_output=True, text=True,
                         env={"GPULAB_FAKE_DCGM": str(spec), "PATH": "/usr/bin:/bin"})
    _, gpus = dcgm.checks({"installed": True, "level": 2, "exit_code": res.returncode, "stdout": res.stdout}, [0], None)
    assert [(r["check"], r["verdict"]) for r in gpus["0"]] == [
        ("DCGM software", "PASS"), ("DCGM pcie", "PASS"), ("DCGM memory", "FAIL")]


@pytest.mark.parametrize("found, nvswitch, driver, verdicts", [
    ({"version": "580.159.04", "service": "active"}, True, "580.159.04",
     [("Fabric Manager version", "PASS"), ("Fabric Manager service", "PASS")]),
    ({"version": "580.126.20", "service": "active"}, True, "580.159.04",
     [("Fabric Manager version", "FAIL"), ("Fabric Manager service", "PASS")]),
    ({"version": "580.159.04", "service": "failed"}, True, "580.159.04",
     [("Fabric Manager version", "PASS"), ("Fabric Manager service", "FAIL")]),
    ({"version": None, "service": "inactive"}, True, "580.159.04", [("Fabric Manager", "FAIL")]),
    ({"version": "580.159.04", "service": "active"}, True, None, [("Fabric Manager version", "FAIL"),
                                                                  ("Fabric Manager service", "PASS")]),
    ({"version": None, "service": "inactive"}, False, "580.159.04", []),   # no NVSwitches: nothing to judge
])
def test_fabric_manager_on_nvswitch_hosts(found, nvswitch, driver, verdicts):
    assert [(r["check"], r["verdict"]) for r in fabric.checks(found, nvswitch, driver)] == verdicts


@pytest.mark.parametrize("fixture, level, gpu_verdict", [
    ("r2-pass.json", 2, "PASS"), ("r2-warn.json", 2, "WARN"), ("r3-fail.json", 3, "FAIL")])
def test_dcgm_records_join_gpulabs_own_in_one_verdict(snap, refs, fixture, level, gpu_verdict):
    driver = snap["probe"]["stack"]["driver"]
    snap.update(dcgm=gathered(fixture, level=level),
                fabricmanager={"version": driver, "service": "active"})
    tools = {"current": {"dcgm": OPTIONAL, "nvswitch": True, "driver": "580.159.04"}}
    v = fleet.evaluate({"h200-01": snap}, [inventory_for(snap)], refs, stack_of(snap), level="standard", tools=tools)
    h = v.hosts["h200-01"]
    own = [f for f in findings(h) if "DCGM" not in f]
    assert own == []                                              # gpulab's own checks as before
    g0 = {c["check"]: c for c in h["gpus"]["0"]["checks"]}
    assert "matmul_bf16_tflops" in g0 and "DCGM memory" in g0    # side by side on the GPU
    assert h["gpus"]["0"]["verdict"] == gpu_verdict and h["verdict"] == gpu_verdict
    host = {c["check"]: c for c in h["checks"]}
    assert host["Fabric Manager version"]["verdict"] == "PASS"   # the running driver's (the probe's), not the profile's
    assert host["Fabric Manager service"]["verdict"] == "PASS"
    if gpu_verdict == "FAIL":
        assert h["reason"].startswith("GPU 0 DCGM memory: level 3 Hardware: DCGM_FR_FAULTY_MEMORY: A memory mismatch")


def test_without_dcgm_the_host_warns_or_fails_as_its_profile_says(snap, refs):
    snap["dcgm"] = {"installed": False, "level": 2}
    for required, verdict in ((False, "WARN"), (True, "FAIL")):
        tools = {"current": {"dcgm": {"version": "4.5.2", "required": required}, "nvswitch": False, "driver": None}}
        h = fleet.evaluate({"h200-01": snap}, [inventory_for(snap)], refs, stack_of(snap), tools=tools).hosts["h200-01"]
        rec = next(c for c in h["checks"] if c["check"] == "DCGM diagnostic")
        assert rec["verdict"] == verdict and rec["reason"].startswith("not run: DCGM not installed")
        assert not any(c["check"].startswith("Fabric Manager") for c in h["checks"])   # no NVSwitches


def test_validate_fleet_passes_the_dcgm_level_and_checks_it_first(snap, tmp_path):
    from lab.hosts.inventory import Host

    host = Host(name="h200-01", address="192.0.2.1", port=22, user="root", connection="ssh", gpu_model="H200",
                gpu_count=snap["probe"]["gpu_count"], stack="current", groups=(), workdir="/var/lib/gpulab", python=None,
                ssh_key=None, known_hosts="/dev/null")
    seen = []

    def gather(h, level, stamp, out):
        seen.append(level)
        return {**snap, "dcgm": {"installed": False, "level": 1}}

    v = fleet.validate_fleet([host], level="quick", out_dir=tmp_path / "out", gather=gather, echo=lambda s: None)
    assert seen == ["quick"] and any(c["check"] == "DCGM diagnostic" for c in v.hosts["h200-01"]["checks"])
    with pytest.raises(ConfigError, match="--dcgm-level: 'x'"):
        fleet.validate_fleet([host], level="quick", out_dir=tmp_path / "out2", gather=gather, dcgm_level="x",
                             echo=lambda s: None)
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
    (bin_dir / "dcgmi").write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then printf '\\ndcgmi  version: 4.5.2\\n\\n'; "
                                   f"else echo 'Warning: old config'; cat {FIXTURES / 'r2-warn.json'}; exit 226; fi\n")
    (bin_dir / "dcgmi").chmod(0o755)
    found = vendor.gather(Local(f"{bin_dir}:/usr/bin:/bin"), 2, tmp_path / "out")
    assert found["dcgm"]["installed"] and found["dcgm"]["version"] == "4.5.2" and found["dcgm"]["exit_code"] == 226
    assert found["dcgm"]["argv"] == ["dcgmi", "diag", "-r", "2", "-j"]
    assert found["fabricmanager"] == {"version": None, "service": "inactive"}
    saved = json.loads((tmp_path / "out" / "dcgm-diag.json").read_text())     # the document, without the warning
    assert saved == json.loads((FIXTURES / "r2-warn.json").read_text())
    _, gpus = dcgm.checks(found["dcgm"], [0], None)
    assert gpus["0"][1]["verdict"] == "WARN"
