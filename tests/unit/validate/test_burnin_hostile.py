"""Issue 27: a burn-in document read back from a host is hostile input. Any document either evaluates
or is one RunError naming the host and the field; a real document still evaluates as before."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snapshots import FIXTURES, healthy_path, inventory_for, stack_of

from lab.core.errors import GpulabError, RunError
from lab.validate import fleet

DOC = json.loads(healthy_path().read_text())

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=8,
)


def _paths(node, here=()):
    yield here
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, here + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            yield from _paths(v, here + (i,))


PATHS = [p for p in _paths(DOC) if p and p[0] != "_fixture"]


def _replace(doc, path, value):
    doc = copy.deepcopy(doc)
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


def run(docs, refs):
    """evaluate with the inventory and stacks of the untouched document (the fleet's own, not the host's)."""
    return fleet.evaluate(docs, [inventory_for(DOC, n) for n in docs], refs, stack_of(DOC))


def _one_line(doc):
    return json.dumps(doc, allow_nan=False) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.tuples(st.sampled_from(PATHS), JSON), min_size=1, max_size=3))
def test_any_mutated_burnin_document_evaluates_or_is_one_line(refs, cuts):
    doc = DOC
    for path, value in cuts:
        try:
            doc = _replace(doc, path, value)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier cut removed the path
    try:
        got = fleet.read_burnin("log line\n" + _one_line(doc), "h200-01", 0)
    except RunError as exc:
        assert "\n" not in exc.message and exc.message.startswith("h200-01: runner burnin printed")
        return
    try:
        verdicts = run({"h200-01": got}, refs)
    except GpulabError:
        return
    assert verdicts.hosts["h200-01"]["verdict"] in ("PASS", "WARN", "FAIL")


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(cuts=st.lists(st.tuples(st.sampled_from(PATHS), JSON), min_size=1, max_size=3))
def test_evaluate_never_raises_on_a_document_read_without_the_gate(refs, cuts):
    """A document handed straight to evaluate (not through read_burnin) gives a FAIL record, no traceback."""
    doc = DOC
    for path, value in cuts:
        try:
            doc = _replace(doc, path, value)
        except (KeyError, IndexError, TypeError):
            pass
    try:
        verdicts = run({"h200-01": doc}, refs)
    except GpulabError:
        return
    assert verdicts.hosts["h200-01"]["verdict"] in ("PASS", "WARN", "FAIL")


def test_a_real_document_reads_back_and_evaluates_as_before(refs):
    got = fleet.read_burnin(_one_line(DOC), "h200-01", 0)
    assert got == DOC
    before, after = run({"h200-01": DOC}, refs).data, run({"h200-01": got}, refs).data
    before.pop("generated_at"), after.pop("generated_at")
    assert before == after


@pytest.mark.parametrize(
    "path, value, field",
    [
        (("gpus", "0"), ["not", "an", "object"], "gpus.0"),
        (("probe", "gpus"), "none", "probe.gpus"),
        (("xid", "events"), [{"gpu": 0}], "xid.events.0"),
        (("results",), {"ok": True}, "results"),
        (("gpus_selected",), [10**12], "gpus_selected.0"),
    ],
)
def test_a_hostile_field_is_one_line_naming_host_and_field(path, value, field):
    with pytest.raises(RunError) as exc:
        fleet.read_burnin(_one_line(_replace(DOC, path, value)), "h200-01", 0)
    msg = exc.value.message
    assert msg.startswith("h200-01: runner burnin printed a malformed burn-in document: ") and f" {field}: " in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    "path, value, field",
    [
        (("gpus", "0", "load", "samples"), -4, "gpus.0.load.samples"),
        (("gpus", "0", "load", "power_w_max"), "698 W", "gpus.0.load.power_w_max"),
    ],
)
def test_one_hostile_value_costs_that_value_alone(refs, path, value, field):
    """Issue 45: a value of the wrong form where the document may say "not measured" is left out and
    named; every other figure of the host is still read and judged."""
    got = fleet.read_burnin(_one_line(_replace(DOC, path, value)), "h200-01", 0)
    node = got
    for k in path:
        node = node[k]
    assert node is None
    assert len(got["unreadable"]) == 1 and got["unreadable"][0].startswith(field + ": ")
    intact = {k: v for k, v in got.items() if k != "unreadable"}
    assert intact == _replace(DOC, path, None)
    host = run({"h200-01": got}, refs).hosts["h200-01"]
    warn = [c for c in host["checks"] if c["check"] == "burn-in document"]
    assert len(warn) == 1 and warn[0]["verdict"] == "WARN" and field in warn[0]["reason"]
    assert warn[0]["action"]["kind"] == "fix_config"
    assert host["verdict"] != "PASS"
    clean = run({"h200-01": DOC}, refs).hosts["h200-01"]
    assert set(host["gpus"]) == set(clean["gpus"])
    load_phase = {"load temperature", "throttling", "load SM clock", "power vs limit", "power under load"}
    for g, rec in clean["gpus"].items():  # only the checks that read the load phase's figures may go
        kept = {(c["check"], c["verdict"]) for c in host["gpus"][g]["checks"]}
        lost = {(c["check"], c["verdict"]) for c in rec["checks"]} - kept
        assert {name for name, _ in lost} <= load_phase, lost
        assert len(kept) >= 5


def test_a_document_of_many_hostile_values_is_malformed_as_a_whole():
    doc = copy.deepcopy(DOC)
    phase = doc["gpus"]["0"]["load"]
    for i in range(80):
        phase[f"x{i}"] = "hostile"
    with pytest.raises(RunError, match="^h200-01: runner burnin printed a malformed burn-in document: "):
        fleet.read_burnin(_one_line(doc), "h200-01", 0)


def test_the_runner_cannot_name_its_own_unreadable_values():
    doc = copy.deepcopy(DOC)
    doc["unreadable"] = ["everything"]
    got = fleet.read_burnin(_one_line(doc), "h200-01", 0)
    assert "unreadable" not in got


@pytest.mark.parametrize(
    "path, value",
    [
        (("gpus", "0", "load"), "hot"),
        (("probe", "gpus", 0, "pcie"), [5, 16]),
        (("xid",), {"events": "none"}),
        (("results",), [7]),
        (("probe",), "a probe"),
    ],
)
def test_an_ungated_hostile_document_is_a_runner_fail(refs, path, value):
    host = run({"h200-01": _replace(DOC, path, value)}, refs).hosts["h200-01"]
    assert host["verdict"] == "FAIL"
    assert any(c["check"] == "runner" and "malformed" in c["reason"] for c in host["checks"])


def test_a_gpu_index_listed_twice_is_a_malformed_document_not_one_gpu_hidden(refs):
    doc = copy.deepcopy(DOC)
    doc["probe"]["gpus"].append(copy.deepcopy(doc["probe"]["gpus"][0]))  # a clean GPU 0 after ...
    doc["probe"]["gpus"][0]["ecc"]["uncorrected_volatile"] = 4  # ... the one that fails
    host = run({"h200-01": fleet.read_burnin(_one_line(doc), "h200-01", 0)}, refs).hosts["h200-01"]
    assert host["verdict"] == "FAIL" and host["gpus"] == {}
    assert [c["reason"] for c in host["checks"] if c["check"] == "runner"] == [
        "the host's burn-in document is malformed (ValueError: probe.gpus lists GPU index 0 more than once)"
    ]


def _with_link_and_tool_facts(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    gpu = doc["probe"]["gpus"][0]
    gpu["pcie"]["replay_count"] = 0
    gpu["aer"] = {"device": "0000:18:00.0", "upstream": None}
    gpu["aer"].update({k: {"total": 0, "counts": {}} for k in ("correctable", "nonfatal", "fatal")})
    doc["tools"] = {"nccl_tests": {"ran": True, "busbw_gbs": 480.0, "ngpus": len(doc["probe"]["gpus"]), "wrong": 0}}
    return doc


@pytest.mark.parametrize(
    "path, value, field, judged",
    [
        (("gpus", "0", "idle", "temp_c_max"), -1e308, "gpus.0.idle.temp_c_max", "idle temperature"),
        (("gpus", "0", "load", "sm_clock_mhz_median"), 1e308, "gpus.0.load.sm_clock_mhz_median", "load SM clock"),
        (("gpus", "0", "solo", "matmul_bf16_tflops"), 1e308, "gpus.0.solo.matmul_bf16_tflops", "matmul_bf16_tflops"),
        (("probe", "gpus", 0, "pcie", "width_current"), 1e308, "probe.gpus.0.pcie.width_current", "PCIe link"),
        (("probe", "gpus", 0, "pcie", "replay_count"), -5, "probe.gpus.0.pcie.replay_count", "PCIe replays"),
        (("probe", "gpus", 0, "aer", "fatal", "total"), -1, "probe.gpus.0.aer.fatal.total", "PCIe AER"),
        (("tools", "nccl_tests", "busbw_gbs"), 1e308, "tools.nccl_tests.busbw_gbs", "nccl-tests busbw"),
    ],
)
def test_a_figure_or_counter_no_gpu_can_show_is_left_out_never_judged(refs, path, value, field, judged):
    """A negative count or temperature, or a figure beyond 1e12 (lab.core.limits.MEASUREMENT_ABS), passed
    its check: -1 fatal AER errors, 1e308 TFLOP/s. It is no measurement: left out and named."""
    doc = _with_link_and_tool_facts(DOC)
    got = fleet.read_burnin(_one_line(_replace(doc, path, value)), "h200-01", 0)
    assert [x.split(": ")[0] for x in got["unreadable"]] == [field]
    host = run({"h200-01": got}, refs).hosts["h200-01"]
    assert host["verdict"] != "PASS" and any(c["check"] == "burn-in document" for c in host["checks"])
    records = host["checks"] + host["gpus"]["0"]["checks"]
    assert all(c["measured"] != value for c in records if c["check"] == judged)


@pytest.mark.parametrize(
    "path, value, said",
    [
        (("gpus",), {}, "no figure under load of GPU 0"),
        (("gpus", "0", "solo"), {}, "no figure under load of GPU 0"),
        (("outcome",), "exploded", "outcome 'exploded', not one the runner writes"),
        (("level",), "quick", "level 'quick', not the standard asked for"),
        (("kind",), "a bare probe", "a probe document, no burn-in"),
        (("probe", "gpu_count"), 2, "GPU 1 counted by the driver (gpu_count 2) but not in it"),
    ],
)
def test_a_burn_in_that_did_not_report_what_its_level_writes_is_never_a_pass(refs, path, value, said):
    doc = _replace(DOC, path, value)
    if path == ("kind",):
        doc = doc["probe"]
    got = fleet.read_burnin(_one_line(doc), "h200-01", 0)
    host = inventory_for(DOC, gpu_count=doc.get("probe", doc)["gpu_count"])  # the inventory agrees with the count
    v = fleet.evaluate({"h200-01": got}, [host], refs, stack_of(DOC), level="standard")
    host = v.hosts["h200-01"]
    (warn,) = [c for c in host["checks"] if c["check"] == "burn-in document"]
    assert host["verdict"] == "WARN" and warn["verdict"] == "WARN" and warn["reason"].startswith(said)
    assert warn["action"]["kind"] == "fix_config"
    clean = fleet.evaluate({"h200-01": DOC}, [inventory_for(DOC)], refs, stack_of(DOC), level="standard")
    assert clean.hosts["h200-01"]["verdict"] == "PASS"


def test_a_negative_error_count_cannot_offset_the_others(refs):
    """-40 single-bit retired pages took 70 double-bit ones below the FAIL bound: now -40 is left out."""
    doc = _replace(DOC, ("probe", "gpus", 0, "retired_pages"), {"single_bit": -40, "double_bit": 70, "pending": False})
    got = fleet.read_burnin(_one_line(doc), "h200-01", 0)
    assert got["probe"]["gpus"][0]["retired_pages"]["single_bit"] is None
    host = run({"h200-01": got}, refs).hosts["h200-01"]
    c = next(c for c in host["gpus"]["0"]["checks"] if c["check"] == "retired pages")
    assert c["verdict"] == "FAIL" and c["reason"] == "70 retired pages: replace the GPU"


def test_a_gpu_missing_a_figure_the_hosts_other_gpus_have_is_named(refs):
    x8 = json.loads((FIXTURES / "h200-x8-standard.handmade.json").read_text())
    del x8["gpus"]["3"]["solo"]["matmul_bf16_tflops"]  # its reference check and fleet check go with it
    got = fleet.read_burnin(_one_line(x8), "h200-01", 0)
    v = fleet.evaluate({"h200-01": got}, [inventory_for(x8)], refs, stack_of(x8), level="standard")
    (warn,) = [c for c in v.hosts["h200-01"]["checks"] if c["check"] == "burn-in document"]
    assert warn["verdict"] == "WARN" and warn["reason"].startswith("GPU 3 lacks matmul_bf16_tflops")
