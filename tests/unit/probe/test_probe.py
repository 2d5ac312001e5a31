import json
import subprocess
import sys

import pytest
from fake_nvml import FakeNvml, h200_like, old_gpu

from runner import probe


def test_no_driver_gives_gpus_empty_and_plain_reason(monkeypatch):
    def no_nvml():
        raise probe.NvmlUnavailable("NVML could not start: NVML Shared Library Not Found")

    monkeypatch.setattr(probe, "load_nvml", no_nvml)
    doc = probe.gather()
    assert doc["gpus"] == []
    assert doc["gpu_count"] == 0
    assert doc["nvidia"] == "no NVIDIA driver/GPU found: NVML could not start: NVML Shared Library Not Found"
    # host facts are still there
    assert doc["kernel"] and doc["python"]["version"] and doc["cpu"]["logical_cpus"] >= 1
    assert doc["memory"]["total_mib"] > 0


def test_cli_on_this_machine_prints_one_json_document():
    """This machine has no NVIDIA driver: the real NVML path must say so, exit 0."""
    out = subprocess.run(
        [sys.executable, "-m", "runner", "probe", "--json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == 1
    if doc["gpus"]:
        pytest.skip("this machine has an NVIDIA GPU; tests/gpu covers it")
    assert doc["nvidia"].startswith("no NVIDIA driver/GPU found: ")
    assert doc["frameworks"]["nvidia_ml_py"]  # read from metadata
    assert "torch" not in out.stderr  # nothing imported a framework noisily


def test_cli_does_not_import_frameworks():
    code = "import sys, runner.probe as p; p.gather(); print('torch' in sys.modules, 'tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_bad_gpu_list_is_one_line_exit_2():
    out = subprocess.run(
        [sys.executable, "-m", "runner", "probe", "--gpus", "0,x"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "--gpus" in out.stderr


def test_h200_like_gpu_fields():
    nv = FakeNvml([h200_like(), h200_like(uuid="GPU-2", bus_id="00000000:2A:00.0")])
    doc = probe.gather(nvml=nv)
    assert doc["nvidia"] is None
    assert doc["gpu_count"] == 2
    assert doc["stack"]["driver"] == "550.127.05" and doc["stack"]["driver_source"] == "NVML"
    assert doc["stack"]["cuda_driver"] == "12.4"
    g = doc["gpus"][0]
    assert g["name"] == "NVIDIA H200"
    assert g["memory_total_mib"] == 143771
    assert g["pcie"] == {
        "gen_current": 5,
        "gen_max": 5,
        "gen_gpu_max": None,
        "width_current": 16,
        "width_max": 16,
        "replay_count": 0,
    }
    assert g["power"]["limit_w"] == 700.0 and g["power"]["draw_w"] == 74.3
    assert g["ecc"]["enabled"] is True
    assert g["ecc"]["uncorrected_volatile"] == 0 and g["ecc"]["corrected_aggregate"] == 3
    assert g["row_remap"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert g["temperature_slowdown_c"] == 90 and g["temperature_shutdown_c"] == 97
    assert g["clocks"]["sm_max_mhz"] == 1980
    assert g["throttle_reasons"] == ["gpu_idle"]
    # retired pages are not supported on this generation: null, and not an "unavailable" reason
    assert g["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert "retired_pages_sbe" not in g["unavailable"]
    assert doc["gpus"][1]["pci_bus_id"] == "00000000:2A:00.0"
    json.dumps(doc)  # plain data


def test_each_field_on_its_own_unsupported_gives_null():
    nv = FakeNvml([old_gpu()])
    g = probe.gather(nvml=nv)["gpus"][0]
    assert g["name"] == "Tesla T4"  # bytes decoded
    assert g["pci_bus_id"] == "00000000:3B:00.0"
    assert g["temperature_c"] == 40
    assert g["pcie"]["width_current"] is None
    assert g["power"]["limit_w"] is None
    assert g["ecc"]["uncorrected_volatile"] is None
    assert g["throttle_reasons"] is None
    # a failure other than "not supported" is kept with its reason
    assert g["serial"] is None and g["unavailable"]["serial"] == "Insufficient Permissions"


def test_gpu_selection_and_lost_gpu():
    nv = FakeNvml([h200_like(), h200_like(lost=True), h200_like()])
    doc = probe.gather([1, 2], nvml=nv)
    assert [g["index"] for g in doc["gpus"]] == [1, 2]
    assert doc["gpus"][0] == {"index": 1, "error": "GPU 1 cannot be read: GPU is lost"}
    assert doc["gpus"][1]["name"] == "NVIDIA H200"
    with pytest.raises(ValueError, match="GPU index 3 does not exist"):
        probe.gather([3], nvml=FakeNvml([h200_like()]))


def test_zero_gpus_reported_plainly():
    doc = probe.gather(nvml=FakeNvml([]))
    assert doc["gpus"] == [] and doc["nvidia"] == "no NVIDIA driver/GPU found: the driver reports 0 GPUs"


def test_throttle_decoding():
    assert probe.decode_throttle(0) == []
    assert probe.decode_throttle(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert probe.decode_throttle(0x1000) == ["0x1000"]
    assert probe.decode_throttle(None) is None


def test_stack_files_from_a_host_tree(tmp_path, monkeypatch):
    """Versions read from the files a host's packages install."""
    root = tmp_path
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="16.04"\nPRETTY_NAME="Ubuntu 16.04.5 LTS"\n')
    (root / "usr/local/cuda").mkdir(parents=True)
    (root / "usr/local/cuda/version.txt").write_text("CUDA Version 10.0.130\n")
    inc = root / "usr/include"
    inc.mkdir(parents=True)
    (inc / "cudnn.h").write_text("#define CUDNN_MAJOR 7\n#define CUDNN_MINOR 4\n#define CUDNN_PATCHLEVEL 1\n")
    (inc / "nccl.h").write_text("#define NCCL_MAJOR 2\n#define NCCL_MINOR 3\n#define NCCL_PATCH 7\n")
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcudnn.so.7.4.1").write_text("")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  410.72  Wed Oct 17 20:08:45 CDT 2018\nGCC version:  gcc version 5.4.0\n"
    )
    monkeypatch.setattr(probe, "ROOT", root)
    monkeypatch.setattr(probe, "load_nvml", lambda: (_ for _ in ()).throw(probe.NvmlUnavailable("no library")))
    doc = probe.gather()
    assert doc["os"]["id"] == "ubuntu" and doc["os"]["version_id"] == "16.04"
    s = doc["stack"]
    assert s["cuda_toolkit"] == "10.0.130"
    assert s["driver"] == "410.72" and s["driver_source"] == "/proc/driver/nvidia/version"
    found = {f["version"] for f in s["cudnn_found"]}
    assert "7.4.1" in found and s["nccl"] in {"2.3.7"} | {f["version"] for f in s["nccl_found"]}
    assert any(f["source"].startswith("library ") for f in s["cudnn_found"])
    # cuda version.json is preferred when present
    (root / "usr/local/cuda/version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}')
    assert probe.gather()["stack"]["cuda_toolkit"] == "12.4.1"


def test_numa_from_sysfs(tmp_path, monkeypatch):
    dev = tmp_path / "sys/bus/pci/devices/0000:1b:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("1\n")
    (dev / "local_cpulist").write_text("24-47,72-95\n")
    monkeypatch.setattr(probe, "ROOT", tmp_path)
    g = probe.gather(nvml=FakeNvml([h200_like()]))["gpus"][0]
    assert g["numa_node"] == 1 and g["cpu_affinity"] == "24-47,72-95"


def test_without_a_system_toolkit_the_cuda_of_a_pip_installed_framework_stands_in(tmp_path, monkeypatch):
    """A PyTorch from PyPI brings its CUDA as wheels: torch.version.cuda (or the runtime wheel) is the toolkit."""
    import sys
    import types

    monkeypatch.setattr(probe, "ROOT", tmp_path)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(version=types.SimpleNamespace(cuda="13.0")))
    assert probe.cuda_toolkit_version() == {"version": "13.0", "source": "torch.version.cuda"}
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(version=types.SimpleNamespace(cuda=None)))
    monkeypatch.setattr(probe, "dist_version", lambda name: "13.0.96" if name == "nvidia-cuda-runtime" else None)
    assert probe.cuda_toolkit_version() == {"version": "13.0.96", "source": "python package nvidia-cuda-runtime"}
    monkeypatch.setattr(probe, "dist_version", lambda name: None)
    assert probe.cuda_toolkit_version() is None  # a CPU build: no CUDA anywhere
    (tmp_path / "usr/local/cuda").mkdir(parents=True)
    (tmp_path / "usr/local/cuda/version.json").write_text('{"cuda": {"version": "13.0.2"}}')
    assert probe.cuda_toolkit_version()["version"] == "13.0.2"  # the system's toolkit comes first
