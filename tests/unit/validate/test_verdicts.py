"""The checks of lab.validate.fleet on a healthy H200 snapshot and on variants of it."""

import copy
import json

import pytest
from snapshots import checks_of, findings, inventory_for, run, stack_of

from lab.validate import fleet
from lab.core.errors import CheckFailed, ConfigError


def test_healthy_snapshot_passes(snap, refs):
    v = run({"h200-01": snap}, refs)
    h = v.hosts["h200-01"]
    assert v.ok and findings(h) == []
    if h["verdict"] == "PASS":
        assert h["reason"] == "all checks passed"
    assert len(h["gpus"]) == snap["probe"]["gpu_count"]
    g0 = checks_of(v, gpu=0)
    # each check carries measured value, expected range and reason
    for name in (
        "model",
        "PCIe link",
        "ECC uncorrected",
        "XID events",
        "idle temperature",
        "load temperature",
        "throttling",
        "power vs limit",
        "matmul_bf16_tflops",
    ):
        c = g0[name]
        assert c["verdict"] in ("PASS", "WARN") and c["expected"] and c["reason"]  # WARN: see findings()
    assert g0["matmul_bf16_tflops"]["measured"] == snap["gpus"]["0"]["solo"]["matmul_bf16_tflops"]
    if g0["PCIe link"]["verdict"] == "PASS":
        assert "Gen5 x16" in g0["PCIe link"]["reason"]


def test_idle_link_generation_is_power_saving(snap, refs):
    g = snap["probe"]["gpus"][0]
    g["pcie"].update(gen_current=1, gen_max=5, width_current=16, width_max=16)
    snap["gpus"]["0"]["load"].update(pcie_gen_max=5, pcie_width_min=16)
    c = checks_of(run({"h200-01": snap}, refs), gpu=0)["PCIe link"]
    assert c["verdict"] == "PASS" and c["reason"] == "Gen5 x16"
    v = run({"h200-01": snap["probe"]}, refs)  # no load measurement: Gen1 now, Gen5 possible
    c = checks_of(v, gpu=0)["PCIe link"]
    assert c["verdict"] == "PASS" and c["reason"] == "Gen5 x16 (Gen1 at idle: power saving)"


def test_downgraded_link_width_fails(snap, refs):
    snap["probe"]["gpus"][0]["pcie"]["width_current"] = 8
    snap["gpus"]["0"]["load"]["pcie_width_min"] = 8
    v = run({"h200-01": snap}, refs)
    c = checks_of(v, gpu=0)["PCIe link"]
    assert c["verdict"] == "FAIL" and "link trained down to x8" in c["reason"] and "Gen5 x16" in c["expected"]
    assert v.hosts["h200-01"]["verdict"] == "FAIL" and not v.ok
    assert v.hosts["h200-01"]["reason"].startswith("GPU 0 PCIe link: link trained down to x8")


def test_link_generation_down_under_load_fails(snap, refs):
    snap["gpus"]["0"]["load"]["pcie_gen_max"] = 4
    c = checks_of(run({"h200-01": snap}, refs), gpu=0)["PCIe link"]
    assert c["verdict"] == "FAIL" and "Gen4 under load" in c["reason"]


def test_link_below_the_model_minimum_without_inventory_pcie(snap, refs):
    snap["probe"]["gpus"][0]["pcie"]["gen_max"] = 4
    for g in snap["gpus"].values():
        g["load"]["pcie_gen_max"] = None
    host = inventory_for(snap, pcie=None)
    c = checks_of(run({"h200-01": snap}, refs, hosts=[host]), gpu=0)["PCIe link"]
    assert c["verdict"] == "FAIL" and "only to Gen4" in c["reason"] and "H200 minimum" in c["expected"]


def test_ecc_errors(snap, refs):
    snap["probe"]["gpus"][0]["ecc"]["uncorrected_volatile"] = 2
    snap["probe"]["gpus"][0]["ecc"]["uncorrected_aggregate"] = 2
    last = len(snap["probe"]["gpus"]) - 1
    if last:
        snap["probe"]["gpus"][last]["ecc"]["uncorrected_aggregate"] = 1
    v = run({"h200-01": snap}, refs)
    c = checks_of(v, gpu=0)["ECC uncorrected"]
    assert c["verdict"] == "FAIL" and c["measured"] == {"volatile": 2, "aggregate": 2}
    assert "2 uncorrected ECC error(s) since the driver loaded" in c["reason"]
    if last:
        assert checks_of(v, gpu=last)["ECC uncorrected"]["verdict"] == "WARN"
    assert v.hosts["h200-01"]["verdict"] == "FAIL"


def test_row_remap_pending_and_retired_pages(snap, refs):
    snap["probe"]["gpus"][0]["row_remap"].update(uncorrectable=1, pending=True)
    c = checks_of(run({"h200-01": snap}, refs), gpu=0)["row remapping"]
    assert c["verdict"] == "FAIL" and "reset the GPU" in c["reason"]
    snap["probe"]["gpus"][0]["row_remap"].update(pending=False)
    assert checks_of(run({"h200-01": snap}, refs), gpu=0)["row remapping"]["verdict"] == "WARN"
    # a pre-Ampere GPU reports retired pages instead
    snap["probe"]["gpus"][0]["retired_pages"] = {"single_bit": 3, "double_bit": 0, "pending": False}
    c = checks_of(run({"h200-01": snap}, refs), gpu=0)["retired pages"]
    assert c["verdict"] == "WARN" and "3 retired page(s)" in c["reason"]
    snap["probe"]["gpus"][0]["retired_pages"]["pending"] = True
    assert checks_of(run({"h200-01": snap}, refs), gpu=0)["retired pages"]["verdict"] == "FAIL"


def test_xid_fallen_off_the_bus_fails(snap, refs):
    snap["xid"].update(source="dmesg", error=None)
    g0 = snap["probe"]["gpus"][0]
    pci = g0["pci_bus_id"].lower()[4:-2]  # 00000000:1B:00.0 -> 0000:1b:00
    snap["xid"]["events"] = [
        {
            "xid": 79,
            "pci": pci,
            "gpu": 0,
            "uptime_s": 5123.4,
            "during_burnin": True,
            "text": "pid=2301, name=python, GPU has fallen off the bus.",
        }
    ]
    v = run({"h200-01": snap}, refs)
    c = checks_of(v, gpu=0)["XID events"]
    assert c["verdict"] == "FAIL" and c["measured"] == [79]
    assert "XID 79 (GPU has fallen off the bus) x1 since boot; 1 during the burn-in" in c["reason"]
    if len(snap["probe"]["gpus"]) > 1:
        assert checks_of(v, gpu=1)["XID events"]["verdict"] == "PASS"


def test_xid_application_error_warns_and_unknown_device_is_host_level(snap, refs):
    snap["xid"].update(source="dmesg", error=None)
    snap["xid"]["events"] = [
        {"xid": 13, "pci": "x", "gpu": 0, "uptime_s": 1.0, "text": "Graphics SM Warp Exception"},
        {"xid": 48, "pci": "0000:ff:00", "gpu": None, "uptime_s": 2.0, "text": "DBE"},
    ]
    v = run({"h200-01": snap}, refs)
    assert checks_of(v, gpu=0)["XID events"]["verdict"] == "WARN"
    host = checks_of(v)["XID events (other devices)"]
    assert host["verdict"] == "FAIL" and "XID 48 (double-bit ECC error)" in host["reason"]


def test_an_xid_of_a_gpu_index_the_host_does_not_judge_is_host_level_never_dropped(snap, refs):
    snap["xid"].update(source="dmesg", error=None)
    n = len(snap["probe"]["gpus"])
    snap["xid"]["events"] = [{"xid": 79, "pci": "0000:ff:00", "gpu": n, "uptime_s": 2.0, "text": "off the bus"}]
    host = checks_of(run({"h200-01": snap}, refs))["XID events (other devices)"]
    assert host["verdict"] == "FAIL" and host["measured"] == [79]
    # a GPU the probe could not read has no XID check of its own: its XIDs are the host's
    snap["xid"]["events"][0]["gpu"] = 0
    snap["probe"]["gpus"][0] = {"index": 0, "error": "NVML: Unknown Error"}
    host = checks_of(run({"h200-01": snap}, refs))["XID events (other devices)"]
    assert host["verdict"] == "FAIL" and "XID 79 (GPU has fallen off the bus)" in host["reason"]


def test_unreadable_kernel_log_fails_the_host_not_its_gpus(snap, refs):
    snap["xid"] = {
        "source": None,
        "error": "journalctl not found; dmesg: read kernel buffer failed: Operation not permitted",
        "events": [],
    }
    v = run({"h200-01": snap}, refs)
    c = checks_of(v)["kernel log"]
    assert c["verdict"] == "FAIL" and "Operation not permitted" in c["reason"]
    assert "XID events" not in checks_of(v, gpu=0)  # not checked: no verdict of the GPU's own


def test_missing_gpu_fails_the_host(snap, refs):
    # the host should have one GPU more than it reports
    n = snap["probe"]["gpu_count"]
    host = inventory_for(snap, gpu_count=n + 1)
    v = run({"h200-01": snap}, refs, hosts=[host])
    c = checks_of(v)["GPU count"]
    assert c["verdict"] == "FAIL" and c["measured"] == n and c["expected"] == str(n + 1)
    assert f"{n} GPU(s) found, the inventory says {n + 1}: 1 missing" == c["reason"]
    assert v.hosts["h200-01"]["verdict"] == "FAIL"
    # a host whose only GPUs are gone: no NVIDIA GPU at all
    snap["probe"]["gpus"] = []
    snap["probe"]["gpu_count"] = 0
    snap["gpus"] = {}
    c = checks_of(run({"h200-01": snap}, refs, hosts=[host]))["GPU present"]
    assert c["verdict"] == "FAIL" and c["reason"].startswith("no NVIDIA GPU")


def test_throttling_gpu(snap, refs):
    load = snap["gpus"]["0"]["load"]
    load["throttle_reasons"] = {"sw_power_cap": 30, "hw_thermal_slowdown": load["samples"] // 2}
    load["temp_c_max"] = 87
    load["sm_clock_mhz_median"] = 900
    g = checks_of(run({"h200-01": snap}, refs), gpu=0)
    assert (
        g["throttling"]["verdict"] == "FAIL"
        and "hw_thermal_slowdown active in 50% of load samples" in g["throttling"]["reason"]
    )
    assert g["load temperature"]["verdict"] == "WARN"
    assert g["load SM clock"]["verdict"] == "WARN"
    # a brief slowdown is a WARN, the power cap alone is normal
    load["throttle_reasons"] = {"sw_power_cap": 30, "sw_thermal_slowdown": 1}
    assert checks_of(run({"h200-01": snap}, refs), gpu=0)["throttling"]["verdict"] == "WARN"
    load["throttle_reasons"] = {"sw_power_cap": load["samples"]}
    t = checks_of(run({"h200-01": snap}, refs), gpu=0)["throttling"]
    assert t["verdict"] == "PASS" and "power cap" in t["reason"]


def test_hot_idle_gpu_and_lowered_power_limit(snap, refs):
    snap["gpus"]["0"]["idle"]["temp_c_max"] = 72
    snap["gpus"]["0"]["load"]["power_w_max"] = 690.0
    snap["probe"]["gpus"][0]["power"]["limit_w"] = 500.0
    g = checks_of(run({"h200-01": snap}, refs), gpu=0)
    assert g["idle temperature"]["verdict"] == "FAIL"
    assert g["power limit"]["verdict"] == "WARN" and "lowered to 500" in g["power limit"]["reason"]
    # drawing more than the limit allows
    assert g["power vs limit"]["verdict"] == "FAIL"


def _fleet(snap, n_hosts=4):
    """Several copies of the host, so that every model has enough GPUs for a fleet median."""
    docs = {}
    for i in range(n_hosts):
        d = copy.deepcopy(snap)
        d["host"] = d["probe"]["host"]["hostname"] = f"h200-{i + 1:02d}"
        docs[d["host"]] = d
    return docs


def test_slow_outlier_against_the_fleet_median(snap, refs):
    docs = _fleet(snap)
    slow = docs["h200-03"]["gpus"]["0"]["solo"]
    slow["matmul_bf16_tflops"] *= 0.80  # has a reference, and is far below its peers
    slow["resnet50_images_per_s"] *= 0.85  # no reference for this metric: only the fleet can tell
    slow["h2d_bandwidth_gbs"] *= 0.93  # a little slow: WARN
    v = run(docs, refs)
    c = checks_of(v, "h200-03", 0)
    assert c["resnet50_images_per_s vs fleet"]["verdict"] == "FAIL"
    assert c["resnet50_images_per_s vs fleet"]["reason"].startswith("slow outlier: 85% of the median")
    assert "resnet50_images_per_s" not in c  # no reference for it
    assert c["matmul_bf16_tflops vs fleet"]["verdict"] == "FAIL"
    assert c["h2d_bandwidth_gbs vs fleet"]["verdict"] == "WARN"
    assert v.hosts["h200-03"]["verdict"] == "FAIL"
    for other in ("h200-01", "h200-02", "h200-04"):
        assert findings(v.hosts[other]) == []
    assert v.data["fleet"]["H200"]["resnet50_images_per_s"]["n"] == 4 * len(snap["gpus"])


def test_below_reference_fails(snap, refs):
    ref = refs["models"]["H200"]["metrics"]["memory_bandwidth_gbs"]
    floor = ref["value"] * (1 - ref["lower"])
    snap["gpus"]["0"]["solo"]["memory_bandwidth_gbs"] = 2000.0
    c = checks_of(run({"h200-01": snap}, refs), gpu=0)["memory_bandwidth_gbs"]
    assert c["verdict"] == "FAIL" and f"{floor:,.0f}" in c["expected"]
    assert f"2,000 GB/s is below {floor:,.0f}" in c["reason"] and ref["source"].split(":")[0] in c["reason"]


def test_failed_burnin_test_fails_the_gpu(snap, refs):
    snap["outcome"] = "failed"
    snap["results"].append(
        {
            "test": "matmul",
            "dtype": "bf16",
            "gpu": 0,
            "phase": "solo",
            "ok": False,
            "value": None,
            "error": "wrong results: max relative error 0.5 > 0.03 for bf16",
            "start": 1,
            "end": 2,
        }
    )
    c = checks_of(run({"h200-01": snap}, refs), gpu=0)["burn-in tests"]
    assert c["verdict"] == "FAIL" and "wrong results" in c["reason"]


@pytest.mark.parametrize("outcome", ["completed", "failed"])
def test_a_failed_test_of_no_gpu_the_host_judges_fails_the_host_whatever_the_outcome(snap, refs, outcome):
    """A document that says "completed" beside a failed test, or a test of a GPU index past the last: the
    failure is the host's, never dropped."""
    snap["outcome"] = outcome
    n = len(snap["probe"]["gpus"])
    for gpu, error in ((None, "NCCL error: unhandled system error"), (n, "wrong results")):
        snap["results"].append({"test": "nccl", "gpu": gpu, "phase": "host", "ok": False, "error": error})
    c = checks_of(run({"h200-01": snap}, refs))["burn-in tests"]
    assert c["verdict"] == "FAIL" and c["measured"] == 2
    assert c["reason"] == f"nccl (host): NCCL error: unhandled system error; GPU {n} nccl (host): wrong results"


def test_a_model_has_one_name_in_verdicts_and_reports(snap, refs, tmp_path):
    """'Tesla V100-PCIE-16GB' is V100-PCIe in a verdict: its references, the inventory's model check,
    a baseline (the report side: tests/unit/report/test_report_rundir.py)."""
    for g in snap["probe"]["gpus"]:
        g["name"] = "Tesla V100-PCIE-16GB"
    v = run({"h200-01": snap}, refs, hosts=[inventory_for(snap, gpu_model="V100-PCIE-16GB")])
    assert {g["model"] for g in v.hosts["h200-01"]["gpus"].values()} == {"V100-PCIe"}
    assert checks_of(v, gpu=0)["model"]["verdict"] == "PASS"
    assert "V100-PCIe" in fleet.build_references({"h200-01": snap}, refs)["models"]


def test_wrong_model_and_stack_drift(snap, refs):
    host = inventory_for(snap, gpu_model="V100-PCIE-16GB")
    stacks = stack_of(snap)
    stacks["current"]["driver"] = "570.86.15"
    v = run({"h200-01": snap}, refs, hosts=[host], stacks=stacks)
    assert checks_of(v, gpu=0)["model"]["verdict"] == "FAIL"
    d = checks_of(v)["stack driver"]
    assert d["verdict"] == "FAIL" and "the profile says 570.86.15" in d["reason"]
    # no expected versions: not validated, said so
    v = run({"h200-01": snap}, refs, stacks={"other": {}})
    assert checks_of(v)["stack"]["verdict"] == "WARN"


def test_driver_older_than_toolkit(snap, refs):
    snap["probe"]["stack"]["cuda_driver"] = "12.4"
    c = checks_of(run({"h200-01": snap}, refs))["driver supports CUDA"]
    assert c["verdict"] == "FAIL" and "supports CUDA up to 12.4" in c["reason"]


def test_unreachable_and_gpu_less_hosts_fail_without_crash(snap, refs):
    from lab.core.errors import HostError

    no_gpu = {
        "schema": 1,
        "kind": "gpulab-burnin",
        "level": "quick",
        "outcome": "no_gpu",
        "probe": {
            "schema": 1,
            "gpus": [],
            "gpu_count": 0,
            "host": {"hostname": "lab-a"},
            "nvidia": "no NVIDIA driver/GPU found: NVML could not start: NVML Shared Library Not Found",
        },
        "gpus": {},
        "results": [],
        "xid": {"source": "dmesg", "error": None, "events": []},
    }
    docs = {
        "h200-01": snap,
        "lab-a": no_gpu,
        "lab-b": HostError("lab-b (10.213.7.12): unreachable: Connection refused"),
        "lab-c": ValueError("bad answer"),
    }
    hosts = [
        inventory_for(snap, "h200-01"),
        {"name": "lab-a", "gpu_model": "T4", "gpu_count": 4},
        {"name": "lab-b", "gpu_model": "T4", "gpu_count": 4},
        {"name": "lab-c"},
        {"name": "lab-d"},
    ]
    v = run(docs, refs, hosts=hosts)
    assert findings(v.hosts["h200-01"]) == []
    a = v.hosts["lab-a"]
    assert a["verdict"] == "FAIL"
    assert a["reason"] == "GPU present: no NVIDIA GPU: NVML could not start: NVML Shared Library Not Found"
    assert v.hosts["lab-b"]["reason"] == "reachable: lab-b (10.213.7.12): unreachable: Connection refused"
    assert v.hosts["lab-c"]["verdict"] == "FAIL"
    assert v.hosts["lab-d"]["reason"] == "reachable: no result gathered from this host"
    assert not v.ok and v.data["summary"]["FAIL"] == 4 and v.data["summary"]["hosts"] == 5
    json.loads(v.to_json())


def test_probe_only_snapshot_gets_health_checks(snap, refs):
    probe = snap["probe"]
    v = run({"h200-01": probe}, refs)
    g = checks_of(v, gpu=0)
    assert findings(v.hosts["h200-01"]) == []
    assert "idle temperature" in g and "load temperature" not in g and "matmul_bf16_tflops" not in g


def test_html_page(snap, refs):
    snap["probe"]["gpus"][0]["name"] = "NVIDIA H200 <script>"
    v = run({"h200-01": snap}, refs)
    page = fleet.render_html(v)
    assert page.startswith("<!DOCTYPE html>") and "h200-01" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "http://" not in page and "https://" not in page  # offline: no external assets
    assert 'class="badge FAIL"' in page  # the renamed GPU no longer matches its inventory model
    # the failing check's action, in its row and in the host's list of actions
    assert "<h3>Actions</h3>" in page and "GPU 0 model: <b>fix_config</b>: The GPU is not the model" in page


def test_baseline_from_good_hosts(snap, refs, tmp_path):
    docs = _fleet(snap, 2)
    out = fleet.build_references(docs, refs)
    m = out["models"]["H200"]["metrics"]
    vals = [g["solo"]["matmul_bf16_tflops"] for d in docs.values() for g in d["gpus"].values()]
    import statistics

    assert m["matmul_bf16_tflops"]["value"] == round(statistics.median(vals), 3)
    assert m["matmul_bf16_tflops"]["source"].startswith("baseline ")
    assert "resnet50_images_per_s" in m and m["resnet50_images_per_s"]["unit"] == "images/s"
    assert out["models"]["T4"] == refs["models"]["T4"]  # untouched models are kept
    # the file written loads back through the schema and the healthy host passes against it
    path = tmp_path / "refs.yml"
    path.write_text(fleet.dump_references(out))
    again = fleet.load_references(path)
    assert findings(run({"h200-01": snap}, again).hosts["h200-01"]) == []
    slow = copy.deepcopy(snap)
    slow["gpus"]["0"]["solo"]["resnet50_images_per_s"] *= 0.8
    assert checks_of(run({"h200-01": slow}, again), gpu=0)["resnet50_images_per_s"]["verdict"] == "FAIL"


def test_baseline_refuses_bad_hosts(snap, refs):
    bad = copy.deepcopy(snap)
    bad["probe"]["gpus"][0]["ecc"]["uncorrected_volatile"] = 1
    with pytest.raises(CheckFailed, match="not healthy: h200-02: GPU 0 ECC uncorrected"):
        fleet.build_references({"h200-01": snap, "h200-02": bad}, refs)
    with pytest.raises(CheckFailed, match="h200-02: no NVIDIA GPU"):
        fleet.build_references({"h200-01": snap, "h200-02": {"gpus": [], "nvidia": "x"}}, refs)
    quick = copy.deepcopy(snap)
    quick["level"] = "quick"
    with pytest.raises(CheckFailed, match="no burn-in measurements"):
        fleet.build_references({"h200-01": quick}, refs)


def test_baseline_refuses_a_document_with_unreadable_values_and_skips_figures_not_measured(snap, refs):
    hostile = copy.deepcopy(snap)
    hostile["gpus"]["0"]["solo"]["matmul_bf16_tflops"] = 1e308
    got = fleet.read_burnin(json.dumps(hostile), "h200-02", 0)  # left out and named as unreadable
    with pytest.raises(CheckFailed, match=r"h200-02: its burn-in document had unreadable values \(gpus.0.solo.matmul"):
        fleet.build_references({"h200-01": snap, "h200-02": got}, refs)
    unmeasured = copy.deepcopy(snap)  # a document handed in without the reader: null is "not measured"
    unmeasured["gpus"]["0"]["solo"]["matmul_bf16_tflops"] = None
    unmeasured["host_metrics"]["nccl_allreduce_busbw_gbs"] = None
    out = fleet.build_references({"h200-01": snap, "h200-02": unmeasured}, refs)
    assert "median of 2 measurement(s)" in out["models"]["H200"]["metrics"]["matmul_fp32_tflops"]["source"]
    assert "median of 1 measurement(s)" in out["models"]["H200"]["metrics"]["matmul_bf16_tflops"]["source"]


def test_bad_references_are_one_line_config_errors(tmp_path, refs):
    import yaml

    bad = copy.deepcopy(refs)
    bad["models"]["H200"]["metrics"]["matmul_bf16_tflops"]["lower"] = 1.5
    p = tmp_path / "gpus.yml"
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError) as e:
        fleet.load_references(p)
    assert str(p) in str(e.value) and "models.H200.metrics.matmul_bf16_tflops.lower" in str(e.value)
    bad = copy.deepcopy(refs)
    bad["models"]["H200"]["metrics"]["matmul_bf17_tflops"] = bad["models"]["H200"]["metrics"].pop("matmul_bf16_tflops")
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="matmul_bf17_tflops"):
        fleet.load_references(p)
    bad = copy.deepcopy(refs)
    bad["models"]["H200"]["metrics"]["matmul_bf16_tflops"]["warn_lower"] = 0.9
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="warn_lower 0.9 is wider than lower"):
        fleet.load_references(p)
    with pytest.raises(ConfigError, match="file not found"):
        fleet.load_references(tmp_path / "none.yml")
    bad = copy.deepcopy(refs)
    bad["models"]["H200-SXM"] = bad["models"].pop("H200")
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(
        ConfigError,
        match="models.H200-SXM: not a device name of lab/data/devices.yml "
        r"\(it calls this model H200\)",
    ):
        fleet.load_references(p)


@pytest.mark.parametrize(
    "where, text",
    [
        ("models.H200.metrics.matmul_bf16_tflops.value", ".nan"),
        ("models.H200.metrics.matmul_bf16_tflops.warn_lower", ".nan"),
        ("checks.temperature.idle_fail_c", ".inf"),
    ],
)
def test_a_reference_that_is_not_a_finite_number_is_refused_not_passed(tmp_path, refs, where, text):
    """Every comparison with .nan is false: a NaN reference passed every GPU's figure; an .inf bound never fails."""
    import yaml

    bad = copy.deepcopy(refs)
    node = bad
    *head, last = where.split(".")
    for key in head:
        node = node[key]
    node[last] = "PLACEHOLDER"
    p = tmp_path / "gpus.yml"
    p.write_text(yaml.safe_dump(bad).replace("PLACEHOLDER", text))
    with pytest.raises(ConfigError) as e:
        fleet.load_references(p)
    # the schema's number is a finite one (lab.core.schema): refused there, before gpurefs' own check
    assert str(e.value) == f"{p}: {where}: {text.lstrip('.')} is not a finite number"


def test_model_names():
    refs = fleet.load_references()
    assert fleet.model_key("Tesla T4", refs) == "T4"
    assert fleet.model_key("Tesla V100-PCIE-16GB", refs) == "V100-PCIe"
    assert fleet.model_key("V100-PCIE-32GB", refs) == "V100-PCIe"
    assert fleet.model_key("NVIDIA H200", refs) == "H200"
    assert fleet.model_key("NVIDIA A100-SXM4-80GB", refs) == "A100-SXM4"  # DCGM's floors (issue 48)
    assert fleet.model_key("NVIDIA RTX 4090", refs) is None


def test_all_gpus_at_once_only_fail_bounds(snap, refs):
    ref = refs["models"]["H200"]["metrics"]["matmul_bf16_tflops"]
    r = fleet.ref_range(ref)
    between = (r["fail_lo"] + r["warn_lo"]) / 2  # a WARN when alone, fine when sharing the host
    snap["gpus"]["0"]["solo"]["matmul_bf16_tflops"] = between
    snap["gpus"]["0"]["concurrent"]["matmul_bf16_tflops"] = between
    g = checks_of(run({"h200-01": snap}, refs), gpu=0)
    assert g["matmul_bf16_tflops"]["verdict"] == "WARN"
    assert g["matmul_bf16_tflops (all GPUs at once)"]["verdict"] == "PASS"
    snap["gpus"]["0"]["concurrent"]["matmul_bf16_tflops"] = r["fail_lo"] * 0.9
    g = checks_of(run({"h200-01": snap}, refs), gpu=0)
    assert g["matmul_bf16_tflops (all GPUs at once)"]["verdict"] == "FAIL"


def _as_t4(doc):
    """The snapshot's shape with T4 facts (for the DCGM thresholds of the reference study's hardware)."""
    d = copy.deepcopy(doc)
    for g in d["probe"]["gpus"]:
        g.update(name="Tesla T4", memory_total_mib=15360, temperature_slowdown_c=None)
        g["pcie"].update(gen_current=3, gen_max=3, width_current=16, width_max=16)
        g["power"].update(limit_w=70.0, default_limit_w=70.0)
        g["clocks"]["sm_max_mhz"] = 1590
    for g in d["gpus"].values():
        g["name"] = "Tesla T4"
        g["load"].update(power_w_max=69.4, pcie_gen_max=3, sm_clock_mhz_median=1350)
        g["solo"] = {"memory_bandwidth_gbs": 245.0, "matmul_fp16_tflops": 28.0}
        g["concurrent"] = {}
    d["host_metrics"] = {}
    return d


def test_t4_against_dcgm_thresholds(snap, refs):
    t4 = _as_t4(snap)
    host = inventory_for(t4, gpu_model="T4", pcie={"gen": 3, "width": 16})
    v = run({"h200-01": t4}, refs, hosts=[host])
    assert findings(v.hosts["h200-01"]) == []
    g = checks_of(v, gpu=0)
    assert g["power under load"]["expected"] == ">= 65 W" and g["memory_bandwidth_gbs"]["expected"] == ">= 183 GB/s"
    # below DCGM's memory bandwidth minimum, below its target power
    t4["gpus"]["0"]["solo"]["memory_bandwidth_gbs"] = 150.0
    t4["gpus"]["0"]["load"]["power_w_max"] = 52.0
    g = checks_of(run({"h200-01": t4}, refs, hosts=[host]), gpu=0)
    assert g["memory_bandwidth_gbs"]["verdict"] == "FAIL" and "DCGM" in g["memory_bandwidth_gbs"]["reason"]
    assert g["power under load"]["verdict"] == "FAIL"
    # an x8 link: a finding in an R740 x16 slot, within the model's minimum where the inventory says nothing
    t4["probe"]["gpus"][1 % len(t4["probe"]["gpus"])]["pcie"]["width_current"] = 8
    idx = 1 % len(t4["probe"]["gpus"])
    t4["gpus"][str(idx)]["load"]["pcie_width_min"] = 8
    assert checks_of(run({"h200-01": t4}, refs, hosts=[host]), gpu=idx)["PCIe link"]["verdict"] == "FAIL"
    loose = inventory_for(t4, gpu_model="T4", pcie=None)
    c = checks_of(run({"h200-01": t4}, refs, hosts=[loose]), gpu=idx)["PCIe link"]
    assert c["verdict"] == "PASS" and "T4 minimum" in c["expected"]


def test_nccl_bus_bandwidth_is_judged_against_the_reference_or_says_no_reference(refs):
    """The burn-in's all-reduce figure (all GPUs of the host) against the H200 host reference."""
    from snapshots import FIXTURES

    doc = json.loads((FIXTURES / "h200-x8-standard.handmade.json").read_text())
    ref = refs["models"]["H200"]["metrics"]["nccl_allreduce_busbw_gbs"]
    c = checks_of(run({"h200-01": doc}, refs))["nccl_allreduce_busbw_gbs"]
    assert (c["verdict"], c["measured"], c["unit"]) == ("PASS", 478.2, "GB/s")
    assert f"of reference {ref['value']} GB/s" in c["reason"]
    low = copy.deepcopy(doc)
    low["host_metrics"]["nccl_allreduce_busbw_gbs"] = ref["value"] * (1 - ref["lower"]) * 0.9
    v = run({"h200-01": low}, refs)
    assert checks_of(v)["nccl_allreduce_busbw_gbs"]["verdict"] == "FAIL" and not v.ok
    # measured over 2 of 8 GPUs: the host reference does not apply
    part = copy.deepcopy(doc)
    part["gpus_selected"] = [0, 1]
    c = checks_of(run({"h200-01": part}, refs))["nccl_allreduce_busbw_gbs"]
    assert (c["verdict"], c["expected"]) == ("WARN", "no reference")
    assert "measured over 2 of the host's 8 GPUs" in c["reason"] and "not judged" in c["reason"]
    # a model without this reference
    bare = copy.deepcopy(refs)
    del bare["models"]["H200"]["metrics"]["nccl_allreduce_busbw_gbs"]
    c = checks_of(run({"h200-01": doc}, bare))["nccl_allreduce_busbw_gbs"]
    assert (c["verdict"], c["expected"], c["measured"]) == ("WARN", "no reference", 478.2)
    assert "no nccl_allreduce_busbw_gbs for H200 in the references" in c["reason"]
    # no figure (one GPU): no check
    one = copy.deepcopy(doc)
    del one["host_metrics"]["nccl_allreduce_busbw_gbs"]
    assert "nccl_allreduce_busbw_gbs" not in checks_of(run({"h200-01": one}, refs))


def test_the_summary_shows_what_a_host_printed_on_one_bounded_line_without_escapes(snap, refs):
    """dcgmi's runtime_error is the host's text: a newline in it forged a "PASS" line of another host, an escape
    sequence reached the terminal, a megabyte of it was one line."""
    said = "no host engine\nPASS  h200-02: all checks passed\x1b[2J" + "x" * 1_000_000
    snap["dcgm"] = {"installed": True, "level": 2, "stdout": json.dumps({"DCGM Diagnostic": {"runtime_error": said}})}
    v = run({"h200-01": snap}, refs)
    assert checks_of(v)["DCGM diagnostic"]["reason"] == f"level 2: {said[:500]}"  # validate.json: DCGM's excerpt
    lines = fleet.summary_text(v).splitlines()
    assert lines[1].startswith("FAIL  h200-01: DCGM diagnostic: level 2: no host engine PASS h200-02: all checks")
    assert not any(line.startswith("PASS") for line in lines) and "\x1b" not in "".join(lines)
    assert "\\x1b[2J" in lines[1] and max(map(len, lines)) < 500


def test_an_xid_section_that_names_no_kernel_log_read_is_no_pass(snap, refs):
    """The runner names the log it read, else why none: a section with neither passed as "no XID event since
    boot (None)"."""
    snap["xid"] = {"source": None, "error": None, "events": []}
    v = run({"h200-01": snap}, refs)
    assert not v.ok and v.hosts["h200-01"]["verdict"] == "FAIL"
    assert checks_of(v)["kernel log"]["reason"].startswith(
        "XID events not checked: the kernel log could not be read (no log named as read); run the runner as root"
    )
    assert "XID events" not in checks_of(v, gpu=0) and "XID events (other devices)" not in checks_of(v)


def test_a_kernel_log_the_host_refused_fails_the_host_with_what_to_do(snap, refs):
    """dmesg refused to a non-root user (kernel.dmesg_restrict=1) and no journal: the XIDs were not checked.
    That was a WARN, so the host passed validate (exit 0) and its record spared the sweep's health gate."""
    refused = (
        "journalctl -k -b: No journal files were found.; dmesg: read kernel buffer failed: Operation not permitted"
    )
    snap["xid"] = {"source": None, "error": refused, "events": []}
    v = run({"h200-01": snap}, refs)
    host = v.hosts["h200-01"]
    assert not v.ok and host["verdict"] == "FAIL"
    assert host["reason"] == (
        f"kernel log: XID events not checked: the kernel log could not be read ({refused}); run the runner as "
        "root or with CAP_SYSLOG, or set kernel.dmesg_restrict=0 (sysctl), or let its user read the journal "
        "(group systemd-journal or adm)"
    )
    act = checks_of(v)["kernel log"]["action"]
    assert act["kind"] == "fix_config" and "kernel.dmesg_restrict=0" in act["do"]
    assert fleet.summary_text(v).splitlines()[1].startswith("FAIL  h200-01: kernel log: XID events not checked")
