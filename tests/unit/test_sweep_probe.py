"""What a sweep makes of a host's probe (lab.sweep.topology.discover, lab.sweep.hostprep): a GPU NVML answered
with an error for is left out of the plan in one line that names it, and a host the inventory gives GPUs whose
probe finds none is a failed host (exit 1) with nothing run there, never given CPU runs that pass for the device's.
The hosts are fakes of lab.hosts.remote: nothing is contacted."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import pytest

from lab.core.errors import RunError
from lab.hosts import remote as rmt
from lab.hosts.inventory import Host
from lab.sweep import driver, hostprep
from lab.sweep import plan as pl
from lab.sweep import topology
from lab.sweep.hostrun import Settings

NO_DRIVER = "no NVIDIA driver/GPU found: NVML could not start: NVML Shared Library Not Found"
LOST = "GPU 1 cannot be read: GPU is lost"


def v100(name: str, count=3) -> Host:
    return Host(
        name=name,
        address="127.0.0.1",  # never contacted: rmt.connect is a fake
        port=22,
        user="root",
        connection="ssh",
        gpu_model="V100-PCIE-16GB",
        gpu_count=count,
        stack="current",
        groups=("r740", "v100"),
        workdir="/var/lib/gpulab",
        python=None,
        ssh_key=None,
        known_hosts="/dev/null",
    )


def gpu(i: int) -> dict:
    return {"index": i, "name": "Tesla V100-PCIE-16GB", "pci_bus_id": f"00000000:{0x3B + i:02X}:00.0", "numa_node": 0}


PROBES = {
    "healthy": {"nvidia": None, "gpus": [gpu(0), gpu(1), gpu(2)]},
    "one-lost": {"nvidia": None, "gpus": [gpu(0), {"index": 1, "error": LOST}, gpu(2)]},
    "no-driver": {"nvidia": NO_DRIVER, "gpus": []},
    "all-lost": {"nvidia": None, "gpus": [{"index": 0, "error": "GPU 0 cannot be read: Unknown Error"}]},
}


class FakeHost:
    """A host that answers `runner probe --json` with its document and the sysfs roots; anything else is a
    failure (a run started there would be one)."""

    def __init__(self, host: Host, asked: list):
        self.host, self.name, self.asked = host, host.name, asked

    def run(self, argv, check=True, timeout=None):
        self.asked.append((self.name, argv[-2:] if argv[:1] != ["sh"] else ["roots"]))
        if argv[-2:] == ["probe", "--json"]:
            return rmt.Result("probe", 0, json.dumps(PROBES[self.name]) + "\n", "")
        if argv[:1] == ["sh"]:
            return rmt.Result("roots", 0, "", "")
        raise RunError(f"{self.name}: {argv!r} asked of a fake host")

    def close(self):
        pass


@pytest.fixture
def fleet(monkeypatch):
    """Every host connects to its FakeHost; the runner is never installed. Returns what the hosts were asked."""
    asked: list = []
    monkeypatch.setattr(rmt, "connect", lambda h: FakeHost(h, asked))
    monkeypatch.setattr(
        rmt, "ensure_runner", lambda r: SimpleNamespace(argv=lambda *a: ["python3", "-m", *a], version="fake")
    )
    monkeypatch.setattr(hostprep.gate, "needed", lambda *a: set())  # the health gate: lab.sweep.gate's own tests
    return asked


def prepare(hosts, echoed, **settings):
    planner = functools.partial(pl.plan, gpus="all", seeds=1, mode="throughput", scale="tiny")
    return hostprep.prepare_hosts(
        hosts, ["ncf"], planner, None, None, Settings(health_valid_hours=24, **settings), "s1", echoed.append, None
    )


def test_a_gpu_nvml_answered_with_an_error_for_is_left_out_in_one_line(fleet):
    echoed: list = []
    prepared, topologies, _, _, runs = prepare([v100("one-lost"), v100("healthy")], echoed)
    assert prepared.failed == {}
    assert echoed == [f"sweep s1: one-lost: GPU 1 left out of the plan (NVML: {LOST}): runs use GPU(s) 0,2"]
    assert topologies["one-lost"]["unreadable"] == [{"index": 1, "error": LOST}]
    assert topologies["healthy"]["unreadable"] == []
    assert {r.gpus: r.gpu_ids for r in runs if r.host == "one-lost"} == {1: [0], 2: [0, 2]}
    assert {r.gpus for r in runs if r.host == "healthy"} == {1, 2, 3}


def test_a_gpu_host_whose_probe_finds_no_gpu_is_refused_and_the_others_go_on(fleet):
    """r740-03's driver is gone: its probe lists 0 GPUs. Its runs were planned as CPU runs (``--gpus all`` on a
    host of 0 GPUs) and would have been reported as the V100s'."""
    echoed: list = []
    prepared, topologies, _, _, runs = prepare([v100("no-driver"), v100("healthy")], echoed)
    exc = prepared.failed["no-driver"]
    assert isinstance(exc, topology.NoGpuFound) and exc.exit_code == 1
    want = (
        "no-driver: the inventory declares 3 GPU(s) (gpulab_gpu_count 3, gpulab_gpu_model V100-PCIE-16GB) but the "
        f"probe found 0 ({NO_DRIVER}): nothing is run on it (a GPU host never runs on the CPU in its GPUs' place); "
        "check its NVIDIA driver and GPUs (`nvidia-smi` there; `invoke provision --host no-driver` installs the "
        "stack's driver), or fix its inventory entry"
    )
    assert exc.message == want and echoed == [f"sweep s1: {want}"]
    assert "no-driver" not in topologies  # its runs keep the inventory's counts, failed with the line (below)
    assert not [r for r in runs if r.gpus == 0]  # no CPU run anywhere
    assert {r.gpus for r in runs if r.host == "healthy"} == {1, 2, 3}  # the other host goes on
    assert ("no-driver", ["roots"]) not in fleet  # nothing more asked of it after the probe
    # a probe listing only GPUs NVML cannot read is no CPU host either, inventory count "auto" or not
    prepared, *_ = prepare([v100("all-lost", count="auto")], [])
    assert prepared.failed["all-lost"].message.startswith(
        "all-lost: the inventory declares V100-PCIE-16GB GPUs (gpulab_gpu_model V100-PCIE-16GB, gpulab_gpu_count "
        "auto) but the probe found 0 usable: GPU 0: GPU 0 cannot be read: Unknown Error: nothing is run on it"
    )


def test_cpu_without_gpus_runs_such_a_host_on_the_cpu_when_asked(fleet):
    """gpulab.sweep.cpu_without_gpus: 1, a rehearsal on hosts without their GPUs (the test lab's study walk)."""
    echoed: list = []
    prepared, topologies, _, _, runs = prepare([v100("no-driver")], echoed, cpu_without_gpus=1)
    assert prepared.failed == {} and echoed == []
    assert topologies["no-driver"]["gpu_count"] == 0 and [r.gpus for r in runs] == [0]


def test_a_host_the_inventory_gives_no_gpu_stays_a_cpu_host(fleet):
    cpu = Host(**{**vars(v100("no-driver")), "gpu_model": "auto", "gpu_count": "auto", "groups": ("cpu",)})
    prepared, topologies, _, _, runs = prepare([cpu], [])
    assert prepared.failed == {} and topologies["no-driver"]["gpu_count"] == 0
    assert [r.gpus for r in runs] == [0]
    # ... unless its probe lists GPUs, none of which NVML can read: a GPU host with a broken driver
    lost = Host(**{**vars(cpu), "name": "all-lost"})
    prepared, *_ = prepare([lost], [])
    assert prepared.failed["all-lost"].message.startswith(
        "all-lost: its probe lists 1 GPU(s) but found 0 usable: GPU 0: GPU 0 cannot be read: Unknown Error: "
        "nothing is run on it"
    )


def test_the_sweep_runs_nothing_on_a_gpu_host_without_gpus(fleet, monkeypatch, tmp_path):
    started = []
    monkeypatch.setattr(driver, "_workers", lambda backend, sweep, units, *a: started.extend(units) or [])
    echoed: list = []
    result = driver.run_sweep(
        [v100("no-driver")], ["ncf"], tmp_path / "results", "s1", gpus="all", seeds=1, echo=echoed.append
    )
    assert started == []  # no unit, no run
    assert not result.ok
    assert {r.gpus for r in result.sweep.runs} == {1, 2, 3}  # the inventory's plan, every run failed with the line
    assert all(r.state == "failed" and "the probe found 0" in r.reason for r in result.sweep.runs)
    assert any(line.startswith("sweep s1: no-driver: the inventory declares 3 GPU(s)") for line in echoed)
    assert result.sweep.hosts["no-driver"]["error"].startswith("no-driver: the inventory declares 3 GPU(s)")


CLI = """
import json, sys
from types import SimpleNamespace
from lab.hosts import remote as rmt

NVIDIA = sys.argv[1]

class Host:  # the host answers `runner probe --json` and nothing else: NVML does not start there
    def __init__(self, host):
        self.host, self.name = host, host.name
    def run(self, argv, check=True, timeout=None):
        if argv[-2:] == ["probe", "--json"]:
            return rmt.Result("probe", 0, json.dumps({"nvidia": NVIDIA, "gpus": []}) + "\\n", "")
        raise SystemExit(f"asked of the host: {argv}")
    def close(self):
        pass

rmt.connect = Host
rmt.ensure_runner = lambda r: SimpleNamespace(argv=lambda *a: ["python3", "-m", *a], version="fake")
sys.argv = ["gpulab", *sys.argv[2:]]
from lab.core.program import main
main()
"""


def test_invoke_sweep_on_a_v100_host_without_gpus_exits_1_in_one_line(tmp_path):
    """`gpulab sweep --device v100` (as `invoke sweep`) where the one V100 host's probe finds no GPU."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    inv = tmp_path / "lab.yml"
    inv.write_text(
        "all:\n  children:\n    v100:\n      vars: {gpulab_gpu_model: V100-PCIE-16GB, gpulab_gpu_count: 3, "
        f"gpulab_stack: current, gpulab_workdir: {tmp_path / 'work'}}}\n"
        "      hosts:\n        r740-09: {ansible_host: 127.0.0.1}\n"
    )
    env = dict(os.environ, INVOKE_GPULAB_RESULTS=str(tmp_path / "results"), NO_COLOR="1")
    argv = ["sweep", "--inventory", str(inv), "--device", "v100", "--workloads", "ncf", "--seeds", "1"]
    argv += ["--scale", "tiny", "--mode", "throughput", "--name", "s1"]
    p = subprocess.run(
        [sys.executable, "-c", CLI, NO_DRIVER, *argv], cwd=root, capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    said = [line for line in p.stdout.splitlines() if "the inventory declares" in line]
    assert said[0] == (
        "sweep s1: r740-09: the inventory declares 3 GPU(s) (gpulab_gpu_count 3, gpulab_gpu_model V100-PCIE-16GB) "
        f"but the probe found 0 ({NO_DRIVER}): nothing is run on it (a GPU host never runs on the CPU in its GPUs' "
        f"place); check its NVIDIA driver and GPUs (`nvidia-smi` there; `invoke provision --host r740-09 --inventory "
        f"{inv}` installs the stack's driver), or fix its inventory entry"
    )
    assert "0/3 runs complete" in p.stdout and "asked of the host" not in p.stdout + p.stderr
    assert not list((tmp_path / "results" / "s1").glob("r740-09/*"))  # no run directory
