"""One health verdict: the sweep's gate and `invoke validate` name their checks alike, are told apart in
`invoke history`, and the host's newest check of either kind decides whether a sweep's gate runs again."""

from __future__ import annotations

import datetime as dt
import hashlib

from lab.history import query, sweeps
from lab.history.sources import CheckRecord, GpuRef, ValidationRecord
from lab.history.store import add_validation
from lab.hosts.inventory import Host
from lab.sweep import gate
from lab.validate import health as judge
from lab.validate import hostchecks

from test_health_gate import doc

NOW = dt.datetime.now(dt.timezone.utc)


def validate(db, host: str, verdict: str, minutes_ago: float, other_host_fails=False, level="quick"):
    """An `invoke validate` of ``host`` (and of another host, which fails when asked), as validate.json imports."""
    at = NOW - dt.timedelta(minutes=minutes_ago)
    checks = [
        CheckRecord(host=host, name="GPU present", verdict="PASS", value=4, at=at),
        CheckRecord(
            host=host,
            name="row remapping",
            verdict=verdict,
            gpu=GpuRef(index=0, uuid="GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"),
            value=0,
            at=at,
        ),
    ]
    if other_host_fails:
        checks.append(CheckRecord(host="r740-09", name="GPU present", verdict="FAIL", value=0, at=at))
    key = hashlib.sha256(f"{host}{verdict}{minutes_ago}{level}".encode()).hexdigest()
    add_validation(
        db,
        ValidationRecord(
            key=key,
            source="validate.json",
            at=at,
            level=level,
            verdict="FAIL" if other_host_fails else verdict,
            checks=checks,
        ),
    )


def health(memory, host: str, minutes_ago: float, pending_gpu=None):
    d = doc(pending_gpu=pending_gpu, at=NOW - dt.timedelta(minutes=minutes_ago))
    memory.record_health(host, judge.judge(d, expect_gpus=True), d)


def test_the_newest_check_of_either_kind_decides(db_url):
    memory = sweeps.open_for(db_url, "s1")
    try:
        health(memory, "r740-01", 60)  # the gate passed an hour ago ...
        assert memory.recent_pass("r740-01", 24)
        validate(memory.db, "r740-01", "FAIL", 30)  # ... and a validate failed since: the gate runs again
        assert not memory.recent_pass("r740-01", 24)
        health(memory, "r740-01", 10)  # a newer passing gate decides now
        assert memory.recent_pass("r740-01", 24)
        validate(memory.db, "r740-02", "PASS", 5)  # a passing validate spares the gate too
        assert memory.recent_pass("r740-02", 24) and not memory.recent_pass("r740-02", 0)
        # a validate of several hosts that failed elsewhere passes this host
        validate(memory.db, "r740-03", "PASS", 5, other_host_fails=True)
        assert memory.recent_pass("r740-03", 24) and not memory.recent_pass("r740-09", 24)
        health(memory, "r740-04", 120)
        validate(memory.db, "r740-04", "PASS", 200)  # an older validate does not undo a newer gate result
        health(memory, "r740-04", 20, pending_gpu=1)
        assert not memory.recent_pass("r740-04", 24)
    finally:
        memory.close()


def test_history_tells_the_gate_from_validate(db_url):
    memory = sweeps.open_for(db_url, "s1")
    try:
        health(memory, "r740-01", 60)
        validate(memory.db, "r740-01", "FAIL", 30, level="standard")
        rows = query.history_rows(memory.db, host="r740-01", metric="row remapping")
        assert [(r["source"], r["verdict"]) for r in rows][:1] == [("validate standard", "FAIL")]
        assert {r["source"] for r in rows} == {"validate standard", "sweep health gate"}
        assert any("sweep health gate" in line for line in query.table(rows))
    finally:
        memory.close()


def cpu_host(model="auto", count="auto"):
    return Host(
        name="here",
        address="127.0.0.1",
        port=22,
        user=None,
        connection="local",
        gpu_model=model,
        gpu_count=count,
        stack="current",
        groups=(),
        workdir="/tmp",
        python=None,
        ssh_key=None,
        known_hosts="/dev/null",
        vars={"gpulab_gpu_model": model, "gpulab_gpu_count": count},
    )


def test_gate_and_validate_expect_gpus_by_one_rule_and_name_a_cpu_host_alike():
    for model, count in [("auto", "auto"), ("CPU", "auto"), ("auto", 0), ("T4", "auto"), ("auto", 2), ("T4", 0)]:
        h = cpu_host(model, count)
        assert gate.expects_gpus(h) == hostchecks.expects_gpus(h), (model, count)
    d = dict(doc(), nvidia="no NVIDIA driver/GPU found: NVML could not start", gpu_count=0, gpus=[])
    h = cpu_host()
    gated = judge.judge(d, expect_gpus=gate.expects_gpus(h))
    validated = hostchecks.no_gpu_checks(h, {"nvidia": d["nvidia"]})
    assert gated.ok and [(c["check"], c["verdict"]) for c in gated.host_checks] == [
        (c["check"], c["verdict"]) for c in validated
    ] == [("GPU count", "PASS")]
    failing = judge.judge(d, expect_gpus=gate.expects_gpus(cpu_host("T4", 4)))
    assert (
        [(c["check"], c["verdict"]) for c in failing.host_checks]
        == [(c["check"], c["verdict"]) for c in hostchecks.no_gpu_checks(cpu_host("T4", 4), {"nvidia": d["nvidia"]})]
        == [("GPU present", "FAIL")]
    )
