"""Validate's trend checks against each GPU's own past, read from the history database (SQLite and a real
PostgreSQL), and the quarantine a failing validate leaves."""

from __future__ import annotations

import copy
import datetime as dt

import pytest
import sqlalchemy as sa
from histdata import burnin_doc, write_validation

from lab.history import memory as history
from lab.core.errors import CheckFailed
from lab.history import db as hdb, quarantine as q
from lab.history.models import Gpu, Validation
from lab.validate import fleet, trends

BW = "memory_bandwidth_gbs"


def doc_with(bw: float | None = None, ecc: int | None = None, idle: float | None = None) -> dict:
    """The H200 burn-in document with GPU 0's memory bandwidth, corrected ECC count and idle temperature set."""
    d = copy.deepcopy(burnin_doc())
    if bw is not None:
        d["gpus"]["0"]["solo"][BW] = bw
    if ecc is not None:
        d["probe"]["gpus"][0]["ecc"]["corrected_aggregate"] = ecc
    if idle is not None:
        d["gpus"]["0"]["idle"]["temp_c_max"] = idle
    return d


def write_val(out, doc, when, fail_gpu=None):
    """validate.json as `invoke validate` writes it with a history to judge by: the trend records (which carry
    each figure, the corrected ECC count among them) beside the other checks."""
    from lab.validate.verdict import write_outputs

    doc = copy.deepcopy(doc)
    if fail_gpu is not None:
        doc["probe"]["gpus"][fail_gpu]["row_remap"]["pending"] = True
    doc["probe"]["collected_at"] = when
    v = fleet.evaluate(
        {"h200-01": doc}, [], fleet.load_references(), None, level="standard", past={"gpus": {}, "error": None}
    )
    v.data["generated_at"] = when
    write_outputs(v, out)
    return out / "validate.json"


def past_validations(url, tmp_path, values, *, ecc=0, idle=30.0, fail_gpu=None, first_day=1):
    for day, bw in enumerate(values, start=first_day):
        f = write_val(tmp_path / f"v{day}", doc_with(bw, ecc, idle), f"2026-11-{day:02d}T10:00:00Z", fail_gpu)
        assert history.record([f], url).startswith("history: 0 run(s) added, 0 already there; 1 validation(s)")


def judge(url, doc) -> dict:
    """GPU 0's trend records of a validate of ``doc``, its past read from ``url`` as `invoke validate` reads it."""
    table = trends.load_trends()
    past = history.past_reader(url)(
        trends.uuids({"h200-01": doc}, fleet.split_snapshot), trends.sources(table), trends.depth(table)
    )
    v = fleet.evaluate({"h200-01": doc}, [], fleet.load_references(), None, level="standard", past=past)
    g = v.hosts["h200-01"]["gpus"]["0"]
    return {c["check"]: c for c in g["checks"] if c["check"].endswith(" trend")}, v, past


def test_a_gpu_falling_below_its_own_median_fails_with_the_figure_the_median_and_the_points(db_url, tmp_path):
    past_validations(db_url, tmp_path, [4200.0, 4180.0, 4190.0, 4210.0])
    recs, v, past = judge(db_url, doc_with(bw=4190.0 * 0.85))
    bw = recs[f"{BW} trend"]
    assert (bw["verdict"], bw["median"], bw["past_points"], bw["judged"]) == ("FAIL", 4195.0, 4, True)
    assert bw["measured"] == pytest.approx(3561.5)
    assert bw["reason"] == "3,562 GB/s is 85% of its own median 4,195 of 4 passing point(s) (FAIL below 90%)"
    assert v.hosts["h200-01"]["verdict"] == "FAIL"
    assert f"GPU 0 {BW} trend: 3,562 GB/s is 85%" in fleet.summary_text(v)
    assert "its own median 4,195" in fleet.render_html(v) and f'"{BW} trend"' in v.to_json()
    # 7% below: WARN; 1% below: PASS
    assert judge(db_url, doc_with(bw=4195.0 * 0.93))[0][f"{BW} trend"]["verdict"] == "WARN"
    assert judge(db_url, doc_with(bw=4195.0 * 0.99))[0][f"{BW} trend"]["verdict"] == "PASS"


def test_too_little_history_is_not_judged_never_a_fail(db_url, tmp_path):
    recs, v, _ = judge(db_url, doc_with(bw=100.0))
    assert recs[f"{BW} trend"]["verdict"] == "PASS"
    assert recs[f"{BW} trend"]["reason"] == "not judged: 0 past point(s), needs 3"
    assert recs["ECC corrected trend"]["reason"] == "not judged: 0 past point(s), needs 1"
    assert all(r["verdict"] == "PASS" and r["judged"] is False for r in recs.values())
    past_validations(db_url, tmp_path, [4200.0, 4180.0])
    recs, _, _ = judge(db_url, doc_with(bw=100.0))
    assert (recs[f"{BW} trend"]["verdict"], recs[f"{BW} trend"]["judged"]) == ("PASS", False)
    assert recs[f"{BW} trend"]["reason"] == "not judged: 2 past point(s), needs 3"


def test_corrected_ecc_growth_and_idle_temperature_rise(db_url, tmp_path):
    past_validations(db_url, tmp_path, [4200.0, 4180.0, 4190.0], ecc=5, idle=30.0)
    past_validations(db_url, tmp_path, [4200.0], ecc=12, idle=31.0, first_day=9)
    recs, _, _ = judge(db_url, doc_with(bw=4190.0, ecc=40, idle=40.0))
    ecc = recs["ECC corrected trend"]
    assert (ecc["verdict"], ecc["last"], ecc["measured"], ecc["past_points"]) == ("WARN", 12.0, 40.0, 4)
    assert ecc["reason"] == (
        "40 corrected ECC error(s) over the GPU's life, +28 since the last check (2026-11-09T10:00:00Z)"
    )
    idle = recs["idle temperature trend"]
    assert (idle["verdict"], idle["median"], idle["past_points"]) == ("WARN", 30.0, 4)
    assert idle["reason"] == "40 C at idle, +10.0 C from its own median 30 C of 4 passing point(s)"
    recs = judge(db_url, doc_with(bw=4190.0, ecc=2000, idle=46.0))[0]
    assert (recs["ECC corrected trend"]["verdict"], recs["idle temperature trend"]["verdict"]) == ("FAIL", "FAIL")
    recs = judge(db_url, doc_with(bw=4190.0, ecc=13, idle=31.0))[0]
    assert (recs["ECC corrected trend"]["verdict"], recs["idle temperature trend"]["verdict"]) == ("PASS", "PASS")
    assert "counter was cleared" in judge(db_url, doc_with(bw=4190.0, ecc=0))[0]["ECC corrected trend"]["reason"]


def test_failing_points_are_not_the_yardstick(db_url, tmp_path):
    # three good validates, then two where the GPU's bandwidth check failed against the references
    past_validations(db_url, tmp_path, [4200.0, 4180.0, 4190.0])
    for day, bw in ((5, 2000.0), (6, 2100.0)):
        history.record([write_val(tmp_path / f"bad{day}", doc_with(bw), f"2026-11-{day:02d}T10:00:00Z")], db_url)
    bw = judge(db_url, doc_with(bw=2050.0))[0][f"{BW} trend"]
    assert (bw["verdict"], bw["median"], bw["past_points"]) == ("FAIL", 4190.0, 3)
    # a GPU that keeps failing is still judged against the passing points before (past the window's depth)
    for day in range(7, 14):
        history.record([write_val(tmp_path / f"bad{day}", doc_with(2000.0), f"2026-11-{day:02d}T10:00:00Z")], db_url)
    bw = judge(db_url, doc_with(bw=2050.0))[0][f"{BW} trend"]
    assert (bw["verdict"], bw["median"], bw["past_points"]) == ("FAIL", 4190.0, 3)


def hostile_rows(url, uuid):
    """Rows no gpulab wrote: a NaN, an absurd value, a huge integer, text in the number column, a bad time."""
    eng = sa.create_engine(url)
    with eng.begin() as conn:
        gid = conn.execute(sa.select(Gpu.id).where(Gpu.uuid == uuid)).scalar()
        vid = conn.execute(
            sa.insert(Validation)
            .values(
                key="x" * 64,
                source="planted",
                level="standard",
                verdict="PASS",
                imported_at=dt.datetime.now(dt.timezone.utc),
                at=dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc),
            )
            .returning(Validation.id)
        ).scalar()
        rows = [("NaN", "2026-11-20 10:00:00"), (1e300, "2026-11-21 10:00:00"), (2**62, "2026-11-22 10:00:00")]
        if url.startswith("sqlite"):
            rows += [("abc", "2026-11-23 10:00:00"), (5.0, "not a time")]
        for value, at in rows:
            conn.execute(
                sa.text(
                    "INSERT INTO checks (validation_id, host, gpu_id, gpu_index, name, verdict, value, at) "
                    "VALUES (:v, 'h200-01', :g, 0, :n, 'PASS', :val, :at)"
                ),
                {
                    "v": vid,
                    "g": gid,
                    "n": BW,
                    "val": float(value) if value == "NaN" else value,
                    "at": at if url.startswith("sqlite") else dt.datetime.fromisoformat(at + "+00:00"),
                },
            )
    eng.dispose()
    return len(rows)


def test_hostile_rows_are_left_out_never_a_traceback(db_url, tmp_path):
    past_validations(db_url, tmp_path, [4200.0, 4180.0, 4190.0])
    uuid = burnin_doc()["probe"]["gpus"][0]["uuid"]
    n = hostile_rows(db_url, uuid)
    recs, v, past = judge(db_url, doc_with(bw=4190.0))
    bw = recs[f"{BW} trend"]
    assert bw["verdict"] == "PASS" and bw["past_points"] == 3 and bw["median"] == 4190.0
    # NaN (and, in SQLite, text and a bad time) are left out by the reader; the absurd ones by the trend check
    assert past["left_out"] >= 1 and past["left_out"] <= n
    assert v.to_json()


def test_a_database_that_cannot_be_read_is_said_in_the_records(tmp_path):
    bad = tmp_path / "history.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    recs, v, past = judge(f"sqlite:///{bad}", doc_with(bw=4190.0))
    assert recs[f"{BW} trend"]["verdict"] == "PASS"
    assert recs[f"{BW} trend"]["reason"].startswith(
        f"not judged: the history could not be read: history database sqlite:///{bad}: not a readable SQLite database"
    )
    assert all(r["verdict"] == "PASS" and r["judged"] is False for r in recs.values())


def test_a_failing_validate_quarantines_the_gpu_and_a_passing_one_releases_it(db_url, tmp_path):
    f = write_validation(tmp_path / "v1", "h200-01", fail_gpu=2, when="2026-12-01T13:00:00Z")
    import json

    doc = json.loads(f.read_text())
    lines = history.after_validate([f], doc, db_url)
    assert lines[0].startswith("history: 0 run(s) added, 0 already there; 1 validation(s) added")
    # the H200 document's GPUs 0 and 1 fail their concurrent host-to-device figure, GPU 2 has a remap pending
    assert [line.split(":")[0] for line in lines[1:]] == [
        "quarantined h200-01",
        "quarantined h200-01",
        "quarantined h200-01",
    ]
    assert lines[3].startswith(
        "quarantined h200-01:2: validate 2026-12-01T13:00:00Z: row remapping: row remap "
        "pending (0 uncorrectable): reset the GPU; action: reset_gpu: "
    )
    assert (
        lines[1].startswith(
            "quarantined h200-01:0: validate 2026-12-01T13:00:00Z: h2d_bandwidth_gbs (all GPUs "
            "at once): 49.8 GB/s is below 49.9"
        )
        and "; action: rerun: " in lines[1]
    )
    d = hdb.open_db(db_url)
    try:
        entries = q.active(d)
        assert [(e.host, e.gpu_index, e.who) for e in entries] == [("h200-01", i, "gpulab validate") for i in (0, 1, 2)]
        assert entries[2].action.startswith("reset_gpu: ") and "row remap pending" in entries[2].reason
        assert q.for_sweep(d, ["h200-01"])["h200-01"]["gpus"] == [0, 1, 2]
        # the same failures again: said, not added twice
        again = history.after_validate([f], doc, db_url)
        assert again[1].startswith("h200-01:0: already quarantined since ") and len(q.active(d)) == 3
        later = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=2)).isoformat()
        ok = write_validation(tmp_path / "v2", "h200-01", when=later)
        assert [line[:31] for line in history.after_validate([ok], json.loads(ok.read_text()), db_url)[1:]] == [
            "h200-01:0: already quarantined ",
            "h200-01:1: already quarantined ",
        ]
        assert "passed" in q.release(d, q.parse_target("h200-01:2"), who="ops").release_note
        with pytest.raises(CheckFailed, match="fails: GPU 0 h2d_bandwidth_gbs"):
            q.release(d, q.parse_target("h200-01:0"), who="ops")
    finally:
        d.close()


def test_a_host_wide_failure_quarantines_the_host_and_the_setting_turns_it_off(db_url, tmp_path):
    from lab.core.errors import HostError
    from lab.validate.verdict import write_outputs

    v = fleet.evaluate(
        {"r740-09": HostError("r740-09: unreachable: no route to host")},
        [{"name": "r740-09"}],
        fleet.load_references(),
        None,
    )
    write_outputs(v, tmp_path / "v")
    f = tmp_path / "v" / "validate.json"
    assert history.after_validate([f], v.data, db_url, quarantine=False)[1:] == []
    lines = history.after_validate([tmp_path / "v" / "validate.json"], v.data, db_url)
    assert lines[1].startswith("quarantined r740-09: validate ")
    assert "reachable: r740-09: unreachable: no route to host; action: fix_config: Make the host reachable" in lines[1]
    d = hdb.open_db(db_url)
    try:
        assert q.for_sweep(d, ["r740-09"])["r740-09"]["gpus"] is None
    finally:
        d.close()


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"hosts": []},
        {"hosts": {"../x": {"verdict": "FAIL"}}},
        {"hosts": {"h": {"verdict": "FAIL", "gpus": {"0": {"index": 10**30, "verdict": "FAIL"}}}}},
        {"hosts": {"h": {"verdict": "FAIL", "checks": "x", "gpus": []}}},
    ],
)
def test_malformed_verdicts_quarantine_nothing(doc):
    from lab.history.autoquarantine import failures

    assert failures(doc) == []
