"""lab.sweep.driver planning and state, lab.sweep.topology, lab.sweep.hostlock and lab.hosts.remote quoting: plain data in, plain data out.

The host lock and the process-tag stop run their real shell scripts on this
machine through lab.hosts.remote.LocalRemote (the same code path as over SSH)."""

import json
import os
import shlex
import subprocess
import sys
import time

import pytest

from lab.sweep import hostlock
from lab.hosts import remote
from lab.sweep import driver
from lab.sweep import hostrun
from lab.sweep import plan as pl
from lab.sweep import state as sweepstate
from lab.sweep import topology
from lab.core.errors import ConfigError
from lab.hosts.inventory import Host
from tests.testlab.util import exec_done
from rundirs import write_run


def host(name="h1", count=3, connection="ssh", workdir="/var/lib/gpulab"):
    return Host(
        name=name,
        address="192.0.2.1",
        port=22,
        user="root",
        connection=connection,
        gpu_model="V100",
        gpu_count=count,
        stack="current",
        groups=("v100",),
        workdir=workdir,
        python=None,
        ssh_key=None,
        known_hosts="/dev/null",
    )


def test_plan_is_hosts_x_workloads_x_gpus_x_seeds_with_stable_ids():
    runs = pl.plan([host("a"), host("b")], ["ncf", "gnmt"], "1,3", 2)
    assert len(runs) == 2 * 2 * 2 * 2
    assert runs[0].run_id == "ncf-ttt-tiny-1gpu-s1"
    assert len({(r.host, r.run_id) for r in runs}) == len(runs)
    again = pl.plan([host("a"), host("b")], ["ncf", "gnmt"], "1,3", 2)
    assert [r.run_id for r in again] == [r.run_id for r in runs]


def test_all_gpus_means_every_count_and_cpu_hosts_run_on_cpu():
    assert [r.gpus for r in pl.plan([host(count=3)], ["ncf"], "all", 1)] == [1, 2, 3]
    assert [r.run_id for r in pl.plan([host(count=0)], ["ncf"], None, 1)] == ["ncf-ttt-tiny-cpu-s1"]
    assert [r.gpus for r in pl.plan([host(count="auto")], ["ncf"], "2", 1)] == [2]
    # an 'auto' host: its count comes from its probe (the topology)
    topo_doc = {"gpu_count": 2, "gpus": [{"index": 0}, {"index": 1}]}
    runs = pl.plan([host(count="auto")], ["ncf"], "all", 1, topologies={"h1": topo_doc})
    assert [(r.gpus, r.gpu_ids) for r in runs] == [(1, [0]), (2, [0, 1])]


def test_mlperf_seeds_come_from_the_benchmark_data():
    runs = pl.plan([host(count=1)], ["resnet50", "gnmt", "ncf"], "1", "mlperf")
    per = {w: sum(1 for r in runs if r.workload == w) for w in ("resnet50", "gnmt", "ncf")}
    from lab.core.mlperf import Rules

    rules = Rules()
    assert per == {w: rules.benchmarks[rules.benchmark(w)].runs_required for w in per}
    assert per["resnet50"] < per["gnmt"] < per["ncf"]
    with pytest.raises(ConfigError, match="'burnin' is no MLPerf benchmark"):
        pl.plan([host()], ["burnin"], "1", "mlperf")


def test_multi_node_units_and_run_ids():
    hosts = [host(f"n{i}", count=2) for i in range(4)]
    runs = pl.plan(hosts, ["ncf"], "2", 1, nodes=2)
    assert [r.nodes for r in runs] == [["n0", "n1"], ["n2", "n3"]]
    assert runs[0].run_id == "ncf-ttt-tiny-2node-2gpu-s1" and runs[0].host == "n0"
    with pytest.raises(ConfigError, match="--nodes 3: 4 hosts selected .* not a multiple of 3"):
        pl.plan(hosts, ["ncf"], "1", 1, nodes=3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(gpus="4"), "4 GPUs asked but h1 has 3"),
        (dict(gpus="0"), "'0' is not a GPU count"),
        (dict(gpus="two"), "'two' is not a GPU count"),
        (dict(workloads=["ncf; rm -rf /"]), "is not a workload name"),
        (dict(workloads=["$(touch x)"]), "is not a workload name"),
        (dict(seeds=0), "--seeds"),
        (dict(seeds="many"), "--seeds: 'many'"),
        (dict(mode="fast"), "--mode: 'fast'"),
        (dict(scale="huge"), "--scale: 'huge'"),
        (dict(nodes=0), "--nodes"),
    ],
)
def test_bad_plan_values(kwargs, message):
    args = dict(hosts=[host()], workloads=["ncf"], gpus="1", seeds=1)
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        pl.plan(**args)


# --------------------------------------------------------------------------- topology


def probe_doc(gpus):
    return {"gpus": [{"index": i, "pci_bus_id": bus, "numa_node": numa} for i, bus, numa in gpus]}


# An R740-like box: two sockets; GPUs 0,1 under root pci0000:3a (NUMA 0), 2 under pci0000:5d (NUMA 0),
# 3 under pci0000:ae (NUMA 1).
R740 = probe_doc(
    [(0, "00000000:3B:00.0", 0), (1, "00000000:3C:00.0", 0), (2, "00000000:5E:00.0", 0), (3, "00000000:AF:00.0", 1)]
)
R740_ROOTS = {
    "00000000:3B:00.0": "pci0000:3a",
    "00000000:3C:00.0": "pci0000:3a",
    "00000000:5E:00.0": "pci0000:5d",
    "00000000:AF:00.0": "pci0000:ae",
}


def test_topology_prefers_one_pcie_root_then_one_numa_node():
    gpus = topology.from_probe(R740, R740_ROOTS)
    assert topology.choose(gpus, 1) == [2]  # the tightest group that fits: a root with one GPU
    assert topology.choose(gpus, 2) == [0, 1]  # the root with two
    assert topology.choose(gpus, 3) == [0, 1, 2]  # NUMA node 0
    assert topology.choose(gpus, 4) == [0, 1, 2, 3]
    assert topology.choose(gpus, 0) == []
    with pytest.raises(ConfigError, match="5 GPUs asked but the host has 4"):
        topology.choose(gpus, 5)
    # without sysfs roots, NUMA nodes decide; without either, the lowest indices
    assert topology.choose(topology.from_probe(R740), 2) == [0, 1]
    flat = topology.from_probe(probe_doc([(0, None, None), (1, None, None), (2, None, None)]))
    assert topology.choose(flat, 2) == [0, 1]
    two_numa = topology.from_probe(probe_doc([(0, "a", 1), (1, "b", 0), (2, "c", 0)]))
    assert topology.choose(two_numa, 2) == [1, 2]


# An 8-GPU two-socket box: GPUs 0-3 on NUMA node 0, 4-7 on node 1, two GPUs per PCIe root
# (a switch each): 0,1 | 2,3 | 4,5 | 6,7. And a 2-GPU box with one GPU per socket.
EIGHT = probe_doc([(i, f"00000000:{0x18 + 0x20 * (i // 2) + i % 2:02X}:00.0", i // 4) for i in range(8)])
EIGHT_ROOTS = {g["pci_bus_id"]: f"pci0000:{0x17 + 0x20 * (g['index'] // 2):02x}" for g in EIGHT["gpus"]}
TWO = probe_doc([(0, "00000000:3B:00.0", 0), (1, "00000000:AF:00.0", 1)])
TWO_ROOTS = {"00000000:3B:00.0": "pci0000:3a", "00000000:AF:00.0": "pci0000:ae"}


@pytest.mark.parametrize(
    "doc, roots, want",
    [
        (TWO, TWO_ROOTS, {1: [0], 2: [0, 1]}),
        (R740, R740_ROOTS, {1: [2], 2: [0, 1], 3: [0, 1, 2], 4: [0, 1, 2, 3]}),
        (
            EIGHT,
            EIGHT_ROOTS,
            {
                1: [0],
                2: [0, 1],
                3: [0, 1, 2],
                4: [0, 1, 2, 3],
                5: [0, 1, 2, 3, 4],
                6: [0, 1, 2, 3, 4, 5],
                7: [0, 1, 2, 3, 4, 5, 6],
                8: list(range(8)),
            },
        ),
    ],
    ids=["2gpu", "4gpu", "8gpu"],
)
def test_all_gpus_sweeps_every_count_on_the_gpus_the_topology_picks(doc, roots, want):
    """``invoke sweep --gpus all`` on a host whose probe found 2, 4 or 8 GPUs."""
    gpus = topology.from_probe(doc, roots)
    t = {"gpu_count": len(gpus), "gpus": [vars(g) for g in gpus]}
    runs = pl.plan([host(count="auto")], ["ncf", "resnet50"], "all", 1, mode="throughput", topologies={"h1": t})
    assert [(r.workload, r.gpus) for r in runs] == [(w, n) for w in ("ncf", "resnet50") for n in want]
    assert {r.gpus: r.gpu_ids for r in runs} == want
    assert all(r.state == "planned" for r in runs)
    assert [r.run_id for r in runs if r.workload == "ncf"] == [f"ncf-throughput-tiny-{n}gpu-s1" for n in want]
    # what the runner is told: explicit indices (one index keeps its comma)
    assert topology.gpus_arg(want[1]) == f"{want[1][0]},"
    # the chosen GPUs of a count share a PCIe root when one root has enough of them, else a NUMA node
    for n, ids in want.items():
        by_root = {roots[doc["gpus"][i]["pci_bus_id"]] for i in ids}
        by_numa = {doc["gpus"][i]["numa_node"] for i in ids}
        fits_one_root = any(sum(1 for g in gpus if g.root == r) >= n for r in {g.root for g in gpus})
        fits_one_numa = any(sum(1 for g in gpus if g.numa == k) >= n for k in {g.numa for g in gpus})
        assert len(by_root) == 1 or not fits_one_root, (n, ids)
        assert len(by_numa) == 1 or not fits_one_numa, (n, ids)


def test_topology_helpers():
    assert topology.sysfs_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert topology.sysfs_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert topology.sysfs_bus_id("x; rm -rf /") is None
    assert topology.pcie_root("/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0") == "pci0000:3a"
    assert topology.pcie_root("") is None
    assert [topology.gpus_arg(x) for x in ([], [3], [0, 2])] == ["0", "3,", "0,2"]


def test_planned_gpu_subsets_are_recorded_in_the_state(tmp_path):
    t = {"gpu_count": 4, "gpus": [vars(g) for g in topology.from_probe(R740, R740_ROOTS)]}
    runs = pl.plan([host(count=4)], ["ncf"], "2,3", 1, topologies={"h1": t})
    s = sweepstate.Sweep(root=tmp_path / "s", name="s", runs=runs)
    s.save()
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert [(r["run_id"], r["gpu_ids"]) for r in doc["runs"]] == [
        ("ncf-ttt-tiny-2gpu-s1", [0, 1]),
        ("ncf-ttt-tiny-3gpu-s1", [0, 1, 2]),
    ]
    # a host whose probe finds fewer GPUs than asked: those runs fail with the reason, the others stay
    t2 = {"gpu_count": 1, "gpus": [{"index": 0}]}
    runs = pl.plan([host(count=4)], ["ncf"], "1,2", 1, topologies={"h1": t2})
    assert [(r.state, r.reason) for r in runs] == [
        ("planned", ""),
        ("failed", "h1: 2 GPUs asked but the host has 1 (probe)"),
    ]


# --------------------------------------------------------------------------- state and resume


def test_resume_skips_only_complete_and_verified_runs(tmp_path):
    runs = pl.plan([host(count=0)], ["ncf"], None, 3)
    s = sweepstate.Sweep(root=tmp_path / "s", name="s", runs=runs)
    for r, state in zip(runs, ("complete", "complete", "failed")):
        r.state, r.outcome, r.reason = state, "success" if state == "complete" else None, state
    write_run(s.run_dir(runs[0]))
    write_run(s.run_dir(runs[1]))
    (s.run_dir(runs[1]) / "status.json").write_text("{}")  # corrupted after the fetch
    s.save()
    again = sweepstate.Sweep.open(tmp_path / "s", "s", pl.plan([host(count=0)], ["ncf"], None, 3), {})
    assert [r.state for r in again.runs] == ["complete", "planned", "planned"]
    assert again.runs[2].reason == "previous attempt: failed: failed"


def test_result_summary_names_failures(tmp_path):
    runs = pl.plan([host(count=0)], ["ncf"], None, 2)
    runs[0].state, runs[0].outcome, runs[0].reason = "complete", "success", "ok"
    runs[1].state, runs[1].reason = "failed", "host lost: connection refused"
    res = driver.SweepResult(sweepstate.Sweep(root=tmp_path, name="x", runs=runs))
    assert not res.ok and res.failed == [runs[1]]
    assert res.summary()[-1] == "  FAILED h1 ncf-ttt-tiny-cpu-s2: failed: host lost: connection refused"


def test_sweep_names_are_checked():
    with pytest.raises(ConfigError, match="is not a sweep name"):
        driver.check_name("../escape")


# --------------------------------------------------------------------------- quoting, lock, stop


def test_cmd_quotes_values_so_metacharacters_stay_data(tmp_path):
    evil = f"x; touch {tmp_path}/pwned; echo $(id) `id` | cat > {tmp_path}/pwned2"
    text = remote.cmd(["printf", "%s", evil], "&&", ["echo", "done"])
    out = subprocess.run(["/bin/sh", "-c", text], capture_output=True, text=True)
    assert out.stdout == evil + "done\n"
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert shlex.split(text)[:3] == ["printf", "%s", evil]


@pytest.fixture
def local(tmp_path):
    return remote.LocalRemote(host("here", connection="local", workdir=str(tmp_path)))


def test_host_lock_excludes_a_second_controller_and_takes_over_stale_locks(local, tmp_path):
    workdir = str(tmp_path / "work; touch $HOME_pwned")  # a workdir with metacharacters stays one path
    a = hostlock.HostLock(local, workdir, "sweep-a")
    b = hostlock.HostLock(local, workdir, "sweep-b", stale_s=300)
    assert a.try_acquire("tok-a") is None and a.held
    busy = b.try_acquire("tok-b")
    assert busy is not None and "sweep sweep-a" in busy.describe() and not busy.alive
    assert (tmp_path / "work; touch $HOME_pwned" / "sweep.lock" / "owner").is_file()
    a.release()
    assert b.try_acquire("tok-b") is None
    # a lock whose heartbeat is old and whose run is gone is taken over ...
    old = time.time() - 1000
    os.utime(tmp_path / "work; touch $HOME_pwned" / "sweep.lock" / "heartbeat", (old, old))
    c = hostlock.HostLock(local, workdir, "sweep-c", stale_s=300)
    assert c.try_acquire("tok-c") is None
    # ... but not while a process still carries its run's token
    os.utime(tmp_path / "work; touch $HOME_pwned" / "sweep.lock" / "heartbeat", (old, old))
    p = exec_done(subprocess.Popen(["sleep", "30"], env=dict(os.environ, GPULAB_RUN_TOKEN="tok-c")))
    try:
        d = hostlock.HostLock(local, workdir, "sweep-d", stale_s=300)
        busy = d.try_acquire("tok-d")
        assert busy is not None and busy.alive and "its run still going" in busy.describe()
    finally:
        p.kill()
        p.wait()
    # the owner is a dead process of this machine: stale at once
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lockdir = tmp_path / "work; touch $HOME_pwned" / "sweep.lock"
    (lockdir / "owner").write_text(hostlock.owner_line("x").replace(f"pid={os.getpid()}", f"pid={dead.pid}") + "\n")
    assert hostlock.HostLock(local, workdir, "sweep-e").try_acquire("tok-e") is None
    assert not list(tmp_path.glob("*pwned*")) or all(" " in p.name for p in tmp_path.glob("*pwned*"))


def test_stop_run_reaches_every_tagged_process(local):
    env = dict(os.environ, GPULAB_RUN_TOKEN="tok-stop")
    # one process that ignores SIGTERM, in a session of its own (as the runner's workload group is)
    p1 = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & wait"], env=env, start_new_session=True)
    p2 = exec_done(subprocess.Popen(["sleep", "60"], env=env))
    time.sleep(0.3)
    assert set(hostrun.tagged_alive(local, "tok-stop")) >= {p1.pid, p2.pid}
    killed = hostrun.stop_run(local, "tok-stop", None, grace_s=1.0, poll_s=0.2)
    p1.wait(10)
    p2.wait(10)
    assert killed
    deadline = time.monotonic() + 10
    while hostrun.tagged_alive(local, "tok-stop") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hostrun.tagged_alive(local, "tok-stop") == []


def test_a_finished_run_counts_as_over_only_once_its_processes_have_exited(local):
    env = dict(os.environ, GPULAB_RUN_TOKEN="tok-exit")
    # a runner that has written its checksums but still needs a moment to exit
    p = subprocess.Popen(["sleep", "1.5"], env=env)
    time.sleep(0.2)
    t0 = time.monotonic()
    assert hostrun.wait_gone(local, "tok-exit", grace_s=30, poll_s=0.1) is False  # left on its own, not killed
    assert p.poll() == 0 and time.monotonic() - t0 < 25
    assert hostrun.tagged_alive(local, "tok-exit") == []
    # one that never exits is killed after the grace period
    q = subprocess.Popen(["sleep", "60"], env=dict(os.environ, GPULAB_RUN_TOKEN="tok-hang"))
    time.sleep(0.2)
    assert hostrun.wait_gone(local, "tok-hang", grace_s=0.5, poll_s=0.1) is True
    assert q.wait(10) == -9


@pytest.mark.parametrize("pid", ["9" * 5000, "9" * 30, "0", "\u0661\u0662"])
def test_a_lock_owner_of_any_words_is_a_busy_host_in_one_short_line(local, tmp_path, pid):
    """The lock's owner file is the host's: a pid of 5000 digits was a ValueError (int's digit limit), one of
    30 an OverflowError (os.kill), both out of the unit's worker; and a megabyte of it went into the line."""
    import socket

    lockdir = tmp_path / "work" / "sweep.lock"
    lockdir.mkdir(parents=True)
    (lockdir / "heartbeat").write_text("")
    (lockdir / "owner").write_text(f"controller={socket.gethostname()} pid={pid} sweep={'s' * 1_000_000}\n")
    busy = hostlock.HostLock(local, str(tmp_path / "work"), "sweep-b", stale_s=300).try_acquire("tok-b")
    assert busy is not None and not busy.alive and len(busy.describe()) < 300
    assert busy.describe().startswith("sweep ")  # the owner file read up to 4 kB
