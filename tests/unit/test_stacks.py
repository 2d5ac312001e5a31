"""Stack profiles as data: the shipped profiles load, and every bad profile or host is one ConfigError line."""

from __future__ import annotations

import shutil

import pytest
import yaml

from lab.hosts import osfamily
from lab.hosts import stacks
from lab.core.errors import ConfigError
from lab.hosts.inventory import Host


def host(name="h1", stack="current", os_name="Ubuntu 22.04"):
    v = {"gpulab_stack": stack, "gpulab_gpu_model": "T4", "gpulab_gpu_count": 1}
    if os_name:
        v["gpulab_os"] = os_name
    return Host(
        name=name,
        address="192.0.2.1",
        port=22,
        user="root",
        connection="ssh",
        gpu_model="T4",
        gpu_count=1,
        stack=stack,
        groups=(),
        workdir="/var/lib/gpulab",
        python=None,
        ssh_key=None,
        known_hosts="/dev/null",
        vars=v,
    )


@pytest.fixture
def stacks_dir(tmp_path):
    d = tmp_path / "stacks"
    shutil.copytree(stacks.STACKS_DIR, d)
    return d


def edit(stacks_dir, name, change):
    p = stacks_dir / f"{name}.yml"
    data = yaml.safe_load(p.read_text())
    change(data)
    p.write_text(yaml.safe_dump(data))


def test_shipped_profiles_load_with_the_issue_versions():
    assert stacks.available() == ["cuda12", "current", "mlperf-v0.5"]
    old = stacks.load("mlperf-v0.5").expected()
    assert old == {
        "driver": "410.72",
        "cuda": "10.0.130",
        "cudnn": "7.4.1.5",
        "nccl": "2.3.7",
        "torch": "1.0.0",
        "tensorflow": "1.12.0",
    }
    cur = stacks.load("current")
    assert cur.expected() == {
        "driver": "580.159.04",
        "cuda": "13.0.2",
        "cudnn": "9.19.0.56",
        "nccl": "2.28.9",
        "torch": "2.13.0",
        "tensorflow": "2.21.0",
    }
    assert cur.data["driver"]["kernel_modules"] == "open"
    assert {"Ubuntu 22.04", "Ubuntu 24.04", "Debian 12", "Debian 13", "Rocky 9", "RedHat 9"} <= set(cur.supports)
    # the CUDA 12 generation keeps Volta (the study's V100): CUDA 12.6, cuDNN 9.10, PyTorch's cu126 build
    c12 = stacks.load("cuda12")
    assert c12.expected()["cuda"].startswith("12.6.") and c12.expected()["cudnn"] == "9.10.2.21"
    assert c12.expected()["torch"] == "2.13.0+cu126" and c12.data["driver"]["kernel_modules"] == "proprietary"
    assert c12.data["python"]["index_url"].endswith("/whl/cu126/")
    assert {"RedHat 7", "CentOS 7", "Ubuntu 16.04", "Ubuntu 18.04"} == set(stacks.load("mlperf-v0.5").supports)


@pytest.mark.parametrize("name", ["current", "cuda12", "mlperf-v0.5"])
def test_the_driver_packages_are_the_flavour_the_profile_chooses(name):
    """Open kernel modules (Turing and newer) or proprietary ones (needed by Volta): the packages say the same."""
    prof = stacks.load(name).data
    flavour = prof["driver"].get("kernel_modules", "proprietary")
    debian = [p["name"] for p in prof["packages"]["Debian"]["driver"]]
    redhat = [p["name"] for p in prof["packages"]["RedHat"]["driver"]]
    if flavour == "open":
        assert all(n.endswith("-open") for n in debian) and "kmod-nvidia-open-dkms" in redhat
    else:
        assert not any("open" in n for n in debian + redhat)
    assert all(prof["driver"]["branch"] in n for n in debian)


def test_the_profiles_the_runner_runs_under_pin_the_pytorch_ci_tests():
    """Every profile at or above the runner's oldest PyTorch pins the release CI tests the runner on."""
    import importlib.metadata
    import os
    import re

    from lab.core import versions
    from tests.testlab.pylayer import tomllib
    from runner import OLDEST_TORCH

    project = tomllib.loads((stacks.STACKS_DIR.parent.parent / "pyproject.toml").read_text())
    assert f"torch>={OLDEST_TORCH}" in project["project"]["optional-dependencies"]["runner"]
    oldest = [int(x) for x in OLDEST_TORCH.split(".")]
    pinned = {}
    for name in stacks.available():
        torch = stacks.load(name).expected().get("torch")
        if torch and [int(x) for x in versions.release(torch)[:2]] >= oldest:
            pinned[name] = torch
    assert set(pinned) == {"current", "cuda12"}  # mlperf-v0.5 (torch 1.0) is the study's stack, not the runner's
    if not os.environ.get("CI"):
        pytest.skip("not CI: the PyTorch of this environment is not the one CI tests")
    installed = importlib.metadata.version("torch")
    for name, torch in pinned.items():
        assert versions.release(torch) == versions.release(installed), (
            f"stack {name} pins torch {torch}, CI tests the runner on {installed}: pin the same release or "
            f"make CI test {torch}"
        )
    assert re.match(r"2\.13\.", installed)


def test_os_family_and_repository_names():
    assert stacks.os_family("Ubuntu 18.04") == "Debian" and stacks.os_family("CentOS 7") == "RedHat"
    assert [osfamily.repo_dist(o) for o in ("Ubuntu 18.04", "Debian 12", "RedHat 7", "Rocky 9")] == [
        "ubuntu1804",
        "debian12",
        "rhel7",
        "rhel9",
    ]


def test_plan_pairs_hosts_with_profiles_and_the_override_wins():
    plans = stacks.plan([host("a"), host("b", stack="mlperf-v0.5", os_name="Ubuntu 18.04")])
    assert [(p.host, p.stack.name, p.family) for p in plans] == [
        ("a", "current", "Debian"),
        ("b", "mlperf-v0.5", "Debian"),
    ]
    with pytest.raises(ConfigError, match="host a: OS 'Ubuntu 22.04' is not supported by stack 'mlperf-v0.5'"):
        stacks.plan([host("a")], stack="mlperf-v0.5")


@pytest.mark.parametrize(
    "hosts, stack, message",
    [
        ([host()], "nosuch", r"unknown stack 'nosuch': no .*nosuch.yml \(stacks: cuda12, current, mlperf-v0.5\)"),
        ([host()], "../etc", r"stack '../etc': not a valid stack name"),
        ([host(os_name="CentOS 7")], None, r"inv.yml: host h1: OS 'CentOS 7' is not supported by stack 'current'"),
        ([host(os_name=None)], None, r"inv.yml: host h1: gpulab_os is not set"),
    ],
)
def test_bad_hosts_and_stacks_are_one_line(hosts, stack, message):
    with pytest.raises(ConfigError, match=message) as err:
        stacks.plan(hosts, stack=stack, inventory="inv.yml")
    assert "\n" not in err.value.message


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("cudnn"), r"current.yml: cudnn is missing"),
        (lambda d: d["cuda"].update(version="twelve"), r"current.yml: cuda.version: 'twelve' does not match"),
        (lambda d: d["supports"].append("Windows 11"), r"current.yml: supports.10: 'Windows 11' does not match"),
        (
            lambda d: d["packages"].pop("RedHat"),
            r"current.yml: supports: 'Rocky 8' is a RedHat-family OS but "
            r"packages has no RedHat entry",
        ),
        (lambda d: d.update(name="other"), r"current.yml: name: 'other' does not match the file name"),
        (lambda d: d["packages"]["Debian"]["driver"][0].update(name="x; rm -rf /"), r"driver.0.name"),
        (lambda d: d.update(colour="blue"), r"current.yml: unknown key\(s\) colour"),
        (lambda d: d["packages"]["RedHat"].pop("dcgm"), r"current.yml: dcgm: packages.RedHat has no dcgm entry"),
        (lambda d: d["dcgm"].update(required="yes"), r"current.yml: dcgm.required: 'yes' is not of type 'boolean'"),
        (
            lambda d: d.update(nvswitch=True) or d["driver"].pop("version"),
            r"current.yml: nvswitch: true needs driver.version \(Fabric Manager must be exactly the driver's version\)",
        ),
        (
            lambda d: d.update(nvswitch=True) or d["packages"]["RedHat"].pop("fabricmanager"),
            r"current.yml: nvswitch: true but packages.RedHat has no fabricmanager entry",
        ),
        (
            lambda d: (
                d.update(nvswitch=True) or d["packages"]["Debian"]["fabricmanager"][0].update(version="580.126.20-1")
            ),
            r"current.yml: packages.Debian.fabricmanager: nvidia-fabricmanager-580 580.126.20-1 is not the driver's "
            r"version 580.159.04",
        ),
    ],
)
def test_bad_profiles_are_one_line(stacks_dir, change, message):
    edit(stacks_dir, "current", change)
    with pytest.raises(ConfigError, match=message) as err:
        stacks.load("current", stacks_dir)
    assert "\n" not in err.value.message


def test_malformed_profile_names_the_file_and_line(stacks_dir):
    (stacks_dir / "current.yml").write_text("name: current\nsupports: [Ubuntu 22.04\n")
    with pytest.raises(ConfigError, match=r"current.yml: line \d+, column \d+: malformed YAML"):
        stacks.load("current", stacks_dir)


@pytest.mark.parametrize(
    "text, want",
    [
        ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n', "Debian 12"),
        ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n', "Ubuntu 24.04"),
        ('ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n', "Rocky 9"),
        ('ID="rhel"\nVERSION_ID="8.10"\n', "RedHat 8"),
    ],
)
def test_a_local_host_without_gpulab_os_gets_this_machines_os(tmp_path, text, want):
    path = tmp_path / "os-release"
    path.write_text(text)
    assert stacks.local_os(path) == want


@pytest.mark.parametrize("text", ["ID=arch\n", 'ID=debian\nVERSION_ID="trixie/sid"\n', ""])
def test_an_os_release_gpulab_cannot_name_is_one_line(tmp_path, text):
    path = tmp_path / "os-release"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"os-release: ID=.* is not an OS gpulab knows .*: set gpulab_os"):
        stacks.local_os(path)
    with pytest.raises(ConfigError, match=r"cannot read it .*set gpulab_os"):
        stacks.local_os(tmp_path / "missing")


def test_the_local_host_of_the_embedded_default_plans_without_gpulab_os(monkeypatch):
    monkeypatch.setattr(stacks, "local_os", lambda: "Debian 12")
    local = host("localhost", os_name=None)
    local = type(local)(**{**local.__dict__, "connection": "local"})
    assert [(p.host, p.os) for p in stacks.plan([local])] == [("localhost", "Debian 12")]
    with pytest.raises(ConfigError, match=r"host h1: gpulab_os is not set .*only a local host's is detected"):
        stacks.plan([host("h1", os_name=None)])


def test_what_validate_expects_of_dcgm_and_fabric_manager(stacks_dir):
    assert stacks.load("current").tools() == {
        "dcgm": {"version": "4.5.2", "required": False},
        "nvswitch": False,
        "driver": "580.159.04",
    }
    assert stacks.load("mlperf-v0.5").tools()["dcgm"] is None
    edit(stacks_dir, "current", lambda d: d.update(nvswitch=True))  # Fabric Manager at the driver's version
    assert stacks.load("current", stacks_dir).tools()["nvswitch"] is True
