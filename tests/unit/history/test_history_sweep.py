"""Sweeps plan around quarantined GPUs and hosts: a host's GPU subsets leave them out, a host with none
left is skipped and named in the plan (dry run) and the summary."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.history import quarantine as q
from lab.history.db import open_db
from lab.hosts import inventory
from lab.sweep import driver as sw, plan as pl, topology as topo
from lab.sweep import state as sweepstate

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventory" / "hosts.yml"


def t4_hosts():
    return inventory.load(EXAMPLE).select(device="t4")  # r740-01, r740-02: 4x T4 each (never contacted)


def probed(n, roots=("pci0000:00", "pci0000:00", "pci0000:80", "pci0000:80")):
    return {
        "gpu_count": n,
        "gpus": [
            asdict(topo.Gpu(index=i, bus_id=f"0000:{i:02x}:00.0", numa=i // 2, root=roots[i], name="Tesla T4"))
            for i in range(n)
        ],
    }


def test_plan_around_leaves_quarantined_gpus_out_of_every_subset():
    hosts = t4_hosts()
    held = {"r740-01": {"gpus": [2], "reason": "r740-01 GPU 2: row remap pending"}}
    left, topologies, notes = pl.plan_around(hosts, held)
    assert [h.name for h in left] == ["r740-01", "r740-02"]
    assert [g["index"] for g in topologies["r740-01"]["gpus"]] == [0, 1, 3] and "r740-02" not in topologies
    assert notes == ["r740-01: GPU(s) 2 quarantined (r740-01 GPU 2: row remap pending): runs use GPU(s) 0,1,3"]
    runs = pl.plan(left, ["ncf"], "all", 1, "throughput", "full", topologies=topologies)
    used = {r.gpus: r.gpu_ids for r in runs if r.host == "r740-01"}
    assert used == {1: [0], 2: [0, 1], 3: [0, 1, 3]}
    assert all(2 not in ids for ids in used.values())
    assert {r.gpus for r in runs if r.host == "r740-02"} == {1, 2, 3, 4}
    # probed: the topology's PCIe roots still choose, among the GPUs left
    _, topologies, _ = pl.plan_around(
        hosts, {"r740-01": {"gpus": [0], "reason": "x"}}, {"r740-01": probed(4), "r740-02": probed(4)}
    )
    runs = pl.plan(hosts, ["ncf"], "2", 1, "throughput", "full", topologies=topologies)
    assert [r.gpu_ids for r in runs if r.host == "r740-01"] == [[2, 3]]  # one root, not 1 + 2
    assert [r.gpu_ids for r in runs if r.host == "r740-02"] == [[0, 1]]


def test_a_quarantine_does_not_lift_the_more_gpus_than_the_host_has_check():
    hosts = t4_hosts()  # 4x T4 each, by the inventory
    with pytest.raises(ConfigError, match="--gpus: 8 GPUs asked but r740-01 has 4"):
        pl.plan(hosts, ["ncf"], "8", 1, "throughput", "full")
    left, topologies, _ = pl.plan_around(hosts, {"r740-01": {"gpus": [2], "reason": "x"}})
    with pytest.raises(ConfigError, match="--gpus: 8 GPUs asked but r740-01 has 4"):  # ac25178 planned it
        pl.plan(left, ["ncf"], "8", 1, "throughput", "full", topologies=topologies)


def test_a_host_with_no_gpu_left_is_skipped_and_named():
    hosts = t4_hosts()
    held = {"r740-01": {"gpus": [0, 1, 2, 3], "reason": "PSU"}, "r740-02": {"gpus": None, "reason": "fans"}}
    left, _, notes = pl.plan_around(hosts, held)
    assert left == []
    assert notes == ["r740-01: skipped: every GPU quarantined (PSU)", "r740-02: skipped: quarantined (fans)"]
    with pytest.raises(ConfigError, match="every selected host is quarantined: r740-01: skipped"):
        sw.run_sweep(hosts, ["ncf"], ROOT / "no-such-results", "s1", quarantine=held)


def test_the_summary_names_what_was_quarantined(tmp_path):
    sweep = sweepstate.Sweep.open(tmp_path / "s", "s", [], {})
    lines = sw.SweepResult(sweep, quarantined=["r740-02: skipped: quarantined (fans)"]).summary()
    assert lines[-1] == "  QUARANTINE r740-02: skipped: quarantined (fans)"


def test_the_dry_run_plans_around_the_quarantine_in_the_database(tmp_path):
    db = open_db(f"sqlite:///{tmp_path / 'history.sqlite'}")
    try:
        q.add(db, q.parse_target("r740-01:2"), reason="row remap pending", who="ops")
        q.add(db, q.parse_target("r740-02"), reason="fans", who="ops")
    finally:
        db.close()
    env = dict(
        os.environ,
        INVOKE_GPULAB_RESULTS=str(tmp_path),
        PYTHONPATH=str(ROOT),
        INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"),
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "sweep",
            "--device",
            "t4",
            "--mode",
            "throughput",
            "--dry-run",
            "--name",
            "q1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:3] == [
        "sweep q1: mode throughput, scale full; 18 runs on 1 unit(s)",
        "quarantine: r740-01: GPU(s) 2 quarantined (GPU 2: row remap pending): runs use GPU(s) 0,1,3",
        "quarantine: r740-02: skipped: quarantined (fans)",
    ]
    assert all(" GPUs 1,2,3 " in x for x in lines if x.startswith("  ncf") and "seed(s)" in x)  # not the pilot lines
    assert not any(x.startswith("r740-02") for x in lines)
    assert lines[-1] == "18 runs planned for sweep q1 on 1 unit(s); nothing started (--dry-run)"
