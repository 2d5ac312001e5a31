"""`invoke provision` and `invoke audit` on the SSH test lab, through the command line.

Two lab hosts (Debian 12, declared as such) get the `current` profile from the
stand-in NVIDIA packages of the lab's apt repository, served at the upstream
path layout under the lab's mirror (gpulab_mirror), and stand-in framework
wheels from the lab's index. Then one host moves to `mlperf-v0.5`, declared as
Ubuntu 18.04 (the lab's hosts are Debian 12, so the OS-vs-facts check
stack_profile_verify_os is off for that host only). The profiles are a copy of
inventory/stacks/ whose `current` says its hosts have NVSwitches, so that Fabric
Manager is provisioned beside DCGM, read back by the audit and checked by
`invoke validate`, which runs the stand-in dcgmi. The mirror also serves stand-in release
tarballs of nccl-tests and nvbandwidth (tests/testlab/sourcetars.py, with their .sha256: the
profile has no sums), which the bwtools role builds with the hosts' compilers, CMake and Boost.

What the lab hosts cannot do, and the variables that skip it (real hosts leave
them on): no running kernel of their own (kernel_prereqs_enabled: false), no
initramfs (nouveau_rebuild_initramfs: false), no kernel modules
(nouveau_unload: false), no systemd (nvidia_driver_persistence_mode,
dcgm_service_enabled, fabric_manager_service_enabled: false),
no reboot (reboot_allowed: false: the summary reports the needed reboot as
skipped). The lab's mirror is unsigned (nvidia_repo_trusted: true), and the
runner environment sees the host's Python layer
(python_env_system_site_packages: true) so that numpy & co. are not copied.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.integration import provisioning_lab
from tests.integration.provisioning_lab import PROVISION_VARS
from tests.testlab import sourcetars

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
# a workdir full of shell metacharacters (no spaces: it ends up in script shebangs)
EVIL = "/var/lib/gpulab/w;touch${IFS}/tmp/pwned1;$(touch${IFS}/tmp/pwned2)`touch${IFS}/tmp/pwned3`"
LAB_VARS = PROVISION_VARS
# torch: the environment sees the hosts' Python layer, whose real torch 2.13.0+cpu satisfies the
# profile's torch==2.13.0 (pip, and gpulab's version rule, ignore the local label)
CURRENT = {
    "driver": "580.159.04",
    "cuda": "13.0.2",
    "cudnn": "9.19.0.56",
    "nccl": "2.28.9",
    "torch": "2.13.0+cpu",
    "tensorflow": "2.21.0",
}
MLPERF = {
    "driver": "410.72",
    "cuda": "10.0.130",
    "cudnn": "7.4.1.5",
    "nccl": "2.3.7",
    "torch": "1.0.0",
    "tensorflow": "1.12.0",
}


@pytest.fixture(scope="module")
def plab(testlab, tmp_path_factory):
    lab = testlab(
        names=["pv-01", "pv-02"], prefix="pv", all_vars=LAB_VARS, host_vars={"pv-02": {"gpulab_workdir": EVIL}}
    )
    # the mirror serves the apt repository at NVIDIA's path layout, and the stand-in wheels
    provisioning_lab.prepare(lab, ("debian12", "ubuntu1804"))
    lab.work = tmp_path_factory.mktemp("provision")
    lab.artifacts = lab.work / "artifacts"
    # the profiles, `current` on NVSwitch hosts (Fabric Manager at the driver's version)
    lab.stacks = lab.work / "stacks"
    shutil.copytree(REPO / "inventory" / "stacks", lab.stacks)
    current = yaml.safe_load((lab.stacks / "current.yml").read_text())
    (lab.stacks / "current.yml").write_text(yaml.safe_dump({**current, "nvswitch": True}))
    # the stand-in release tarballs of the profile's tools, at GitHub's paths under the mirror
    lab.tool_sums = sourcetars.build(lab.state_dir / "www", current["tools"])
    # the same hosts, pv-02 moved to mlperf-v0.5 (declared Ubuntu 18.04)
    inv = yaml.safe_load(lab.inventory.read_text())
    pv02 = _find_host(inv, "pv-02")
    pv02.update({"gpulab_stack": "mlperf-v0.5", "gpulab_os": "Ubuntu 18.04", "stack_profile_verify_os": False})
    lab.inventory_mlperf = lab.work / "inventory-mlperf.yml"
    lab.inventory_mlperf.write_text(yaml.safe_dump(inv))
    return lab


def _find_host(inv: dict, name: str) -> dict:
    group = inv["all"]
    return (group.get("hosts") or {})[name]


def invoke(lab, *args, inventory=None, env=None, check=True):
    """`invoke ARGS --inventory ...` from the worktree, as a user runs it."""
    cmd = [str(INVOKE), *args, "--inventory", str(inventory or lab.inventory)]
    full_env = {
        **os.environ,
        **lab.ansible_env(),
        "PYTHONPATH": str(REPO),
        "INVOKE_GPULAB_RESULTS": str(lab.work / "results"),
        "INVOKE_GPULAB_ARTIFACTS": str(lab.artifacts),
        "INVOKE_GPULAB_STACKS": str(lab.stacks),
        **(env or {}),
    }
    full_env.pop(
        "INVOKE_GPULAB_HISTORY_URL", None
    )  # validate's history: results/history.sqlite there, not the checkout's
    res = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=600)
    print(f"$ {' '.join(cmd[1:])}  -> {res.returncode}\n{res.stdout}\n{res.stderr}")
    return res


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """Per-host counts of the summary lines."""
    out = {}
    for m in re.finditer(
        r"^\s+(\S+)\s+(ok|changed|failed|unreachable|not run)\s+stack \S+\s+ok=(\d+) changed=(\d+) "
        r"failed=(\d+) unreachable=(\d+)",
        stdout,
        re.M,
    ):
        out[m.group(1)] = {
            "state": m.group(2),
            "ok": int(m.group(3)),
            "changed": int(m.group(4)),
            "failed": int(m.group(5)),
            "unreachable": int(m.group(6)),
        }
    return out


def changed_tasks(stdout: str, host: str) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(rf"^\s+\[{host}\] changed\s+(.*)$", stdout, re.M)}


def state(lab, name: str) -> str:
    """Everything provisioning may change on a host, as one text."""
    return lab.exec(
        name,
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' | sort; "
        "ls -la /usr/local /etc/apt/sources.list.d /etc/profile.d /etc/modprobe.d; "
        "cat /etc/gpulab/stack.json 2>/dev/null; find /var/lib/gpulab -maxdepth 3 | sort; "
        "dpkg --get-selections | grep -v install$ || true",
    ).stdout


def stack_json(lab, name: str) -> dict:
    return json.loads(lab.exec(name, "cat /etc/gpulab/stack.json").stdout)


def versions(stack: dict) -> dict:
    return {
        "driver": stack["driver"]["version"],
        "cuda": stack["cuda"]["default"],
        "cudnn": ", ".join(stack["cudnn"]["versions"]),
        "nccl": stack["nccl"]["version"],
        "torch": stack["python"]["torch"],
        "tensorflow": stack["python"]["tensorflow"],
    }


def test_bad_input_exits_2_with_one_line_and_touches_nothing(plab, tmp_path):
    before = {n: state(plab, n) for n in plab.names}
    bad_stacks = tmp_path / "stacks"
    bad_stacks.mkdir()
    profile = yaml.safe_load((REPO / "inventory/stacks/current.yml").read_text())
    del profile["cudnn"]
    (bad_stacks / "current.yml").write_text(yaml.safe_dump(profile))
    centos = yaml.safe_load(plab.inventory.read_text())
    centos["all"]["vars"]["gpulab_os"] = "CentOS 7"
    centos_inv = tmp_path / "centos.yml"
    centos_inv.write_text(yaml.safe_dump(centos))
    cases = [
        (["provision", "--stack", "nosuch"], {}, None, r"unknown stack 'nosuch'"),
        (["provision"], {"INVOKE_GPULAB_STACKS": str(bad_stacks)}, None, r"current.yml: cudnn is missing"),
        (["provision"], {}, centos_inv, r"host pv-01: OS 'CentOS 7' is not supported by stack 'current'"),
        (["audit"], {}, centos_inv, r"host pv-01: OS 'CentOS 7' is not supported by stack 'current'"),
        (
            ["provision", "--host", "pv-01", "--stack", "mlperf-v0.5"],
            {},
            None,
            r"host pv-01: OS 'Debian 12' is not supported by stack 'mlperf-v0.5'",
        ),
    ]
    for args, env, inv, message in cases:
        res = invoke(plab, *args, inventory=inv, env=env)
        assert res.returncode == 2, args
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and re.search(message, lines[0]), (args, res.stderr)
        assert "Traceback" not in res.stderr + res.stdout
    assert {n: state(plab, n) for n in plab.names} == before
    assert not plab.artifacts.exists() or not list(plab.artifacts.glob("*-provision*"))


def test_provision_current_on_two_hosts(plab):
    res = invoke(plab, "provision")
    assert res.returncode == 0, res.stdout[-3000:]
    counts = recap(res.stdout)
    assert set(counts) == {"pv-01", "pv-02"} and all(c["state"] == "changed" for c in counts.values())
    # live progress per task and host, the artifacts folder named by the summary
    assert re.search(
        r"^\s+\[pv-01\] changed\s+pinned_packages : Install pinned packages for the NVIDIA driver$", res.stdout, re.M
    )
    folder = Path(re.search(r"artifacts: (\S+)", res.stdout).group(1))
    assert re.fullmatch(r"\d{8}-\d{6}-provision(-\d+)?", folder.name) and folder.parent == plab.artifacts
    assert (folder / "job_events").is_dir() and (folder / "stdout").is_file()
    assert res.stdout.count("reboot: needed but skipped") == 2
    for name in plab.names:
        pkgs = plab.exec(
            name,
            "dpkg-query -W -f '${Package}=${Version}\\n' nvidia-driver-580-open cuda-toolkit-13-0 "
            "libcudnn9-cuda-13 libnccl2",
        ).stdout.split()
        assert sorted(pkgs) == [
            "cuda-toolkit-13-0=13.0.2-1",
            "libcudnn9-cuda-13=9.19.0.56-1",
            "libnccl2=2.28.9-1+cuda13.0",
            "nvidia-driver-580-open=580.159.04-0ubuntu0.24.04.1",
        ]
        assert "hold" in plab.exec(name, "dpkg --get-selections nvidia-driver-580-open").stdout
        tools = plab.exec(
            name,
            "dpkg-query -W -f '${Package}=${Version}\\n' datacenter-gpu-manager-4-core "
            "datacenter-gpu-manager-4-cuda13 nvidia-fabricmanager-580",
        ).stdout.split()
        assert sorted(tools) == [
            "datacenter-gpu-manager-4-core=1:4.5.2-1",
            "datacenter-gpu-manager-4-cuda13=1:4.5.2-1",
            "nvidia-fabricmanager-580=580.159.04-1",
        ]
        held = plab.exec(name, "dpkg --get-selections datacenter-gpu-manager-4-core nvidia-fabricmanager-580").stdout
        assert held.split()[1::2] == ["hold", "hold"]
        stack = stack_json(plab, name)
        assert versions(stack) == CURRENT
        assert (stack["dcgm"]["version"], stack["dcgm"]["source"]) == ("4.5.2", "dcgmi --version")
        fm = stack["fabricmanager"]
        assert (fm["version"], fm["source"], fm["service"]) == ("580.159.04", "nv-fabricmanager --version", "inactive")
        assert stack["stack"] == "current" and stack["drift"] == []
        tools = {n: (t["version"], t["problem"], t["sha256"]) for n, t in stack["tools"].items()}
        assert tools == {
            "nccl-tests": ("2.19.6", None, plab.tool_sums["nccl-tests"]),
            "nvbandwidth": ("0.8", None, plab.tool_sums["nvbandwidth"]),
        }
        assert plab.exec(name, "ls /opt/gpulab/tools/bin").stdout.split() == ["all_reduce_perf", "nvbandwidth"]
        assert [g["name"] for g in stack["gpus"]] == ["Tesla T4", "Tesla T4"]
        assert (
            stack["python"]["runner"]
            == subprocess.run(
                [sys.executable, "-c", "import runner; print(runner.__version__)"],
                cwd=REPO,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        assert plab.exec(name, "readlink /usr/local/cuda").stdout.strip() == "/usr/local/cuda-13.0"
        env = plab.exec(name, "bash -lc 'echo $CUDA_HOME; command -v nvcc'").stdout.split()
        assert env == ["/usr/local/cuda", "/usr/local/cuda/bin/nvcc"]
        assert "blacklist nouveau" in plab.exec(name, "cat /etc/modprobe.d/blacklist-nouveau.conf").stdout
    # the apt source points at the mirror, at NVIDIA's layout
    src = plab.exec("pv-01", "cat /etc/apt/sources.list.d/gpulab-nvidia.list").stdout
    assert f"{plab.http_url}/compute/cuda/repos/debian12/x86_64/ /" in src
    # the workdir with shell metacharacters is a directory name, nothing more
    assert plab.exec("pv-02", f"test -x '{EVIL}/envs/current/bin/python'", check=False).returncode == 0
    assert plab.exec("pv-02", "ls /tmp/pwned1 /tmp/pwned2 /tmp/pwned3 2>/dev/null", check=False).stdout == ""
    assert (
        plab.exec(
            "pv-02", f"'{EVIL}/envs/current/bin/python' -c 'import torch; print(torch.__version__)'"
        ).stdout.strip()
        == "2.13.0+cpu"
    )


def test_second_run_changes_nothing(plab):
    res = invoke(plab, "provision")
    assert res.returncode == 0, res.stdout[-3000:]
    counts = recap(res.stdout)
    assert {n: (c["state"], c["changed"]) for n, c in counts.items()} == {"pv-01": ("ok", 0), "pv-02": ("ok", 0)}
    assert "] changed " not in res.stdout


def test_check_mode_changes_nothing(plab):
    before = {n: state(plab, n) for n in plab.names}
    res = invoke(plab, "provision", "--check", "--host", "pv-02", inventory=plab.inventory_mlperf)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "check mode" in res.stdout
    assert recap(res.stdout)["pv-02"]["changed"] > 0  # it would change things...
    assert {n: state(plab, n) for n in plab.names} == before  # ...and changed none


def test_moving_a_host_to_mlperf_changes_exactly_what_differs(plab):
    other_before = state(plab, "pv-01")
    res = invoke(plab, "provision", "--host", "pv-02", inventory=plab.inventory_mlperf)
    assert res.returncode == 0, res.stdout[-3000:]
    assert changed_tasks(res.stdout, "pv-02") == {
        "nvidia_repo : Add the NVIDIA apt source",  # ubuntu1804 instead of debian12
        "pinned_packages : Remove packages that clash with the NVIDIA driver",  # branch 580 (open) out
        "pinned_packages : Install pinned packages for the NVIDIA driver",  # 410.72 in
        "pinned_packages : Hold the pinned packages of the NVIDIA driver",
        "pinned_packages : Install pinned packages for the CUDA toolkit",  # 10.0 beside 13.0
        "cuda : Make this toolkit the default",
        "pinned_packages : Remove packages that clash with cuDNN",  # cuDNN 9 out, 7 in
        "pinned_packages : Install pinned packages for cuDNN",
        "pinned_packages : Install pinned packages for NCCL",  # 2.3.7
        "python_env : Install the pinned frameworks into the stack's environment",  # envs/mlperf-v0.5
        "gpulab_runner : Create the runner's folder",
        "gpulab_runner : Copy the runner wheel",
        "gpulab_runner : Install the runner into the stack's environment",
        "gpulab_runner : Mark this build as installed",
        "verify : Write the stack as the host reports it",
    }
    stack = stack_json(plab, "pv-02")
    assert versions(stack) == MLPERF and stack["drift"] == [] and stack["stack"] == "mlperf-v0.5"
    assert sorted(stack["cuda"]["installed"].values()) == ["10.0.130", "13.0.2"]  # side by side
    gone = plab.exec(
        "pv-02",
        "dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n' 'nvidia-driver-*' 'libcudnn*' "
        "| awk '$2 ~ /^.i/ {print $1}'",
    ).stdout.split()
    assert sorted(gone) == ["libcudnn7", "libcudnn7-dev", "nvidia-driver-410"]
    # Fabric Manager of branch 580 went with that driver; DCGM (not in mlperf-v0.5) stays as it was
    assert not plab.exec(
        "pv-02", "dpkg-query -W -f '${db:Status-Abbrev}' nvidia-fabricmanager-580", check=False
    ).stdout.startswith("ii")
    assert stack["dcgm"]["version"] == "4.5.2" and stack["fabricmanager"]["version"] is None
    assert "hold" in plab.exec("pv-02", "dpkg --get-selections nvidia-driver-410").stdout
    assert state(plab, "pv-01") == other_before


def test_audit_passes_clean_hosts_and_finds_a_hand_installed_cudnn(plab):
    res = invoke(plab, "audit", inventory=plab.inventory_mlperf)
    assert res.returncode == 0, res.stdout
    assert re.search(r"^pv-01\s+current\s+no drift$", res.stdout, re.M)
    assert re.search(r"^pv-02\s+mlperf-v0.5\s+no drift$", res.stdout, re.M)
    plab.ssh(
        "pv-01",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
        "libcudnn9-cuda-13=9.18.1.3-1 libcudnn9-dev-cuda-13=9.18.1.3-1",
        timeout=180,
    )
    res = invoke(plab, "audit", inventory=plab.inventory_mlperf)
    assert res.returncode == 1
    assert re.search(r"^pv-01\s+current\s+cudnn\s+expected 9.19.0.56\s+found 9.18.1.3$", res.stdout, re.M)
    assert re.search(r"^pv-02\s+mlperf-v0.5\s+no drift$", res.stdout, re.M)
    res = invoke(plab, "audit", "--json", "--host", "pv-01", inventory=plab.inventory_mlperf)
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    assert doc["ok"] is False
    assert doc["hosts"]["pv-01"]["drift"] == [{"component": "cudnn", "expected": "9.19.0.56", "found": "9.18.1.3"}]
    installed = doc["hosts"]["pv-01"]["installed"]  # DCGM and Fabric Manager read back from the host
    assert (installed["dcgm"], installed["fabricmanager"], installed["fabricmanager_service"]) == (
        "4.5.2",
        "580.159.04",
        "inactive",
    )
    assert (installed["nccl-tests"], installed["nvbandwidth"]) == ("2.19.6", "0.8")  # from the version markers


def test_unknown_and_changed_host_keys_are_refused(plab, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text(f"pv-01,{plab.hosts['pv-01'].address} {wrong}\n")  # pv-01 changed, pv-02 unknown
    control = tempfile.mkdtemp(prefix="gpulab-cp-", dir="/tmp")  # no open master connection to reuse
    inv = tmp_path / "inventory.yml"
    inv.write_text(
        plab.inventory.read_text().replace(str(plab.known_hosts), str(known)).replace(str(plab.control_dir), control)
    )
    before = {n: state(plab, n) for n in plab.names}
    res = invoke(plab, "provision", inventory=inv, env={"ANSIBLE_SSH_CONTROL_PATH_DIR": control})
    assert res.returncode == 1
    counts = recap(res.stdout)
    assert counts["pv-01"]["state"] == counts["pv-02"]["state"] == "unreachable"
    assert re.search(rf"reason: .*host key of pv-01 CHANGED.*{re.escape(str(known))}", res.stdout)
    assert re.search(r"reason: .*host key of pv-02 is UNKNOWN", res.stdout)
    # the strict probe lab.hosts.provision uses when Ansible's message hides the key check (pipelining)
    from lab.hosts.hostkeys import probe_host_key

    probe = {
        n: probe_host_key(n, plab.hosts[n].address, 22, "root", str(plab.private_key), str(known)) for n in plab.names
    }
    assert "host key of pv-01 CHANGED" in probe["pv-01"] and "host key of pv-02 is UNKNOWN" in probe["pv-02"]
    assert (
        probe_host_key("pv-01", plab.hosts["pv-01"].address, 22, "root", str(plab.private_key), str(plab.known_hosts))
        is None
    )
    assert known.read_text() == f"pv-01,{plab.hosts['pv-01'].address} {wrong}\n"
    assert {n: state(plab, n) for n in plab.names} == before


def test_validate_runs_dcgm_and_checks_fabric_manager(plab, tmp_path):
    """`invoke validate` on pv-01 (`current`, NVSwitch hosts in this lab's profiles): the stand-in dcgmi's
    results are check records beside gpulab's own, and Fabric Manager is checked (version, service)."""
    spec = {
        "gpus": 2,
        "driver": "580.159.04",
        "results": {
            "memory": {
                "1": {
                    "status": "Fail",
                    "error_id": 52,
                    "error_category": 10,
                    "error_severity": 2,
                    "warning": "A memory mismatch was detected on GPU 1, but no error was reported by CUDA or NVML.",
                }
            }
        },
    }
    plab.exec(
        "pv-01",
        f"echo '{json.dumps(spec)}' > /etc/gpulab-testlab/dcgm-diag.json && "
        "nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg",
    )

    def validate(out):
        res = invoke(
            plab, "validate", "--host", "pv-01", "--level", "quick", "--dcgm-level", "2", "--json", "--out", str(out)
        )
        assert res.returncode == 1, res.stderr  # the lab's hosts have no GPU the runner can use
        host = json.loads(res.stdout)["hosts"]["pv-01"]
        return {c["check"]: c for c in host["checks"]}, host

    checks, host = validate(tmp_path / "a")
    assert host["reason"].startswith("GPU present: no NVIDIA GPU")
    assert [(n, c["verdict"]) for n, c in checks.items() if n.startswith(("DCGM", "Fabric"))] == [
        ("DCGM version", "PASS"),
        ("DCGM software (GPU 0)", "PASS"),
        ("DCGM software (GPU 1)", "PASS"),
        ("DCGM pcie (GPU 0)", "PASS"),
        ("DCGM pcie (GPU 1)", "PASS"),
        ("DCGM memory (GPU 0)", "PASS"),
        ("DCGM memory (GPU 1)", "FAIL"),
        ("Fabric Manager version", "PASS"),
        ("Fabric Manager service", "PASS"),
    ]
    memory = checks["DCGM memory (GPU 1)"]
    assert memory["dcgm_code"] == "DCGM_FR_FAULTY_MEMORY" and "memory mismatch" in memory["reason"]
    saved = list((tmp_path / "a").glob("*/pv-01/dcgm-diag.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["metadata"]["version"] == "4.5.2"
    # Fabric Manager stopped: its service check fails, naming the state
    plab.exec("pv-01", "kill $(grep -lx nv-fabricmanage /proc/[0-9]*/comm | cut -d/ -f3)")
    checks, _ = validate(tmp_path / "b")
    assert checks["Fabric Manager service"]["verdict"] == "FAIL"
    assert checks["Fabric Manager service"]["reason"].startswith("nvidia-fabricmanager is inactive")


def test_burnin_finds_the_built_tools(plab, tmp_path):
    """runner.bwtools on pv-01 finds the binaries the role built in /opt/gpulab/tools/bin and reads their
    output (the stand-ins print the real forms for the host's two fake GPUs)."""
    code = (
        "import json, pathlib, sys; from runner import bwtools; out = pathlib.Path(sys.argv[1]); "
        "print(json.dumps({'nccl': bwtools.run_nccl_tests([0, 1], out, max_bytes='64M'), "
        "'nvb': bwtools.run_nvbandwidth([0, 1], out)}))"
    )
    res = plab.ssh("pv-01", f'mkdir -p /tmp/bw && /var/lib/gpulab/envs/current/bin/python -c "{code}" /tmp/bw')
    doc = json.loads(res.stdout)
    nccl, nvb = doc["nccl"], doc["nvb"]
    assert (nccl["path"], nccl["version"], nccl["ngpus"], nccl["nccl_version"]) == (
        "/opt/gpulab/tools/bin/all_reduce_perf",
        "2.19.6",
        2,
        22809,
    )
    assert nccl["busbw_gbs"] > 30 and nccl["wrong"] == 0
    assert (nvb["path"], nvb["version"]) == ("/opt/gpulab/tools/bin/nvbandwidth", "v0.8")
    assert nvb["gpus"] == {
        "0": {"h2d_gbs": 25.0, "d2h_gbs": 25.0, "d2d_read_min_gbs": 200.0},
        "1": {"h2d_gbs": 25.0, "d2h_gbs": 25.0, "d2d_read_min_gbs": 200.0},
    }
    _faulty_nvbandwidth_gets_validate_s_verdicts(plab)


def _faulty_nvbandwidth_gets_validate_s_verdicts(plab):
    """The built stand-in with faults planted in the host's fake-gpus.json prints nvbandwidth's other real
    forms (tests/samples/nvbandwidth/SOURCE.md); runner.bwtools reads them there and lab.validate judges
    them: a failed data check (its lines before the document) FAILs "nvbandwidth data check"; a GPU without
    peer access ("N/A" in its row and column) FAILs its P2P check where the references require P2P bandwidth
    (H200), and its peers do not."""
    from lab.validate import gpurefs, toolchecks

    h200 = {"name": "NVIDIA H200", "memory_mib": 143771}
    code = (
        "import json, pathlib, sys; from runner import bwtools; out = pathlib.Path(sys.argv[1]); "
        "print(json.dumps(bwtools.run_nvbandwidth(list(range(int(sys.argv[2]))), out)))"
    )
    refs = gpurefs.load_references()

    def run(gpus):
        plab.exec("pv-01", f"echo '{json.dumps(gpus)}' > /etc/gpulab-testlab/fake-gpus.json")
        res = plab.ssh("pv-01", f'/var/lib/gpulab/envs/current/bin/python -c "{code}" /tmp/bw {len(gpus)}')
        nvb = json.loads(res.stdout)
        probe = {"gpu_count": len(gpus), "gpus": [{"index": i, "name": g["name"]} for i, g in enumerate(gpus)]}
        return {"gpus": {str(i): {} for i in range(len(gpus))}, "tools": {"nvbandwidth": nvb}}, probe

    try:
        doc, probe = run([h200, {**h200, "corrupts_in": "device_to_host_memcpy_ce"}])
        nvb = doc["tools"]["nvbandwidth"]
        assert nvb["exit_code"] == 1 and nvb["corruption"]["testcase"] == "device_to_host_memcpy_ce", nvb
        checks = {c["check"]: c for c in toolchecks.host_tool_checks(doc, probe, refs)}
        assert checks["nvbandwidth data check"]["verdict"] == "FAIL", checks
        assert "Invalid value when checking the pattern" in checks["nvbandwidth data check"]["reason"]
        assert "nvbandwidth" not in checks  # the data check, not "the tool failed"
        doc, probe = run([h200, h200, {**h200, "peer_access": False}])
        # H200's reference with its P2P floor under the stand-in's 200 GB/s: only the missing peer access fails
        ref = copy.deepcopy(refs["models"]["H200"])
        ref["metrics"][toolchecks.P2P_METRIC].update(value=150.0, source="the test: below the stand-in's figure")
        p2p = {
            i: {c["check"]: c for c in toolchecks.gpu_tool_checks(doc, i, ref)}[toolchecks.P2P_LABEL] for i in range(3)
        }
        assert [p2p[i]["verdict"] for i in range(3)] == ["PASS", "PASS", "FAIL"], p2p
        assert "no peer access to GPU 0, 1 (nvbandwidth: N/A)" in p2p[2]["reason"]
    finally:
        plab.exec("pv-01", f"echo '{json.dumps(provisioning_lab.GPUS)}' > /etc/gpulab-testlab/fake-gpus.json")


def test_tool_sources_without_a_matching_sum_are_refused(plab, tmp_path):
    """A wrong SHA256 (bwtools_sha256, pv-01) and no SHA256 at all (no profile sum, no mirror: pv-02) each
    fail the host in the bwtools role with one line naming the tool, and leave the built tools as they
    were. (The profile's role and bwtools alone, as provision.yml runs them, on both hosts at once.)"""
    from lab.hosts.ansible import run_playbook

    playbook = tmp_path / "bwtools.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Build the tools",
                    "hosts": "all",
                    "gather_facts": True,
                    "gather_subset": ["min"],
                    "roles": ["stack_profile", "bwtools"],
                }
            ]
        )
    )
    inv = yaml.safe_load(plab.inventory.read_text())
    _find_host(inv, "pv-01")["bwtools_sha256"] = {"nccl-tests": "0" * 64}
    _find_host(inv, "pv-02")["bwtools_mirror"] = ""
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
    tools = "sha256sum /opt/gpulab/tools/bin/* /opt/gpulab/tools/*.json"
    before = {n: plab.exec(n, tools).stdout for n in plab.names}
    res = run_playbook(
        playbook,
        tmp_path / "inventory.yml",
        extravars={"stack_profile_dir": str(plab.stacks)},
        artifacts_root=tmp_path / "artifacts",
        quiet=True,
        envvars=plab.ansible_env(),
    )
    url = "/NVIDIA/nccl-tests/archive/refs/tags/v2.19.6.tar.gz"
    for name, message in (
        (
            "pv-01",
            rf"nccl-tests 2\.19\.6: {re.escape(plab.http_url + url)}: The checksum for \S+ did not match "
            rf"0{{64}}; it was {plab.tool_sums['nccl-tests']}\.; not built$",
        ),
        (
            "pv-02",
            rf"nccl-tests 2\.19\.6: no SHA256 for {re.escape('https://github.com' + url)} \(the stack profile "
            r"has none, bwtools_sha256 names none, and no gpulab_mirror serves <tarball>\.sha256\): refusing "
            r"to build unverified sources$",
        ),
    ):
        host = res.hosts[name]
        assert host.state == "failed" and len(host.failures) == 1, host.failures
        assert re.search(message, host.reason), host.reason
    assert {n: plab.exec(n, tools).stdout for n in plab.names} == before
