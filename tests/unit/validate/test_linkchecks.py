"""The interconnect checks (lab.validate.linkchecks) on plain data: NVLink links and errors, PCIe
replays and AER, each giving PASS, WARN and FAIL; and through a validation of the H200 snapshot."""

import json

import pytest
from snapshots import checks_of, run

from lab.validate import linkchecks as lc
from lab.validate.verdict import summary_text

H200 = {"links": 18, "source": "H200 SXM data sheet"}


def nvlink(up=18, present=18, down=(), **errors):
    links = [
        {"link": i, "up": i not in down, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
        for i in range(present)
    ]
    totals = {k: errors.get(k, 0) for k in lc.NVLINK_COUNTERS}
    return {"links_present": present, "links_up": up, "links_down": list(down), "errors": totals, "links": links}


def aer(cor=0, nonfatal=0, fatal=0, port=None, counts=None):
    out = {
        "device": "0000:1b:00.0",
        "correctable": {"total": cor, "counts": counts or {}},
        "nonfatal": {"total": nonfatal, "counts": {}},
        "fatal": {"total": fatal, "counts": {}},
        "upstream": None,
    }
    if port is not None:
        out["upstream"] = {"device": "0000:17:01.0", **{k: {"total": v, "counts": {}} for k, v in port.items()}}
    return out


def window(seconds=600.0, **after):
    base = {
        "nvlink_links_up": 18,
        "nvlink_errors": {k: 0 for k in lc.NVLINK_COUNTERS},
        "pcie_replay_count": 0,
        "aer": {"correctable": 0, "nonfatal": 0, "fatal": 0},
    }
    base.update(after)
    return lc.LinkWindow(base, seconds)


@pytest.fixture
def limits(refs):
    return refs["checks"]["interconnect"]


def one(records):
    assert len(records) == 1, records
    return records[0]


# ------------------------------------------------------------------ NVLink links


def test_links_all_up_pass_one_down_fails():
    c = one(lc.nvlink_link_checks({"nvlink": nvlink()}, None, {"nvlink": H200}, "H200", 8))
    assert (
        c["verdict"] == "PASS"
        and c["reason"] == "18 of 18 links up"
        and c["expected"].startswith("18 up (H200 reference")
    )
    c = one(lc.nvlink_link_checks({"nvlink": nvlink(up=17, down=[3])}, None, {"nvlink": H200}, "H200", 8))
    assert c["verdict"] == "FAIL" and c["reason"] == "17 of 18 expected links up; down: 3"
    assert c["measured"] == {"up": 17, "present": 18, "down": [3]}


def test_links_expected_by_the_inventory_and_more_than_expected():
    host = {"name": "h", "nvlink_links": 4}
    c = one(lc.nvlink_link_checks({"nvlink": nvlink(up=2, present=4, down=[2, 3])}, host, {"nvlink": H200}, "H200", 2))
    assert c["verdict"] == "FAIL" and "inventory gpulab_nvlink_links" in c["expected"]
    c = one(lc.nvlink_link_checks({"nvlink": nvlink(up=18)}, host, {"nvlink": H200}, "H200", 2))
    assert c["verdict"] == "WARN" and "more than the 4 expected" in c["reason"]

    class InventoryHost:  # lab.hosts.inventory.Host keeps gpulab_* variables in .vars
        vars = {"gpulab_nvlink_links": 0}

    c = one(lc.nvlink_link_checks({"nvlink": None}, InventoryHost(), {"nvlink": H200}, "H200", 1))
    assert c["verdict"] == "PASS" and c["reason"] == "no NVLink on this GPU, as expected"


def test_a_gpu_without_nvlink_where_links_are_expected():
    c = one(lc.nvlink_link_checks({"nvlink": None}, None, {"nvlink": H200}, "H200", 8))
    assert c["verdict"] == "WARN" and "set gpulab_nvlink_links" in c["reason"]
    c = one(lc.nvlink_link_checks({"nvlink": None}, {"nvlink_links": 18}, None, None, 8))
    assert c["verdict"] == "FAIL" and c["reason"] == "NVML reports no NVLink on this GPU; 18 link(s) expected"


def test_one_gpu_host_without_a_link_up_warns_and_unknown_models_are_not_failed():
    c = one(lc.nvlink_link_checks({"nvlink": nvlink(up=0, down=range(18))}, None, {"nvlink": H200}, "H200", 1))
    assert c["verdict"] == "WARN" and "one GPU" in c["reason"]
    c = one(lc.nvlink_link_checks({"nvlink": nvlink(up=11, present=12, down=[5])}, None, None, None, 4))
    assert c["verdict"] == "WARN" and c["reason"] == "11 of 12 links up; down: 5 (no expected count)"
    assert lc.nvlink_link_checks({"name": "older runner, no nvlink key"}, None, {"nvlink": H200}, "H200", 8) == []


# ------------------------------------------------------------------ NVLink errors


def test_nvlink_errors_pass_warn_fail(limits):
    same = window(nvlink_errors={"replay": 0, "recovery": 0, "crc_flit": 40, "crc_data": 0})
    c = one(lc.nvlink_error_checks({"nvlink": nvlink(crc_flit=40)}, limits, same))
    assert c["verdict"] == "PASS" and "none during the burn-in; 40 CRC error(s)" in c["reason"]
    # older replays, none under load
    c = one(
        lc.nvlink_error_checks(
            {"nvlink": nvlink(replay=3)},
            limits,
            window(nvlink_errors={"replay": 3, "recovery": 0, "crc_flit": 0, "crc_data": 0}),
        )
    )
    assert c["verdict"] == "WARN" and c["reason"] == "3 replay and 0 recovery error(s) before the burn-in"
    # a recovery error during the load
    c = one(
        lc.nvlink_error_checks(
            {"nvlink": nvlink()},
            limits,
            window(nvlink_errors={"replay": 0, "recovery": 1, "crc_flit": 0, "crc_data": 0}),
        )
    )
    assert c["verdict"] == "FAIL" and c["measured"]["in_window"]["recovery"] == 1 and c["measured"]["window_s"] == 600.0
    assert "DCGM health watch" in c["expected"]


def test_nvlink_crc_rate_in_the_window(limits):
    few = window(seconds=100, nvlink_errors={"replay": 0, "recovery": 0, "crc_flit": 50, "crc_data": 0})
    c = one(lc.nvlink_error_checks({"nvlink": nvlink()}, limits, few))
    assert c["verdict"] == "WARN" and c["reason"].startswith("50 CRC error(s) during the burn-in (0.5/s")
    many = window(seconds=100, nvlink_errors={"replay": 0, "recovery": 0, "crc_flit": 9000, "crc_data": 1000})
    c = one(lc.nvlink_error_checks({"nvlink": nvlink()}, limits, many))
    assert c["verdict"] == "FAIL" and c["reason"] == "100 CRC errors/s during the burn-in"


def test_nvlink_errors_without_a_window_or_after_a_driver_reload(limits):
    c = one(lc.nvlink_error_checks({"nvlink": nvlink(recovery=2)}, limits, None))
    assert c["verdict"] == "WARN" and "since the driver loaded (no load window to date them)" in c["reason"]
    reloaded = window(nvlink_errors={"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0})
    c = one(lc.nvlink_error_checks({"nvlink": nvlink(crc_flit=7)}, limits, reloaded))
    assert c["verdict"] == "PASS" and "in_window" not in c["measured"]  # the counter went back: no window
    assert lc.nvlink_error_checks({"nvlink": None}, limits, None) == []


# ------------------------------------------------------------------ PCIe replays


def test_pcie_replays_pass_warn_fail(limits):
    gpu = {"pcie": {"replay_count": 2}}
    c = one(lc.pcie_replay_checks(gpu, limits, window(pcie_replay_count=3)))
    assert c["verdict"] == "PASS" and c["reason"] == "2 PCIe replay(s) since the driver loaded, 1 during the burn-in"
    c = one(lc.pcie_replay_checks(gpu, limits, window(seconds=60, pcie_replay_count=12)))
    assert c["verdict"] == "WARN" and c["reason"] == "10 PCIe replays during the burn-in: 10.0/min"
    c = one(lc.pcie_replay_checks(gpu, limits, window(seconds=3600, pcie_replay_count=90)))
    assert c["verdict"] == "FAIL" and c["measured"] == {"since_load": 2, "in_window": 88, "window_s": 3600.0}
    c = one(lc.pcie_replay_checks({"pcie": {"replay_count": 500}}, limits, None))
    assert c["verdict"] == "WARN" and c["reason"] == "500 PCIe replays since the driver loaded"
    assert lc.pcie_replay_checks({"pcie": {"replay_count": None}}, limits, None) == []


# ------------------------------------------------------------------ AER


def test_aer_pass_warn_fail(limits):
    c = one(lc.aer_checks({"aer": aer(cor=3, port={"correctable": 1, "nonfatal": 0, "fatal": 0})}, limits, window()))
    assert c["verdict"] == "PASS" and c["reason"] == "no uncorrectable PCIe error; 4 corrected since boot"
    assert c["measured"]["upstream"] == {"correctable": 1, "nonfatal": 0, "fatal": 0}
    c = one(lc.aer_checks({"aer": aer(cor=150, counts={"BadTLP": 150})}, limits, None))
    assert c["verdict"] == "WARN" and c["reason"] == "150 corrected PCIe error(s) since boot (BadTLP 150)"
    c = one(lc.aer_checks({"aer": aer(cor=3)}, limits, window(aer={"correctable": 5, "nonfatal": 0, "fatal": 0})))
    assert c["verdict"] == "WARN" and c["reason"].startswith("2 corrected PCIe error(s) during the burn-in")
    c = one(lc.aer_checks({"aer": aer(nonfatal=1)}, limits, window(aer={"correctable": 0, "nonfatal": 2, "fatal": 0})))
    assert c["verdict"] == "FAIL" and "1 non-fatal uncorrectable PCIe error(s) during the burn-in" in c["reason"]
    c = one(lc.aer_checks({"aer": aer(nonfatal=1)}, limits, None))
    assert c["verdict"] == "WARN" and "since boot" in c["reason"]
    c = one(lc.aer_checks({"aer": aer(port={"correctable": 0, "nonfatal": 0, "fatal": 1})}, limits, None))
    assert c["verdict"] == "FAIL" and "on the port above it (0000:17:01.0)" in c["reason"]


def test_aer_absent_is_said_plainly(limits):
    gpu = {"aer": None, "unavailable": {"aer": "no aer_dev_correctable in /sys/bus/pci/devices/0000:1b:00.0"}}
    c = one(lc.aer_checks(gpu, limits, None))
    assert (
        c["verdict"] == "WARN"
        and c["reason"] == "not judged: no aer_dev_correctable in /sys/bus/pci/devices/0000:1b:00.0"
    )
    assert lc.aer_checks({"name": "older runner"}, limits, None) == []


# ------------------------------------------------------------------ the load window


def test_link_window_from_a_burnin_document():
    probe = {"collected_at": "2026-12-05T05:00:00.000Z"}
    burnin = {
        "interconnect_after": {"collected_at": "2026-12-05T05:10:00.000Z", "gpus": {"0": {"pcie_replay_count": 1}}}
    }
    w = lc.link_window(probe, burnin, 0)
    assert w.seconds == 600.0 and w.after == {"pcie_replay_count": 1}
    assert lc.link_window(probe, burnin, 1) is None
    assert lc.link_window(probe, None, 0) is None
    assert lc.link_window({"collected_at": "garbage"}, burnin, 0) is None
    assert lc.link_window({"collected_at": "2026-12-05T06:00:00Z"}, burnin, 0) is None  # after before the probe


# ------------------------------------------------------------------ through a validation


def test_interconnect_in_the_verdicts_with_actions(snap, refs):
    g0 = snap["probe"]["gpus"][0]
    g0["nvlink"] = nvlink(up=17, down=[3])
    g0["pcie"]["replay_count"] = 0
    g0["aer"] = aer()
    snap["probe"]["collected_at"] = "2026-12-05T05:00:00.000Z"
    snap["interconnect_after"] = {
        "collected_at": "2026-12-05T05:20:00.000Z",
        "gpus": {
            "0": {
                "nvlink_links_up": 17,
                "nvlink_errors": {"replay": 4, "recovery": 0, "crc_flit": 0, "crc_data": 0},
                "pcie_replay_count": 0,
                "aer": {"correctable": 0, "nonfatal": 0, "fatal": 0},
            }
        },
    }
    v = run({"h200-01": snap}, refs)
    c = checks_of(v, gpu=0)
    assert c["NVLink links"]["verdict"] == "FAIL"  # 17 of 18 up: a link is down whatever the GPU count
    assert c["NVLink errors"]["verdict"] == "FAIL" and "4 replay" in c["NVLink errors"]["reason"]
    assert c["PCIe replays"]["verdict"] == "PASS" and c["PCIe AER"]["verdict"] == "PASS"
    assert c["NVLink links"]["action"]["kind"] == "reset_gpu" and c["NVLink links"]["action"]["escalate"] == "rma"
    assert "action" not in c["PCIe AER"]
    h = v.hosts["h200-01"]
    assert h["verdict"] == "FAIL"
    assert [a["where"] for a in h["actions"]][:2] == ["GPU 0 NVLink links", "GPU 0 NVLink errors"]
    assert "      action for GPU 0 NVLink links: reset_gpu: A link is down" in summary_text(v)
    assert json.loads(v.to_json())["hosts"]["h200-01"]["actions"][0]["kind"] == "reset_gpu"


def test_malformed_facts_from_a_host_are_one_warn_each(snap, refs):
    g0 = snap["probe"]["gpus"][0]
    g0["nvlink"] = {"links_up": "many", "links_present": [], "errors": 7}
    g0["aer"] = "broken"
    g0["pcie"]["replay_count"] = 3
    snap["interconnect_after"] = ["not", "a", "dict"]
    snap["tools"] = {
        "nvbandwidth": {"ran": True, "gpus": {"0": "fast"}},
        "nccl_tests": {"ran": True, "busbw_gbs": "x", "wrong": {}},
    }
    v = run({"h200-01": snap}, refs)
    c = checks_of(v, gpu=0)
    for name in ("NVLink links", "NVLink errors", "PCIe AER"):
        assert c[name]["verdict"] == "WARN" and c[name]["reason"].startswith(
            f"not judged: the host's {name} facts are malformed"
        )
    assert c["PCIe replays"]["verdict"] == "PASS"
    assert c["nvbandwidth"]["verdict"] == "WARN" and v.hosts["h200-01"]["beside"] == []
    json.loads(v.to_json())
