"""Provision summary, audit report and the stack facts module's drift rules, with plain data."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from lab.hosts import ansible
from lab.hosts import provision
from lab.hosts import stacks
from lab.core import versions
from tests.unit.test_stacks import host

REPO = Path(__file__).resolve().parents[2]


def facts_module():
    """The stack facts module, with its module_utils (the version rule, the stack reading rules)
    where Ansible would put them."""
    import ansible.module_utils

    from runner import stackread

    tools = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location("gpulab_tools", REPO / "playbooks" / "module_utils" / "gpulab_tools.py")
    )
    tools.__spec__.loader.exec_module(tools)
    for name, mod in (("gpulab_versions", versions), ("gpulab_stackread", stackread), ("gpulab_tools", tools)):
        sys.modules[f"ansible.module_utils.{name}"] = mod
        setattr(ansible.module_utils, name, mod)
    spec = importlib.util.spec_from_file_location(
        "gpulab_stack_facts", REPO / "playbooks" / "library" / "gpulab_stack_facts.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def stack(driver="550.144.03", cuda="12.4.1", cudnn=("9.1.0.70",), nccl="2.21.5", gpus=2, torch="2.5.1"):
    return {
        "driver": {"version": driver, "error": None if gpus is not None else "NVIDIA-SMI has failed"},
        "gpus": None if gpus is None else [{"index": i, "name": "Tesla T4"} for i in range(gpus)],
        "cuda": {"default": cuda},
        "cudnn": {"versions": list(cudnn)},
        "nccl": {"version": nccl},
        "python": {"torch": torch, "env": "/var/lib/gpulab/envs/current"},
    }


EXPECTED = {"driver": "550.144.03", "cuda": "12.4.1", "cudnn": "9.1.0.70", "nccl": "2.21.5", "torch": "2.5.1"}


def test_no_drift_when_everything_matches():
    assert facts_module().drift(stack(), EXPECTED, "T4", "2") == []


@pytest.mark.parametrize(
    "kwargs, expected, model, count, drift",
    [
        ({"cudnn": ("9.0.0.312",)}, EXPECTED, "T4", "2", [("cudnn", "9.1.0.70", "9.0.0.312")]),
        ({"cudnn": ("7.4.1.5", "9.1.0.70")}, EXPECTED, "T4", "2", [("cudnn", "9.1.0.70", "7.4.1.5, 9.1.0.70")]),
        ({"cudnn": ()}, EXPECTED, "T4", "2", [("cudnn", "9.1.0.70", "none")]),
        ({"torch": None}, EXPECTED, "T4", "2", [("torch", "2.5.1", "none")]),
        ({"gpus": 3}, EXPECTED, "T4", "2", [("gpu_count", "2", "3")]),
        ({}, EXPECTED, "V100", "auto", [("gpu_model", "V100", "Tesla T4")]),
        ({"gpus": None}, EXPECTED, "T4", "2", [("gpu_count", "2", "unknown (NVIDIA-SMI has failed)")]),
        ({"driver": "550.127.05"}, {**EXPECTED, "driver": "550.*"}, "auto", "auto", []),
        (
            {"driver": "535.183.01"},
            {**EXPECTED, "driver": "550.*"},
            "auto",
            "auto",
            [("driver", "550.*", "535.183.01")],
        ),
        ({"cudnn": ("7.4.1",)}, {**EXPECTED, "cudnn": "7.4.1.5"}, "auto", "auto", []),  # header-only install
    ],
)
def test_drift_rules(kwargs, expected, model, count, drift):
    found = facts_module().drift(stack(**kwargs), expected, model, count)
    assert [(d["component"], d["expected"], d["found"]) for d in found] == drift


def test_header_versions_are_parsed_like_nvidia_writes_them():
    from runner import stackread  # the module's and the probe's one header rule

    mod = facts_module()
    text = "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n"
    assert stackread.header_version(text, stackread.CUDNN_DEFINES) == "9.1.0"
    assert stackread.header_version("#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n", stackread.NCCL_DEFINES) is None
    assert mod.upstream("7.4.1.5-1+cuda10.0") == "7.4.1.5" and mod.upstream("1:550.144.03-0ubuntu1") == "550.144.03"


def playbook_result(tmp_path, hosts, results, check=False, status="successful"):
    return ansible.PlaybookResult(
        playbook="provision.yml",
        status=status,
        rc=0,
        artifacts=tmp_path / "a",
        hosts=hosts,
        results=results,
        check=check,
    )


def test_summary_names_changes_reboot_drift_and_artifacts(tmp_path):
    plans = stacks.plan([host("a"), host("b")])
    hosts = {
        "a": ansible.HostSummary("a", ok=30, changed=12),
        "b": ansible.HostSummary(
            "b", ok=3, failed=1, failures=[ansible.TaskFailure("Install pinned packages", "E: broken")]
        ),
    }
    read = {"stack": stack(), "drift": []}
    results = {
        "a": {
            provision.READ_TASK: read,
            provision.REBOOT_TASK: {"ansible_facts": {"reboot_state": "needed but skipped (reboot_allowed is false)"}},
        }
    }
    r = playbook_result(tmp_path, hosts, results, status="failed")
    out = provision.outcomes(r, plans, None)
    lines = provision.summary_lines(r, out)
    assert lines[0] == "provision: 1/2 host(s) ok"
    assert lines[1].split() == ["a", "changed", "stack", "current", "ok=30", "changed=12", "failed=0", "unreachable=0"]
    assert "installed: driver 550.144.03, cuda 12.4.1, cudnn 9.1.0.70, nccl 2.21.5, torch 2.5.1, gpus 2" in lines[2]
    assert lines[3].strip() == "reboot: needed but skipped (reboot_allowed is false)"
    assert lines[4].split()[:2] == ["b", "failed"] and lines[5].strip() == "reason: Install pinned packages: E: broken"
    assert lines[-1].strip() == f"artifacts: {tmp_path / 'a'}"
    assert not r.ok


def test_audit_report_lines_and_json(tmp_path):
    plans = stacks.plan([host("a"), host("b"), host("c")])
    hosts = {
        "a": ansible.HostSummary("a", ok=5),
        "b": ansible.HostSummary("b", ok=5),
        "c": ansible.HostSummary(
            "c", unreachable=1, failures=[ansible.TaskFailure("Gathering Facts", "host key of c is UNKNOWN")]
        ),
    }
    drift = [{"component": "cudnn", "expected": "9.1.0.70", "found": "9.0.0.312"}]
    results = {
        "a": {provision.READ_TASK: {"stack": stack(), "drift": []}},
        "b": {provision.READ_TASK: {"stack": stack(cudnn=("9.0.0.312",)), "drift": drift}},
    }
    rep = provision.AuditReport(
        playbook_result(tmp_path, hosts, results),
        provision.outcomes(playbook_result(tmp_path, hosts, results), plans, None),
    )
    lines = rep.lines()
    assert lines[0].split() == ["a", "current", "no", "drift"]
    assert lines[1].split() == ["b", "current", "cudnn", "expected", "9.1.0.70", "found", "9.0.0.312"]
    assert (
        lines[2].startswith("c") and "NOT AUDITED (unreachable): Gathering Facts: host key of c is UNKNOWN" in lines[2]
    )
    assert lines[3].startswith("audit: 3 host(s), 1 with drift, 1 not audited")
    assert not rep.ok
    doc = json.loads(json.dumps(rep.as_dict()))
    assert doc["hosts"]["b"]["drift"] == drift and doc["hosts"]["a"]["drift"] == [] and doc["ok"] is False
    clean = {"a": hosts["a"]}
    ok = provision.AuditReport(
        playbook_result(tmp_path, clean, results),
        provision.outcomes(playbook_result(tmp_path, clean, results), plans[:1], None),
    )
    assert ok.ok


def test_mirror_filter_replaces_scheme_and_host_only():
    import importlib.util as u

    spec = u.spec_from_file_location("gpulab_filters", REPO / "playbooks" / "filter_plugins" / "gpulab.py")
    mod = u.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = mod.gpulab_mirror_url
    url = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu1804/x86_64/"
    assert f(url, "") == url and f(url, None) == url
    assert f(url, "http://10.0.0.1:8080/") == "http://10.0.0.1:8080/compute/cuda/repos/ubuntu1804/x86_64/"
    assert f("https://pypi.org/simple/", "https://mirror.lab/base") == "https://mirror.lab/base/simple/"


def test_a_pip_installed_stack_stands_in_where_the_system_has_none():
    """PyTorch from PyPI: cuDNN, NCCL and CUDA come as wheels of the environment, not as system packages."""
    mod = facts_module()
    s = stack(cuda=None, cudnn=(), nccl=None)
    mod.from_python_env(
        s,
        {
            "cudnn": "9.19.0.56",
            "cudnn_dist": "nvidia-cudnn-cu13",
            "nccl": "2.28.9",
            "nccl_dist": "nvidia-nccl-cu13",
            "cuda": "13.0",
        },
    )
    assert (s["cudnn"]["versions"], s["nccl"]["version"], s["cuda"]["default"]) == (["9.19.0.56"], "2.28.9", "13.0")
    assert s["cudnn"]["source"] == "python package nvidia-cudnn-cu13" and s["cuda"]["source"] == "torch.version.cuda"
    expected = {"cuda": "13.0.2", "cudnn": "9.19.0.56", "nccl": "2.28.9"}
    assert mod.drift(s, expected, "auto", "auto") == []
    # the system's own packages come first
    s = stack(cuda="13.0.2", cudnn=("9.19.0.56",), nccl="2.28.9")
    mod.from_python_env(s, {"cudnn": "9.20.0.48", "nccl": "2.29.7", "cuda": "13.0"})
    assert (s["cudnn"]["versions"], s["nccl"]["version"], s["cuda"]["default"]) == (["9.19.0.56"], "2.28.9", "13.0.2")


def test_the_probe_reads_frameworks_and_libraries_with_the_given_interpreter():
    import subprocess
    import sys

    mod = facts_module()
    res = subprocess.run(
        [sys.executable, "-c", mod.PROBE, "json", "no_such_module"], capture_output=True, text=True, timeout=120
    )
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["frameworks"]["no_such_module"] is None and doc["frameworks"]["json"] is not None
    assert set(doc["libraries"]) <= {"cuda", "cudnn", "cudnn_dist", "nccl", "nccl_dist", "cuda_dist"}


@pytest.mark.parametrize(
    "dcgm, fm, drift",
    [
        ("4.5.2", {"version": "580.159.04", "service": "active"}, []),
        ("4.4.1", {"version": "580.159.04", "service": "active"}, [("dcgm", "4.5.2", "4.4.1")]),
        (None, {"version": "580.159.04", "service": "active"}, [("dcgm", "4.5.2", "none")]),
        (
            "4.5.2",
            {"version": "580.126.20", "service": "active"},  # FM of another version than the driver's
            [("fabricmanager", "580.159.04", "580.126.20")],
        ),
        ("4.5.2", {"version": "580.159.04", "service": "failed"}, [("fabricmanager_service", "active", "failed")]),
        (
            "4.5.2",
            {"version": None, "service": None},
            [("fabricmanager", "580.159.04", "none"), ("fabricmanager_service", "active", "not installed")],
        ),
    ],
)
def test_dcgm_and_fabric_manager_drift(dcgm, fm, drift):
    st = dict(stack(driver="580.159.04"), dcgm={"version": dcgm}, fabricmanager=fm)
    expected = {
        **EXPECTED,
        "driver": "580.159.04",
        "dcgm": "4.5.2",
        "fabricmanager": "580.159.04",
        "fabricmanager_service": "active",
    }
    found = facts_module().drift(st, expected, "auto", "auto")
    assert [(d["component"], d["expected"], d["found"]) for d in found] == drift


class FakeModule:
    """What the facts module asks of AnsibleModule: tools on PATH and their output."""

    def __init__(self, tools):
        self.tools = tools

    def get_bin_path(self, name):
        return f"/usr/bin/{name}" if name in self.tools else None

    def run_command(self, argv, **_):
        return self.tools[argv[0].rsplit("/", 1)[-1]]


def test_dcgm_and_fabric_manager_versions_and_service_are_read_from_the_host(tmp_path):
    mod = facts_module()
    pkgs = {
        "datacenter-gpu-manager-4-core": "1:4.5.2-1",
        "datacenter-gpu-manager-4-cuda13": "1:4.5.2-1",
        "nvidia-fabricmanager-580": "580.159.04-1",
        "libnccl2": "2.28.9-1+cuda13.0",
    }
    tools = {
        "dcgmi": (0, "\ndcgmi  version: 4.5.2\n\n", ""),
        "nv-fabricmanager": (0, "Fabric Manager version is : 580.159.04\n", ""),
    }
    assert mod.dcgm_facts(FakeModule(tools), pkgs) == {
        "version": "4.5.2",
        "source": "dcgmi --version",
        "packages": ["4.5.2"],
    }
    assert mod.dcgm_facts(FakeModule({}), {"datacenter-gpu-manager": "1:3.3.9"})["version"] == "3.3.9"
    assert mod.dcgm_facts(FakeModule({}), {})["version"] is None
    # no systemd: the service is active when its process runs (/proc/<pid>/comm, 15 characters)
    (tmp_path / "proc" / "4242").mkdir(parents=True)
    (tmp_path / "proc" / "4242" / "comm").write_text("nv-fabricmanage\n")
    assert mod.service_state(FakeModule({}), mod.FM_SERVICE, mod.FM_COMM, str(tmp_path)) == (
        "active",
        "process nv-fabricmanage (no systemd)",
    )
    (tmp_path / "proc" / "4242" / "comm").write_text("sleep\n")
    assert mod.service_state(FakeModule({}), mod.FM_SERVICE, mod.FM_COMM, str(tmp_path))[0] == "inactive"
    # with systemd: its word for the unit
    (tmp_path / "run" / "systemd" / "system").mkdir(parents=True)
    systemd = FakeModule({"systemctl": (3, "failed\n", "")})
    assert mod.service_state(systemd, mod.FM_SERVICE, mod.FM_COMM, str(tmp_path)) == (
        "failed",
        "systemctl is-active nvidia-fabricmanager",
    )


@pytest.mark.parametrize(
    "read, field",
    [
        ({"stack": {"driver": "550.144.03"}, "drift": []}, "stack.driver is a text, not a mapping"),
        ({"stack": [1], "drift": []}, "stack is a list, not a mapping"),
        ({"stack": {"cudnn": {"versions": "9.1"}}, "drift": []}, "stack.cudnn.versions is a text, not a list"),
        ({"stack": {"python": {"torch": {"v": 1}}}, "drift": []}, "stack.python.torch is a mapping, not a version"),
        ({"stack": {"gpus": 5}, "drift": []}, "stack.gpus is a number, not a list"),
        (
            {"stack": {"tools": {"nvbandwidth": "v0.8"}}, "drift": []},
            "stack.tools.nvbandwidth is a text, not a mapping",
        ),
        ({"stack": {}, "drift": {"cudnn": 1}}, "drift is a mapping, not a list"),
        ({"stack": {}, "drift": [{"component": "cudnn", "found": "9"}]}, "drift[0] has no expected"),
        ({"stack": {}, "drift": [{"component": "x", "expected": "1", "found": "2"}] * 65}, "drift has 65 entries"),
        ("all fine", "the read-back is a text, not a mapping"),
    ],
)
def test_a_read_back_not_of_the_facts_module_fails_that_host_with_the_field_named(tmp_path, read, field):
    """What a host answers is input: a shape the stack facts module never writes fails that host (provision
    not ok, audit not audited) with one reason naming the field, never a traceback."""
    plans = stacks.plan([host("a"), host("b")])
    hosts = {"a": ansible.HostSummary("a", ok=30), "b": ansible.HostSummary("b", ok=30)}
    results = {"a": {provision.READ_TASK: read}, "b": {provision.READ_TASK: {"stack": stack(), "drift": []}}}
    r = playbook_result(tmp_path, hosts, results)
    out = provision.outcomes(r, plans, None)
    assert [h.state for h in out] == ["failed", "ok"]
    assert out[0].reason.startswith(f"{provision.READ_TASK}: the host's answer cannot be read: {field}")
    lines = provision.summary_lines(r, out)
    assert lines[0] == "provision: 1/2 host(s) ok" and f"reason: {out[0].reason}" in lines[2]
    assert not provision.ProvisionSummary(r, out, lines).ok
    audit = provision.AuditReport(r, out)
    assert "NOT AUDITED (failed)" in audit.lines()[0] and audit.lines()[1].split()[-2:] == ["no", "drift"]
    assert not audit.ok


def test_what_a_host_reports_reaches_the_terminal_escaped(tmp_path):
    """A version or drift text with an escape sequence or a newline (a host's tool printed it) is shown as
    \\x1b / \\n: one line each, no terminal control."""
    plans = stacks.plan([host("a")])
    drift = [{"component": "\x1b]0;owned\x07cudnn", "expected": "9.1.0.70", "found": "9.0\nprovision: 2/2 host(s) ok"}]
    results = {"a": {provision.READ_TASK: {"stack": stack(driver="\x1b[2J550.144.03"), "drift": drift}}}
    r = playbook_result(tmp_path, {"a": ansible.HostSummary("a", ok=30)}, results)
    out = provision.outcomes(r, plans, None)
    lines = provision.summary_lines(r, out) + provision.AuditReport(r, out).lines()
    assert all(line.isprintable() for line in lines), lines
    assert "installed: driver \\x1b[2J550.144.03" in lines[2]
    assert "drift: \\x1b]0;owned\\x07cudnn: expected 9.1.0.70, found 9.0\\nprovision: 2/2 host(s) ok" in lines[3]
