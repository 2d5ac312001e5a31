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
        gpus.append(
            {
                "index": i,
                "name": "Tesla T4",
                "uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd",
                "serial": f"13200000000{i}",
                "ecc": {"uncorrected_volatile": 0, "uncorrected_aggregate": 0},
                "row_remap": {"correctable": 0, "uncorrectable": int(pending), "pending": pending, "failure": False},
            }
        )
    at = at or dt.datetime.now(dt.timezone.utc)
    return {
        "kind": "gpulab-health",
        "schema": 1,
        "collected_at": at.isoformat(),
        "boot_id": BOOT,
        "uptime_s": uptime,
        "nvidia": None,
        "gpu_count": 4,
        "gpus": gpus,
        "xid": {"source": "dmesg", "error": None, "events": []},
    }


def t4_hosts():
    return inventory.load(ROOT / "inventory" / "hosts.yml").select(device="t4")  # never contacted


def test_a_failing_gpu_is_quarantined_by_the_sweep_with_its_action(db_url):
    memory = sweeps.open_for(db_url, "s1")
    try:
        assert not memory.recent_pass("r740-01", 24) and memory.mark("r740-01") is None
        d = doc(pending_gpu=2)
        lines = memory.record_health("r740-01", judge.judge(d, expect_gpus=True), d)
        assert lines == [
            "r740-01 GPU 2: quarantined (row remapping: row remap pending (1 uncorrectable): reset the "
            "GPU; action reset_gpu: A remap is pending: reset the GPU to apply it; a remapping failure "
            "is an RMA case)"
        ]
        (entry,) = q.active(memory.db)
        assert (entry.host, entry.gpu_index, entry.who) == ("r740-01", 2, "gpulab sweep")
        assert entry.gpu_uuid == "GPU-00000002-aaaa-bbbb-cccc-dddddddddddd"
        assert entry.reason.startswith("health check before the first run: row remapping: row remap pending")
        assert entry.action.startswith("reset_gpu: ")
        assert q.for_sweep(memory.db, ["r740-01"])["r740-01"]["gpus"] == [2]
        assert not memory.recent_pass("r740-01", 24)  # it failed: the next sweep checks again
        assert memory.mark("r740-01") == (BOOT, 1000.0)
        # the same failure again: one entry, said so
        d2 = doc(pending_gpu=2, uptime=1200.0)
        assert memory.record_health("r740-01", judge.judge(d2, expect_gpus=True), d2)[0].startswith(
            "r740-01 GPU 2: already quarantined (health check before the first run: "
        )
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
        assert echoed == ["health r740-02: a check passed within 24 h (gpulab.sweep.health_valid_hours): not run again"]
    finally:
        memory.close()


def test_the_gate_plans_around_what_failed_and_says_so(tmp_path):
    memory = sweeps.open_for(f"sqlite:///{tmp_path / 'h.sqlite'}", "s1")
    try:
        hosts, echoed = t4_hosts(), []
        held = gate.apply(
            hosts,
            {"r740-01": doc(pending_gpu=1), "r740-02": doc()},
            memory,
            {"r740-02": {"gpus": [3], "reason": "GPU 3: fan"}},
            echoed.append,
        )
        assert held == {
            "r740-01": {
                "gpus": [1],
                "reason": "GPU 1: health check: row remapping: row remap pending (1 uncorrectable): reset the GPU",
            },
            "r740-02": {"gpus": [3], "reason": "GPU 3: fan"},
        }
        assert echoed[0] == "health r740-01: GPU 1: row remapping: row remap pending (1 uncorrectable): reset the GPU"
        assert echoed[1].startswith("quarantine: r740-01 GPU 1: quarantined (row remapping: ")
        assert echoed[2] == "health r740-02: passed (4 GPU(s))"
        _, topologies, notes = pl.plan_around(hosts, held)
        assert notes[0] == (
            "r740-01: GPU(s) 1 quarantined (GPU 1: health check: row remapping: row remap pending "
            "(1 uncorrectable): reset the GPU): runs use GPU(s) 0,2,3"
        )
        # a database that fails: one line, the sweep still plans around the GPU
        memory.close()
        (tmp_path / "h.sqlite").write_bytes(b"not a database" * 100)
        echoed.clear()
        held = gate.apply(hosts[:1], {"r740-01": doc(pending_gpu=0)}, memory, None, echoed.append)
        assert held == {
            "r740-01": {
                "gpus": [0],
                "reason": "GPU 0: health check: row remapping: row remap pending (1 uncorrectable): reset the GPU",
            }
        }
        assert any(line.startswith("history: not recorded: history database ") for line in echoed), echoed
    finally:
        memory.close()


def test_a_failed_runs_epilogue_quarantines_a_lost_gpu_and_an_xid_since_the_gate(tmp_path):
    import json

    memory = sweeps.open_for(f"sqlite:///{tmp_path / 'h.sqlite'}", "s1")
    try:
        host = t4_hosts()[0]
        before = doc()
        memory.record_health(host.name, judge.judge(before, expect_gpus=True), before)  # the gate: passed
        after = doc(uptime=2000.0)
        after["gpus"] = [g for g in after["gpus"] if g["index"] != 3]  # GPU 3 fell off the bus
        after["xid"]["events"] = [
            {"xid": 79, "pci": "0000:3b:00", "gpu": 0, "uptime_s": 500.0, "text": "old"},
            {"xid": 48, "pci": "0000:3c:00", "gpu": 1, "uptime_s": 1500.0, "text": "DBE"},
        ]
        run = tmp_path / "r740-01" / "ncf-ttt-tiny-4gpu-s1"
        run.mkdir(parents=True)
        (run / "health.json").write_text(json.dumps(after))
        echoed = []
        got = gate.after_run(host, run.name, run, [0, 1, 2, 3], memory, echoed.append)
        assert got == {
            1: "XID events: XID 48 (double-bit ECC error) x1 since the last health check",
            3: "GPU count: GPU 3 lost: NVML no longer lists it",
        }
        assert echoed[0].startswith("health r740-01 after ncf-ttt-tiny-4gpu-s1: GPU 1: XID events: XID 48")
        entries = {e.gpu_index: e for e in q.active(memory.db)}
        assert sorted(entries) == [1, 3]
        assert entries[1].reason.startswith("health check after the failed run ncf-ttt-tiny-4gpu-s1: XID events")
        assert entries[3].action.startswith("reseat: ")
        pr = pl.PlannedRun(host.name, "ncf", 2, 2, gpu_ids=[2, 3])
        assert gate.held_reason(pr, {host.name: got}) == (
            "not run: GPU 3 quarantined during this sweep (GPU count: GPU 3 lost: NVML no longer lists it)"
        )
        assert gate.held_reason(pl.PlannedRun(host.name, "ncf", 1, 1, gpu_ids=[2]), {host.name: got}) is None
        # a run without the file (it succeeded, or never finished): nothing
        assert gate.after_run(host, "x", tmp_path, [0], memory, echoed.append) == {}
    finally:
        memory.close()


def test_a_passing_health_check_is_no_validate_for_a_release(tmp_path):
    memory = sweeps.open_for(f"sqlite:///{tmp_path / 'h.sqlite'}", "s1")
    try:
        q.add(memory.db, q.Target("r740-01", 2), reason="fan", who="me")
        d = doc()
        memory.record_health("r740-01", judge.judge(d, expect_gpus=True), d)  # GPU 2 passes the gate
        import pytest
        from lab.core.errors import CheckFailed

        with pytest.raises(CheckFailed, match="no validate of r740-01 GPU 2 since it was quarantined"):
            q.release(memory.db, q.Target("r740-01", 2), who="me")
    finally:
        memory.close()


COLLECTOR = """
import sys
from pathlib import Path
from lab.history import quarantine, sweeps
from lab.validate import health
sys.path.insert(0, sys.argv[3])
from test_health_gate import doc

memory = sweeps.open_for(sys.argv[1], "s")
try:
    for run in sorted(Path(sys.argv[2]).rglob("status.json")):   # as a sweep collects: one run at a time
        memory.record_run(run.parent)
    d = doc(pending_gpu=1)
    memory.record_health("h2", health.judge(d, expect_gpus=True), d)
    print(len(quarantine.for_sweep(memory.db, ["h2"])["h2"]["gpus"]))
finally:
    memory.close()
"""


def test_two_sweeps_recording_at_once_lose_nothing(db_url, tmp_path):
    """Two controllers record their runs as they collect them, and their health checks, into one database at
    once (both start on an empty one): every run once, the GPU quarantined."""
    import os
    import subprocess
    import sys

    import sqlalchemy as sa
    from histdata import write_sweep

    from lab.history.db import open_db
    from lab.history.models import Run

    a = write_sweep(tmp_path / "a", "a", {"h1": 2, "h2": 2}, runs_per_host=6)
    b = write_sweep(tmp_path / "b", "b", {"h2": 2, "h3": 4}, runs_per_host=6, day=2)
    here = str(Path(__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{here}")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", COLLECTOR, db_url, str(root), here],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for root in (a.parent, b.parent)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert [o.strip() for o, _ in outs] == ["1", "1"]
    d = open_db(db_url)
    try:
        with d.session() as s:
            assert s.scalar(sa.select(sa.func.count()).select_from(Run)) == 24
        assert q.for_sweep(d, ["h2"]) == {"h2": {"gpus": [1], "reason": q.for_sweep(d, ["h2"])["h2"]["reason"]}}
    finally:
        d.close()


def test_a_host_without_nvml_is_recorded_but_not_quarantined(tmp_path):
    memory = sweeps.open_for(f"sqlite:///{tmp_path / 'h.sqlite'}", "s1")
    try:
        d = dict(doc(), nvidia="no NVIDIA driver/GPU found: NVML could not start", gpu_count=0, gpus=[])
        v = judge.judge(d, expect_gpus=True)
        assert [f.gpu for f in v.failures] == [None]
        assert memory.record_health("r740-01", v, d) == [] and q.active(memory.db) == []
        assert not memory.recent_pass("r740-01", 24)
        echoed = []
        assert gate.apply(t4_hosts()[:1], {"r740-01": d}, memory, None, echoed.append) == {}
        assert echoed[-1] == (
            "health r740-01: GPU present: no NVIDIA driver/GPU found: NVML could not start: not "
            "quarantined (no GPU to name); `invoke quarantine.add r740-01 --reason 'GPU present: no NVIDIA "
            "driver/GPU found: NVML could not start'` keeps the host out"
        )
    finally:
        memory.close()


def test_a_health_document_with_a_non_finite_number_is_no_pass(tmp_path):
    """An XID event at uptime NaN compared as older than the last check's mark: the XID was not counted and the
    gate passed (and an uptime of Infinity as the mark would hide every later XID). The document is refused."""
    import json
    from types import SimpleNamespace

    import pytest

    from lab.core.errors import RunError
    from lab.hosts import remote as rmt

    host = t4_hosts()[0]
    for bad in (float("nan"), float("inf")):
        d = doc(uptime=2000.0)
        d["xid"]["events"] = [{"xid": 79, "pci": "0000:3b:00", "gpu": 0, "uptime_s": bad, "text": "off the bus"}]
        text = json.dumps(d)  # Python writes NaN and Infinity, as a careless host would
        remote = SimpleNamespace(name=host.name, run=lambda argv, **kw: rmt.Result("health", 0, text + "\n", ""))
        with pytest.raises(RunError, match=r"`runner health` printed no usable JSON document \((NaN|Infinity) is"):
            gate.read(remote, SimpleNamespace(argv=lambda *a: list(a)))
        run = tmp_path / f"run-{bad}"
        run.mkdir()
        (run / "health.json").write_text(text)
        echoed = []
        assert gate.after_run(host, run.name, run, [0], None, echoed.append) == {}
        assert len(echoed) == 1 and echoed[0].startswith(
            f"health {host.name} after {run.name}: health.json: not a usable JSON document ("
        )


def test_nvml_listing_no_gpu_on_a_gpu_host_is_no_pass():
    """A document whose NVML answered (no 'nvidia' reason) but listed and counted no GPU passed the gate of a
    host the inventory gives GPUs ("GPU present" PASS at 0 against ">= 1"): nothing had been checked."""
    empty = {**doc(), "gpus": [], "gpu_count": 0}
    got = judge.judge(empty, expect_gpus=True)
    assert not got.ok and [f.reason for f in got.failures] == ["GPU present: NVML answers but lists no GPU"]
    assert judge.judge({**empty, "nvidia": ""}, expect_gpus=True).failures == got.failures
    assert judge.judge(empty, expect_gpus=False).ok  # a CPU host
    assert judge.judge(doc(), expect_gpus=True).ok


def test_a_health_document_past_its_size_is_said_so():
    """A last line past gate.MAX_DOC was reported as "`runner health` failed: exit 0, no output"."""
    from types import SimpleNamespace

    import pytest

    from lab.core.errors import RunError
    from lab.hosts import remote as rmt

    text = '{"kind": "gpulab-health", "x": "' + "a" * gate.MAX_DOC + '"}'
    remote = SimpleNamespace(name="h1", run=lambda argv, **kw: rmt.Result("health", 0, text, ""))
    with pytest.raises(RunError, match=r"^h1: `runner health` printed no usable JSON document \(more than \d+ char"):
        gate.read(remote, SimpleNamespace(argv=lambda *a: list(a)))


DMESG_REFUSED = "dmesg: read kernel buffer failed: Operation not permitted"


def test_a_kernel_log_the_host_refused_fails_the_gate_with_what_to_do(tmp_path):
    """A non-root runner under kernel.dmesg_restrict=1 reads no kernel log: its XIDs were not checked. That was a
    WARN per GPU, so the gate passed ("passed (4 GPU(s))"), was recorded as a pass that spared the next sweeps'
    gates, and its mark hid every XID before it from the next check."""
    memory = sweeps.open_for(f"sqlite:///{tmp_path / 'h.sqlite'}", "s1")
    try:
        first = doc(uptime=500.0)
        memory.record_health("r740-01", judge.judge(first, expect_gpus=True), first)
        assert memory.recent_pass("r740-01", 24) and memory.mark("r740-01") == (BOOT, 500.0)
        refused = doc(uptime=1000.0)
        refused["xid"] = {"source": None, "error": DMESG_REFUSED, "events": []}
        echoed = []
        assert gate.apply(t4_hosts()[:1], {"r740-01": refused}, memory, None, echoed.append) == {}
        fix = (
            "run the runner as root or with CAP_SYSLOG, or set kernel.dmesg_restrict=0 (sysctl), or let its user "
            "read the journal (group systemd-journal or adm)"
        )
        assert echoed[0] == (
            f"health r740-01: host: kernel log: XID events not checked: the kernel log could not be read "
            f"({DMESG_REFUSED}); {fix}"
        )
        assert not memory.recent_pass("r740-01", 24)  # no pass: the next sweep checks again
        assert memory.mark("r740-01") == (BOOT, 500.0)  # XIDs after the last read still count then
        assert q.active(memory.db) == []  # a host's configuration, not a GPU's fault
        late = doc(uptime=1500.0)
        late["xid"]["events"] = [{"xid": 79, "pci": "0000:3b:00", "gpu": 1, "uptime_s": 800.0, "text": "off"}]
        assert [
            (f.gpu, f.reason) for f in judge.judge(late, expect_gpus=True, mark=memory.mark("r740-01")).failures
        ] == [(1, "XID events: XID 79 (GPU has fallen off the bus) x1 since the last health check")]
        cpu = dict(refused, nvidia="no NVIDIA driver/GPU found: NVML could not start", gpu_count=0, gpus=[])
        assert judge.judge(cpu, expect_gpus=False).ok  # a CPU host's kernel log concerns no GPU
    finally:
        memory.close()
