"""The probe's interconnect facts (runner.probe_link): NVLink state and counters and the PCIe
replay counter through the NVML stand-in, AER counters from a sysfs tree built here."""

import json

import pynvml
from fake_nvml import FakeNvml, h200_like, old_gpu

from runner import probe, probe_link

CORRECTABLE = "RxErr 0\nBadTLP {bad_tlp}\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {cor}\n"
NONFATAL = "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO {cto}\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nTOTAL_ERR_NONFATAL {nf}\n"
FATAL = "Undefined 0\nDLP {dlp}\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nMalfTLP 0\nTOTAL_ERR_FATAL {fatal}\n"


def write_aer(d, bad_tlp=0, cto=0, dlp=0):
    d.mkdir(parents=True, exist_ok=True)
    (d / "aer_dev_correctable").write_text(CORRECTABLE.format(bad_tlp=bad_tlp, cor=bad_tlp))
    (d / "aer_dev_nonfatal").write_text(NONFATAL.format(cto=cto, nf=cto))
    (d / "aer_dev_fatal").write_text(FATAL.format(dlp=dlp, fatal=dlp))


def sysfs_tree(root, name="0000:1b:00.0", port="0000:17:01.0", **counts):
    """/sys/devices/pci0000:17/<port>/<gpu> with AER files, and the /sys/bus/pci/devices links."""
    port_dir = root / "sys/devices/pci0000:17" / port
    write_aer(port_dir)
    write_aer(port_dir / name, **counts)
    bus = root / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    (bus / name).symlink_to(f"../../../devices/pci0000:17/{port}/{name}")
    (bus / port).symlink_to(f"../../../devices/pci0000:17/{port}")


def test_h200_all_links_up_no_errors_and_aer_of_device_and_port(tmp_path, monkeypatch):
    sysfs_tree(tmp_path)
    monkeypatch.setattr(probe, "ROOT", tmp_path)
    g = probe.gather(nvml=FakeNvml([h200_like()]))["gpus"][0]
    nv = g["nvlink"]
    assert nv["links_present"] == 18 and nv["links_up"] == 18 and nv["links_down"] == []
    assert nv["errors"] == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    assert nv["links"][17] == {"link": 17, "up": True, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    assert g["pcie"]["replay_count"] == 0
    assert g["aer"]["device"] == "0000:1b:00.0"
    assert g["aer"]["correctable"] == {"total": 0, "counts": {}}
    assert g["aer"]["fatal"] == {"total": 0, "counts": {}}
    assert g["aer"]["upstream"]["device"] == "0000:17:01.0"
    assert g["aer"]["upstream"]["nonfatal"]["total"] == 0
    assert "aer" not in g["unavailable"] and "nvlink" not in g["unavailable"]
    json.dumps(g)


def test_a_link_down_and_counted_errors(tmp_path, monkeypatch):
    sysfs_tree(tmp_path, bad_tlp=12, cto=1, dlp=1)
    monkeypatch.setattr(probe, "ROOT", tmp_path)
    links = [{"up": True, 0: 0, 1: 0, 2: 0, 3: 0} for _ in range(18)]
    links[3]["up"] = False
    links[5].update({0: 2, 2: 7})
    links[9][1] = 1
    g = probe.gather(nvml=FakeNvml([h200_like(nvlink=links, pcie_replay=41)]))["gpus"][0]
    nv = g["nvlink"]
    assert nv["links_up"] == 17 and nv["links_down"] == [3]
    assert nv["errors"] == {"replay": 2, "recovery": 1, "crc_flit": 7, "crc_data": 0}
    assert g["pcie"]["replay_count"] == 41
    assert g["aer"]["correctable"] == {"total": 12, "counts": {"BadTLP": 12}}
    assert g["aer"]["nonfatal"] == {"total": 1, "counts": {"CmpltTO": 1}}
    assert g["aer"]["fatal"] == {"total": 1, "counts": {"DLP": 1}}


def test_no_nvlink_no_replay_counter_no_aer_statistics(tmp_path, monkeypatch):
    (tmp_path / "sys/bus/pci/devices/0000:3b:00.0").mkdir(parents=True)  # a device without aer_dev_* files
    monkeypatch.setattr(probe, "ROOT", tmp_path)
    g = probe.gather(nvml=FakeNvml([old_gpu()]))["gpus"][0]
    assert g["nvlink"] is None and "nvlink" not in g["unavailable"]  # plain "not supported": no reason kept
    assert g["pcie"]["replay_count"] is None
    assert g["aer"] is None
    assert g["unavailable"]["aer"].startswith("no aer_dev_correctable in ")
    assert "kernel without PCIe AER statistics" in g["unavailable"]["aer"]


def test_a_gpu_missing_from_sysfs_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "ROOT", tmp_path)
    g = probe.gather(nvml=FakeNvml([h200_like()]))["gpus"][0]
    assert g["aer"] is None and g["unavailable"]["aer"].endswith("0000:1b:00.0 does not exist")


def test_failures_other_than_not_supported_keep_their_reason(tmp_path):
    links = [{"up": True, 0: 0, 1: 0, 2: 0, 3: 0} for _ in range(4)]
    links[1]["up"] = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    links[2][0] = pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
    links[2][3] = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    nv = FakeNvml([h200_like(nvlink=links, pcie_replay=pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION))])
    unavailable = {}
    facts = probe_link.interconnect_facts(nv, 0, "00000000:1B:00.0", tmp_path, unavailable)
    link = facts["nvlink"]
    assert link["links_present"] == 4 and link["links_up"] == 3 and link["links_down"] == []
    assert link["links"][1] == {"link": 1, "up": None, "error": "Unknown Error"}
    assert link["links"][2]["replay"] is None and link["links"][2]["errors"] == {"replay": "Insufficient Permissions"}
    assert link["links"][2]["crc_data"] is None and "crc_data" not in link["links"][2]["errors"]
    assert link["errors"]["replay"] == 0  # the sum of the links that answered
    assert facts["pcie_replay_count"] is None and unavailable["pcie.replay_count"] == "Insufficient Permissions"


def test_an_nvml_without_the_calls(tmp_path):
    class Bare:
        pass

    unavailable = {}
    facts = probe_link.interconnect_facts(Bare(), 0, "not an address", tmp_path, unavailable)
    assert facts == {"nvlink": None, "pcie_replay_count": None, "aer": None}
    assert unavailable == {
        "nvlink": "not in this nvidia-ml-py",
        "pcie.replay_count": "not in this nvidia-ml-py",
        "aer": "no PCI address to look up ('not an address')",
    }


def test_aer_file_parsing_and_addresses():
    assert probe_link.parse_aer("RxErr 3\nBadTLP 0\nTOTAL_ERR_COR 3\n", "TOTAL_ERR_COR") == {
        "total": 3,
        "counts": {"RxErr": 3},
    }
    assert probe_link.parse_aer("RxErr 3\nBadDLLP 2\n", "TOTAL_ERR_COR") == {
        "total": 5,
        "counts": {"RxErr": 3, "BadDLLP": 2},
    }
    assert probe_link.parse_aer("garbage\n\x00\nRxErr -1\n", "TOTAL_ERR_COR") is None
    assert probe_link.sysfs_name("00000000:1B:00.0") == "0000:1b:00.0"
    assert probe_link.sysfs_name("0001:3b:00.1") == "0001:3b:00.1"
    assert probe_link.sysfs_name("1B:00.0") == "0000:1b:00.0"
    assert probe_link.sysfs_name("../../etc") is None and probe_link.sysfs_name(None) is None


def test_a_garbled_aer_file_is_reported_not_raised(tmp_path):
    d = tmp_path / "sys/bus/pci/devices/0000:1b:00.0"
    write_aer(d)
    (d / "aer_dev_fatal").write_bytes(b"\xff\xfe not counters")
    unavailable = {}
    assert probe_link.aer_facts(tmp_path, "00000000:1B:00.0", unavailable) is None
    assert unavailable["aer"].endswith("aer_dev_fatal holds no counter")


def test_counters_after_the_load_per_gpu(tmp_path, monkeypatch):
    sysfs_tree(tmp_path, bad_tlp=4)
    monkeypatch.setattr(probe, "ROOT", tmp_path)
    links = [{"up": True, 0: 1, 1: 0, 2: 3, 3: 0} for _ in range(2)]
    doc = probe.gather(nvml=FakeNvml([h200_like(nvlink=links, pcie_replay=9), old_gpu(), h200_like(lost=True)]))
    after = probe_link.counters(doc)
    assert after["collected_at"] == doc["collected_at"]
    assert after["gpus"] == {
        "0": {
            "nvlink_links_up": 2,
            "nvlink_errors": {"replay": 2, "recovery": 0, "crc_flit": 6, "crc_data": 0},
            "pcie_replay_count": 9,
            "aer": {"correctable": 4, "nonfatal": 0, "fatal": 0},
        },
        "1": {"nvlink_links_up": None, "nvlink_errors": None, "pcie_replay_count": None, "aer": None},
    }
