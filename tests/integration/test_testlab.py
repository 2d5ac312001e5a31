"""The test lab itself: hosts, strict host keys through Ansible, the apt repository,
the wheelhouse, faults, teardown and crash cleanup. Real SSH, real Ansible, real apt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import ansible_runner
import pytest

from tests.testlab.lab import Lab, cleanup_stale, lab_objects, pids_mentioning
from tests.testlab.util import REPO, run, run_dir

pytestmark = pytest.mark.lab


def ansible(lab: Lab, tmp_path: Path, module: str, args: str = "", inventory: Path | None = None):
    """Run one ad-hoc module on all hosts through ansible-runner; (runner, {host: [events]})."""
    pdd = tmp_path / f"runner-{module}-{time.monotonic_ns()}"
    pdd.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(pdd),
        module=module,
        module_args=args or None,
        host_pattern="all",
        inventory=str(inventory or lab.inventory),
        envvars=lab.ansible_env(),
        quiet=True,
        timeout=180,
    )
    per_host: dict[str, list] = {}
    for ev in r.events:
        host = ev.get("event_data", {}).get("host")
        if host and ev["event"].startswith("runner_on_"):
            per_host.setdefault(host, []).append(ev)
    return r, per_host


def outcome(events) -> str:
    return events[-1]["event"].removeprefix("runner_on_") if events else "none"


@pytest.fixture(scope="module")
def lab2(testlab):
    return testlab(2)


def test_hosts_answer_on_their_own_address_only(lab2):
    peers = {h.name: h.address for h in lab2.hosts.values()}
    for name, host in lab2.hosts.items():
        out = lab2.ssh(name, "hostname; ss -Htln; ip -o -4 addr show; ip -4 route").stdout
        lines = out.splitlines()
        assert lines[0] == name
        listening = [ln.split()[3] for ln in lines if ln.startswith("LISTEN")]
        assert listening == [f"{host.address}:22"]
        addrs = sorted(ln.split()[3] for ln in lines if " inet " in ln)
        assert addrs == sorted(["127.0.0.1/8", f"{host.address}/24"])
        assert f"default via {lab2.gateway} dev eth0" in out
    # the hosts see each other and the controller, and nobody answers at an unused address
    lab2.exec("lab-01", f"python3 -c \"import socket; socket.create_connection(('{peers['lab-02']}', 22), 3)\"")
    res = lab2.exec(
        "lab-01",
        f"python3 -c \"import socket; socket.create_connection(('{lab2.controller}', {lab2.http_port}), 3)\"",
        check=False,
    )
    assert res.returncode == 0, res.stderr
    unused = str(lab2.net.network_address + 200)
    res = lab2.exec(
        "lab-01", f"python3 -c \"import socket; socket.create_connection(('{unused}', 22), 1)\"", check=False
    )
    assert res.returncode != 0
    # in the root namespace the lab's /24 goes to the bridge, with an unreachable fallback
    routes = run(["ip", "-4", "route", "show", str(lab2.net)]).stdout
    assert f"dev {lab2.bridge}" in routes
    assert "unreachable" in run(["ip", "-4", "route", "show", "type", "unreachable", str(lab2.net)]).stdout


def test_each_host_has_its_own_host_key(lab2):
    keys = {lab2.exec(n, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for n in lab2.names}
    assert len(keys) == 2
    scanned = run(["ssh-keyscan", "-t", "ed25519", lab2.hosts["lab-01"].address]).stdout.split()
    assert scanned[2] == lab2.hosts["lab-01"].host_key_pub.split()[1]


def test_ansible_ping_reaches_every_host(lab2, tmp_path):
    t0 = time.monotonic()
    r, per_host = ansible(lab2, tmp_path, "ping")
    elapsed = time.monotonic() - t0
    print(f"ansible ping, 2 hosts: {elapsed:.1f}s")
    assert r.status == "successful", r.stdout.read()
    assert sorted(per_host) == ["lab-01", "lab-02"]
    for events in per_host.values():
        assert outcome(events) == "ok"
        assert events[-1]["event_data"]["res"]["ping"] == "pong"


def test_changed_or_unknown_host_key_is_refused(testlab, tmp_path):
    lab = testlab(names=["key-ok", "key-changed", "key-unknown"])
    # a known_hosts where one host has another key and one is missing
    other = tmp_path / "other"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)])
    wrong_key = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    h = lab.hosts
    known = tmp_path / "known_hosts"
    known.write_text(
        f"key-ok,{h['key-ok'].address} {h['key-ok'].host_key_pub}\nkey-changed,{h['key-changed'].address} {wrong_key}\n"
    )
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(lab.inventory.read_text().replace(str(lab.known_hosts), str(known)))
    marker = "/root/a-task-ran-here"
    r, per_host = ansible(lab, tmp_path, "command", f"touch {marker}", inventory=inventory)
    assert r.status == "failed"
    assert outcome(per_host["key-ok"]) == "ok"
    for bad in ("key-changed", "key-unknown"):
        assert outcome(per_host[bad]) == "unreachable"
        assert "Host key verification failed" in per_host[bad][-1]["event_data"]["res"]["msg"]
    ran = {n: lab.exec(n, f"test -e {marker}", check=False).returncode == 0 for n in lab.names}
    assert ran == {"key-ok": True, "key-changed": False, "key-unknown": False}
    # the file itself was not touched (strict checking never adds or rewrites entries)
    assert "key-unknown" not in known.read_text()


def test_host_installs_and_upgrades_a_standin_driver_from_the_local_repo(lab2):
    name = "lab-02"
    lab2.ssh(
        name,
        f"echo '{lab2.apt_source_line}' > /etc/apt/sources.list.d/gpulab-testlab.list && "
        "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
        "nvidia-driver-550=550.127.05-0ubuntu0.22.04.1 nvidia-utils-550=550.127.05-0ubuntu0.22.04.1 "
        "libnvidia-compute-550=550.127.05-0ubuntu0.22.04.1 cuda-toolkit-12-4 cuda-10-0",
        timeout=180,
    )
    versions = lab2.ssh(
        name, "dpkg-query -W -f '${Package} ${Version}\\n' nvidia-driver-550 cuda-toolkit-12-4 cuda-nvcc-12-4"
    ).stdout.splitlines()
    assert sorted(versions) == [
        "cuda-nvcc-12-4 12.4.131-1",
        "cuda-toolkit-12-4 12.4.1-1",
        "nvidia-driver-550 550.127.05-0ubuntu0.22.04.1",
    ]
    # no GPU, no kernel driver: nvidia-smi fails the way the real one does
    res = lab2.ssh(name, "nvidia-smi", check=False)
    assert res.returncode == 9
    assert res.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
    # with recorded GPUs it prints the real formats
    gpus = json.dumps([{"name": "Tesla T4", "memory_mib": 15360}, {"name": "Tesla T4"}])
    lab2.ssh(name, f"mkdir -p /etc/gpulab-testlab && echo '{gpus}' > /etc/gpulab-testlab/fake-gpus.json")
    csv = lab2.ssh(name, "nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader").stdout
    assert csv.splitlines() == ["0, Tesla T4, 550.127.05, 15360 MiB", "1, Tesla T4, 550.127.05, 15360 MiB"]
    table = lab2.ssh(name, "nvidia-smi").stdout
    assert "Driver Version: 550.127.05" in table and "CUDA Version: 12.4" in table
    assert (
        lab2.ssh(name, "readlink /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").stdout.strip()
        == "libnvidia-ml.so.550.127.05"
    )
    cuda = json.loads(lab2.ssh(name, "cat /usr/local/cuda-12.4/version.json").stdout)
    assert cuda["cuda"]["version"] == "12.4.1"
    nvcc = lab2.ssh(name, "/usr/local/cuda-12.4/bin/nvcc --version").stdout
    assert "Cuda compilation tools, release 12.4, V12.4.131" in nvcc
    assert "release 10.0, V10.0.130" in lab2.ssh(name, "/usr/local/cuda-10.0/bin/nvcc --version").stdout
    assert lab2.ssh(name, "cat /usr/local/cuda-10.0/version.txt").stdout == "CUDA Version 10.0.130\n"
    # upgrade to the newer driver of the branch
    lab2.ssh(name, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q nvidia-driver-550", timeout=180)
    assert (
        lab2.ssh(name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout
        == "550.144.03\n550.144.03\n"
    )
    assert lab2.ssh(name, "ls /usr/lib/x86_64-linux-gnu/ | grep libnvidia-ml").stdout.split() == [
        "libnvidia-ml.so.1",
        "libnvidia-ml.so.550.144.03",
    ]
    # the other host was not touched
    assert lab2.exec("lab-01", "command -v nvidia-smi", check=False).returncode != 0


def test_python_layer_and_air_gapped_wheelhouse(lab2):
    name = "lab-01"
    out = lab2.ssh(
        name,
        "python3 -c 'import torch, numpy, mlperf_logging, pynvml, yaml; "
        "print(torch.__version__, torch.ones(2).sum().item())'",
    ).stdout
    assert out.split() == ["2.13.0+cpu", "2.0"]
    # the layer is shared and read-only in effect: importing torch wrote nothing to the host's own layer
    upper = lab2.hosts[name].dir / "mnt" / "upper"
    written = run(lab2.nsenter(name, root=False) + ["find", str(upper), "-name", "*.pyc"]).stdout
    assert written == ""
    pip = f"--no-index --trusted-host {lab2.controller}"
    lab2.ssh(
        name,
        "python3 -m venv /root/v1 && /root/v1/bin/pip install -q "
        f"{pip} --find-links {lab2.find_links_url} nvidia-ml-py pyyaml",
        timeout=180,
    )
    lab2.ssh(
        name,
        "python3 -m venv /root/v2 && /root/v2/bin/pip install -q "
        f"--index-url {lab2.index_url} --trusted-host {lab2.controller} nvidia-ml-py",
        timeout=180,
    )
    assert (
        lab2.ssh(
            name, "/root/v1/bin/python -c 'import pynvml, yaml' && /root/v2/bin/python -c 'import pynvml'"
        ).returncode
        == 0
    )
    # the hosts reach no other index: without the wheelhouse pip finds nothing
    res = lab2.ssh(name, "/root/v1/bin/pip install -q --no-index rich", check=False, timeout=120)
    assert res.returncode != 0


def test_killed_sshd_makes_one_host_unreachable_and_the_others_stay(lab2, tmp_path):
    # a detached process, as a sweep starts its workloads
    lab2.ssh("lab-01", "setsid nohup sleep 300 > /tmp/w.log 2>&1 < /dev/null & echo $! > /tmp/w.pid")
    session = subprocess.Popen(
        ["ssh", *lab2.ssh_options(), f"root@{lab2.hosts['lab-01'].address}", "sleep 60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)
    lab2.kill_sshd("lab-01")
    try:
        assert session.wait(timeout=15) != 0  # the open session dropped with sshd
        assert not lab2.reachable("lab-01")
        r, per_host = ansible(lab2, tmp_path, "ping")
        assert outcome(per_host["lab-01"]) == "unreachable"
        assert outcome(per_host["lab-02"]) == "ok"
        # the host itself is still up: its detached work goes on
        assert lab2.exec("lab-01", "kill -0 $(cat /tmp/w.pid)", check=False).returncode == 0
    finally:  # a failure here must not leave lab-01 without sshd for the file's later tests
        lab2.start_sshd("lab-01")
    r, per_host = ansible(lab2, tmp_path, "ping")
    assert r.status == "successful"
    assert lab2.exec("lab-01", "kill -0 $(cat /tmp/w.pid)", check=False).returncode == 0


def test_stopped_sshd_refuses_new_connections_but_keeps_open_sessions(lab2):
    session = subprocess.Popen(
        ["ssh", *lab2.ssh_options(), f"root@{lab2.hosts['lab-02'].address}", "sleep 3; echo still-here"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1)
    lab2.stop_sshd("lab-02")
    try:
        res = lab2.ssh("lab-02", "true", check=False)
        assert res.returncode == 255 and "Connection refused" in res.stderr
        assert session.communicate(timeout=20)[0].strip() == "still-here"
        assert lab2.ssh("lab-01", "hostname").stdout.strip() == "lab-01"
    finally:
        lab2.start_sshd("lab-02")
    assert lab2.ssh("lab-02", "hostname").stdout.strip() == "lab-02"


def test_disconnected_host_times_out(lab2):
    lab2.disconnect("lab-01")
    try:
        res = lab2.ssh("lab-01", "true", check=False, options=["-o", "ConnectTimeout=2"])
        assert res.returncode == 255 and "timed out" in res.stderr
    finally:
        lab2.reconnect("lab-01")
    assert lab2.ssh("lab-01", "hostname").stdout.strip() == "lab-01"


def test_inventory_carries_groups_and_vars(testlab, tmp_path):
    lab = testlab(
        names=["inv-01", "inv-02", "inv-03"],
        groups={"t4": ["inv-01", "inv-02"], "v100": ["inv-03"]},
        group_vars={"t4": {"gpulab_gpu_model": "T4", "gpulab_gpu_count": 4}},
        host_vars={"inv-03": {"gpulab_gpu_model": "V100-PCIE-16GB", "gpulab_gpu_count": 3}},
        all_vars={"gpulab_stack": "current", "repo_url": lambda lab: lab.apt_url},
    )
    r, per_host = ansible(
        lab,
        tmp_path,
        "debug",
        "msg={{ group_names | join(',') }}|{{ gpulab_gpu_model }}|"
        "{{ gpulab_gpu_count }}|{{ gpulab_stack }}|{{ repo_url }}",
    )
    assert r.status == "successful"
    msgs = {h: ev[-1]["event_data"]["res"]["msg"] for h, ev in per_host.items()}
    assert msgs == {
        "inv-01": f"t4|T4|4|current|{lab.apt_url}",
        "inv-02": f"t4|T4|4|current|{lab.apt_url}",
        "inv-03": f"v100|V100-PCIE-16GB|3|current|{lab.apt_url}",
    }
    # facts: the default route via an address nobody owns fills ansible_default_ipv4
    r, per_host = ansible(lab, tmp_path, "setup", "filter=ansible_default_ipv4")
    assert r.status == "successful"
    for name, events in per_host.items():
        facts = events[-1]["event_data"]["res"]["ansible_facts"]["ansible_default_ipv4"]
        assert (facts["address"], facts["gateway"]) == (lab.hosts[name].address, lab.gateway)


def test_two_labs_run_side_by_side(testlab):
    a = testlab(names=["same-01"])
    b = testlab(names=["same-01"])
    assert a.net != b.net and a.bridge != b.bridge
    assert a.hosts["same-01"].netns != b.hosts["same-01"].netns
    assert a.ssh("same-01", "hostname").stdout == b.ssh("same-01", "hostname").stdout == "same-01\n"
    # each lab's key opens only its own hosts
    res = run(["ssh", *a.ssh_options(), f"root@{b.hosts['same-01'].address}", "true"], check=False)
    assert res.returncode == 255


def test_teardown_leaves_nothing_behind(testlab_images, tmp_path):
    lab = Lab(["gone-01", "gone-02"]).up()
    r, _ = ansible(lab, tmp_path, "ping")  # leaves ssh control masters behind on purpose
    assert r.status == "successful"
    state, lab_id, net = lab.state_dir, lab.id, str(lab.net)
    assert lab_objects(lab_id)["pids"]
    lab.down()
    assert lab_objects(lab_id) == {"netns": [], "links": [], "pids": []}
    assert not state.exists()
    assert not (run_dir() / "labs" / f"{lab_id}.json").exists()
    assert run(["ip", "-4", "route", "show", "table", "all", net]).stdout == ""
    assert pids_mentioning(str(state)) == []  # processes that vanish during the scan count as gone


def test_a_crashed_lab_is_cleaned_by_the_next_session(testlab, testlab_images):
    survivor = testlab(names=["alive-01"])  # a live lab of another session must survive the cleanup
    code = textwrap.dedent("""
        import os, sys
        from tests.testlab.lab import Lab
        lab = Lab(["crash-01", "crash-02"]).up()
        print(lab.id, flush=True)
        os.kill(os.getpid(), 9)
    """)
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert res.returncode == -signal.SIGKILL, res.stderr
    lab_id = res.stdout.split()[0]
    left = lab_objects(lab_id)
    assert len(left["netns"]) == 2 and len(left["links"]) == 3 and left["pids"]
    removed = cleanup_stale()
    assert lab_id in removed
    assert lab_objects(lab_id) == {"netns": [], "links": [], "pids": []}
    assert not (run_dir() / lab_id).exists()
    assert survivor.ssh("alive-01", "hostname").stdout == "alive-01\n"
