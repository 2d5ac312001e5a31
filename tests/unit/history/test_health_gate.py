"""The sweep's health gate in the history: a failing GPU is quarantined with its reason and action by
"gpulab sweep", a passing check within gpulab.sweep.health_valid_hours spares the next gate, the
kernel log mark of the last check; and the gate's plan (lab.sweep.gate.apply)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from lab.history import quarantine as q
from lab.history import sweeps
from lab.hosts import inventory
from lab.sweep import gate
from lab.sweep import plan as pl
from lab.validate import health as judge

ROOT = Path(__file__).resolve().parents[3]
BOOT = "6a1f5d2e-0000-4000-8000-000000000001"


def doc(pending_gpu=None, at=None, uptime=1000.0):
    gpus = []
    for i in range(4):
        pending = i == pending_gpu
        gpus.append({"index": i, "name": "Tesla T4", "uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd",
                     "serial": f"13200000000{i}", "ecc": {"uncorrected_volatile": 0, "uncorrected_aggregate": 0},
                     "row_remap": {"correctable": 0, "uncorrectable": int(pending), "pending": pending,
                                   "failure": False}})
    at = at or dt.datetime.now(dt.timezone.utc)
    return {"kind": "gpulab-health", "schema": 1, "collected_at": at.isoformat(), "boot_id": BOOT,
            "uptime_s": uptime, "nvidia": None, "gpu_count": 4, "gpus": gpus,
            "xid": {"source": "dmesg", "error": None, "events": []}}


def t4_hosts():
    return inventory.load(ROOT / "inventory" / "hosts.yml").select(device="t4")   # never contacted


def test_a_failing_gpu_is_quarantined_by_the_sweep_with_its_action(db_url):
    memory = sweeps.open_for(db_url, "s1")
    try:
        assert not memory.recent_pass("r740-01", 24) and memory.mark("r740-01") is None
        d = doc(pending_gpu=2)
        lines = memory.record_health("r740-01", judge.judge(d, expect_gpus=True), d)
        assert lines == ["r740-01 GPU 2: quarantined (row remapping: row remap pending (1 uncorrectable): reset the "
                         "GPU; action reset_gpu: A remap is pending: reset the GPU to apply it; a remapping failure "
                         "is an RMA case)"]
        (entry,) = q.active(memory.db)
        assert (entry.host, entry.gpu_index, entry.who) == ("r740-01", 2, "gpulab sweep")
        assert entry.gpu_uuid == "GPU-00000002-aaaa-bbbb-cccc-dddddddddddd"
        assert entry.reason.startswith("health check before the first run: row remapping: row remap pending")
        assert entry.action.startswith("reset_gpu: ")
        assert q.for_sweep(memory.db, ["r740-01"])["r740-01"]["gpus"] == [2]
        assert not memory.recent_pass("r740-01", 24)            # it failed: the next sweep checks again
        assert memory.mark("r740-01") == (BOOT, 1000.0)
        # the same failure again: one entry, said so
        d2 = doc(pending_gpu=2, uptime=1200.0)
        assert memory.record_health("r740-01", judge.judge(d2, expect_gpus=True), d2)[0].startswith(
            "r740-01 GPU 2: already quarantined (health check before the first run: ")
        assert len(q.active(memory.db)) == 1 and memory.mark("r740-01") == (BOOT, 1200.0)
    finally:
        memory.close()


def test_a_recent_pass_spares_the_gate_within_the_window(db_url):
    memory = sweeps.open_for(db_url, "s1")
    try:
        old = doc(at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=30))
        memory.record_health("r740-02", judge.judge(old, expect_gpus=True), old)
        assert not memory.recent_pass("r740-02", 24) and memory.recent_pass("r740-02", 48)
        new = doc()
        assert memory.record_health("r740-02", judge.judge(new, expect_gpus=True), new) == []
        assert memory.recent_pass("r740-02", 24) and not memory.recent_pass("r740-02", 0)
        assert not memory.recent_pass("r740-01", 24)
        echoed = []
        hosts = t4_hosts()
        assert gate.needed(hosts, memory, 24, echoed.append) == {"r740-01"}
        assert echoed == ["health r740-02: a check passed within 24 h (gpulab.sweep.health_valid_hours): "
                          "not run again"]
    finally:
        memory.close()


def test_the_gate_plans_around_what_failed_and_says_so(tmp_path):
    memory = sweeps.open_for(f"sqlite:///{tmp_path / 'h.sqlite'}", "s1")
    try:
        hosts, echoed = t4_hosts(), []
        held = gate.apply(hosts, {"r740-01": doc(pending_gpu=1), "r740-02": doc()}, memory,
                          {"r740-02": {"gpus": [3], "reason": "GPU 3: fan"}}, echoed.append)
        assert held == {"r740-01": {"gpus": [1], "reason": "GPU 1: health check: row remapping: row remap pending "
                                    "(1 uncorrectable): reset the GPU"},
                        "r740-02": {"gpus": [3], "reason": "GPU 3: fan"}}
        assert echoed[0] == "health r740-01: GPU 1: row remapping: row remap pending (1 uncorrectable): reset the GPU"
        assert echoed[1].startswith("quarantine: r740-01 GPU 1: quarantined (row remapping: ")
        assert echoed[2] == "health r740-02: passed (4 GPU(s))"
        _, topologies, notes = pl.plan_around(hosts, held)
        assert notes[0] == ("r740-01: GPU(s) 1 quarantined (GPU 1: health check: row remapping: row remap pending "
                            "(1 uncorrectable): reset the GPU): runs use GPU(s) 0,2,3")
        # a database that fails: one line, the sweep still plans around the GPU
        memory.close()
        (tmp_path / "h.sqlite").write_bytes(b"not a database" * 100)
        echoed.clear()
        held = gate.apply(hosts[:1], {"r740-01": doc(pending_gpu=0)}, memory, None, echoed.append)
        assert held == {"r740-01": {"gpus": [0], "reason": "GPU 0: health check: row remapping: row remap pending "
                                    "(1 uncorrectable): reset the GPU"}}
        assert any(line.startswith("history: not recorded: history database ") for line in echoed), echoed
    finally:
        memory.close()
