"""The stand-in package data of the test lab (tests/testlab/packages.yml) and the nvidia-smi stand-in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.testlab.aptrepo import load_spec
from tests.testlab.util import LabError


def test_spec_expands_one_package_per_version_with_real_names():
    pkgs = {(p["name"], p["version"]): p for p in load_spec()}
    assert ("nvidia-driver-550", "550.127.05-0ubuntu0.22.04.1") in pkgs
    assert ("nvidia-driver-550", "550.144.03-0ubuntu0.22.04.1") in pkgs
    old = pkgs[("nvidia-driver-550", "550.127.05-0ubuntu0.22.04.1")]
    assert old["depends"] == [
        "nvidia-utils-550 (= 550.127.05-0ubuntu0.22.04.1)",
        "libnvidia-compute-550 (= 550.127.05-0ubuntu0.22.04.1)",
    ]
    compute = pkgs[("libnvidia-compute-550", "550.144.03-0ubuntu0.22.04.1")]
    paths = {f["path"]: f for f in compute["files"]}
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.144.03" in paths
    assert paths["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"]["symlink"] == "libnvidia-ml.so.550.144.03"


def _write(tmp_path, text):
    path = tmp_path / "packages.yml"
    path.write_text(text)
    return path


def test_bad_spec_names_file_and_field(tmp_path):
    path = _write(tmp_path, "packages:\n  - name: x\n    description: d\n    versions: [{version: 'not a version'}]\n")
    with pytest.raises(LabError, match=r"packages\.yml: packages/0/versions/0/version: 'not a version' does not match"):
        load_spec([path])


def test_undefined_template_variable_is_an_error(tmp_path):
    path = _write(
        tmp_path, "packages:\n  - name: 'x-{{ branch }}'\n    description: d\n    versions: [{version: '1.0-1'}]\n"
    )
    with pytest.raises(LabError, match=r"x-\{\{ branch \}\} 1.0-1: name: 'branch' is undefined"):
        load_spec([path])


def test_duplicate_package_version_is_an_error(tmp_path):
    path = _write(
        tmp_path, "packages:\n  - name: x\n    description: d\n    versions: [{version: '1-1'}, {version: '1-1'}]\n"
    )
    with pytest.raises(LabError, match="x 1-1 is defined twice"):
        load_spec([path])


@pytest.fixture
def smi(tmp_path):
    pkg = next(p for p in load_spec() if p["name"] == "nvidia-utils-550" and p["version"].startswith("550.144"))
    script = tmp_path / "nvidia-smi"
    script.write_text(next(f["content"] for f in pkg["files"] if f["path"] == "/usr/bin/nvidia-smi"))

    def call(*args, gpus=None):
        fake = tmp_path / "fake-gpus.json"
        if gpus is not None:
            fake.write_text(json.dumps(gpus))
        env = {"GPULAB_FAKE_GPUS": str(fake), "PATH": "/usr/bin:/bin"}
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env)

    return call


def test_nvidia_smi_without_driver_fails_like_the_real_one(smi):
    res = smi()
    assert res.returncode == 9
    assert res.stdout == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )


def test_nvidia_smi_formats(smi):
    assert smi(gpus=[]).stdout == "No devices were found\n" and smi(gpus=[]).returncode == 6
    gpus = [{"name": "Tesla V100-PCIE-16GB", "memory_mib": 16384, "power_limit_w": 250}]
    res = smi("--query-gpu=name,memory.total,power.limit", "--format=csv", gpus=gpus)
    assert res.stdout == "name, memory.total [MiB], power.limit [W]\nTesla V100-PCIE-16GB, 16384 MiB, 250.00 W\n"
    res = smi("--query-gpu=memory.total,driver_version", "--format=csv,noheader,nounits", gpus=gpus)
    assert res.stdout == "16384, 550.144.03\n"
    assert smi("-L", gpus=gpus).stdout.startswith("GPU 0: Tesla V100-PCIE-16GB (UUID: GPU-")
    assert "CUDA Version        : 12.4" in smi("--version", gpus=gpus).stdout
    res = smi("--query-gpu=bogus", "--format=csv", gpus=gpus)
    assert res.returncode == 2 and 'Field "bogus" is not a valid field to query.' in res.stdout
    table = smi(gpus=gpus).stdout.splitlines()
    assert "NVIDIA-SMI 550.144.03" in table[2] and "CUDA Version: 12.4" in table[2]
    assert len({len(line) for line in table[1:]}) == 1  # a rectangular table


def _script(tmp_path, package, path):
    pkg = next(p for p in load_spec() if p["name"] == package)
    script = tmp_path / path.rsplit("/", 1)[-1]
    script.write_text(next(f["content"] for f in pkg["files"] if f["path"] == path))
    return script


def test_dcgmi_stand_in_answers_like_dcgmi(tmp_path):
    dcgmi = _script(tmp_path, "datacenter-gpu-manager-4-core", "/usr/bin/dcgmi")
    spec = tmp_path / "dcgm-diag.json"
    env = {"GPULAB_FAKE_DCGM": str(spec), "PATH": "/usr/bin:/bin"}

    def call(*args):
        return subprocess.run([sys.executable, str(dcgmi), *args], capture_output=True, text=True, env=env)

    assert call("--version").stdout == "\ndcgmi  version: 4.5.2\n\n"
    res = call("diag", "-r", "1", "-j")  # no host engine (no file): dcgmi's two lines, DCGM_ST_CONNECTION_NOT_VALID
    assert res.returncode == 235 and res.stdout.splitlines()[1].startswith("Error: Unable to connect to host engine.")
    spec.write_text(json.dumps({"gpus": 2}))
    tests = {
        lvl: [
            t["name"]
            for c in json.loads(call("diag", "-r", lvl, "-j").stdout)["DCGM Diagnostic"]["test_categories"]
            for t in c["tests"]
        ]
        for lvl in ("1", "2", "3")
    }
    assert tests["1"] == ["software"] and set(tests["2"]) == {"software", "pcie", "memory"}
    assert {"diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth"} <= set(tests["3"])
    spec.write_text(
        json.dumps(
            {
                "gpus": 2,
                "results": {
                    "memory": {
                        "1": {
                            "status": "Fail",
                            "error_id": 52,
                            "error_category": 10,
                            "error_severity": 2,
                            "warning": "faulty memory",
                        }
                    }
                },
            }
        )
    )
    res = call("diag", "-r", "2", "-j")
    assert res.returncode == 205  # an ISOLATE-severity error: DCGM_ST_NVVS_ISOLATE_ERROR
    doc = json.loads(res.stdout)
    memory = next(t for c in doc["DCGM Diagnostic"]["test_categories"] for t in c["tests"] if t["name"] == "memory")
    assert [r["status"] for r in memory["results"]] == ["Pass", "Fail"]
    assert memory["results"][1]["warnings"][0]["error_id"] == 52 and memory["test_summary"]["status"] == "Fail"
    assert doc["metadata"]["version"] == "4.5.2"
    assert call("diag", "-r", "9").returncode == 255


def test_fabric_manager_stand_in_prints_its_version(tmp_path):
    fm = _script(tmp_path, "nvidia-fabricmanager-580", "/usr/bin/nv-fabricmanager")
    res = subprocess.run([sys.executable, str(fm), "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout == "Fabric Manager version is : 580.159.04\n"
    assert subprocess.run([sys.executable, str(fm)], capture_output=True, text=True).returncode == 1
