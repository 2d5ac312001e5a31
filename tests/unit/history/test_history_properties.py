"""Property tests (Hypothesis) of every document kind the history database takes in (issue 45): a run's
status.json, validate.json, the burn-in document (through validate's verdicts), a sweep's health document,
the vendor tools' output inside a burn-in document (DCGM, nccl-tests, nvbandwidth), scaling.json and
systems/*.json, and the settings. Whatever one hostile value does, the outcome is either a whole import or
one ConfigError line (no traceback), and a refused import leaves the database as it was."""

from __future__ import annotations

import copy
import json
import pytest
from histdata import burnin_doc, write_run, write_validation
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from lab.core import config
from lab.core.settings import flag
from lab.core.errors import ConfigError, GpulabError
from lab.history import db as hdb
from lab.history import query, sweeps
from lab.history import quarantine as q
from lab.history.models import Check, Gpu, Quarantine, Run, RunGpu, Validation
from lab.history.sources import read_sources
from lab.history.store import add_sources
from lab.results import resulttree, roundtree
from runner import rundir as writer

# deadline off: examples write files and open databases; few examples: the history tests' time stays lean
FEW = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**31, -(2**31) - 1, 2**63, float("inf"), float("-inf"), float("nan"), 1e308, -0.0, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "",
            "\udc80",
            "a\udcffb",
            "\x1b[2J\x1b]0;x\x07",
            "\x00",
            "x" * 5000,
            "9999-99-99T99:99Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59-12:00",
            "1e999",
            "٣",
            "GPU-\udc80",
            "../..",
            "r740-01",
            "FAIL",
            "PASS",
        ]
    ),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.none(), max_size=2),
)


def _paths(node, at=()):
    yield at
    if isinstance(node, dict):
        for k, v in list(node.items())[:64]:
            yield from _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:16]):
            yield from _paths(v, (*at, i))


def mutate(doc, data, times: int = 3):
    """``doc`` with up to ``times`` nodes replaced by hostile values (a key may be replaced too)."""
    for _ in range(data.draw(st.integers(1, times))):
        paths = [p for p in _paths(doc) if p]
        path = paths[data.draw(st.integers(0, len(paths) - 1))]
        node = doc
        for part in path[:-1]:
            node = node[part]
        if isinstance(node, dict) and data.draw(st.booleans()) and data.draw(st.booleans()):
            node[data.draw(HOSTILE.filter(lambda v: isinstance(v, str)))] = node.pop(path[-1])  # a hostile key
        else:
            node[path[-1]] = data.draw(HOSTILE)
    return doc


def state(url: str) -> tuple:
    d = hdb.open_db(url)
    try:
        with d.session() as s:
            return tuple(
                s.scalar(select(func.count()).select_from(m)) for m in (Run, RunGpu, Validation, Check, Gpu, Quarantine)
            )
    finally:
        d.close()


def import_or_refuse(url: str, paths) -> None:
    """Import ``paths``: whole, or one ConfigError line with the database unchanged; then read it all back."""
    before = state(url)
    try:
        src = read_sources(paths)
        d = hdb.open_db(url)
        try:
            add_sources(d, src)
        finally:
            d.close()
    except ConfigError as exc:
        assert "\n" not in exc.message
        assert state(url) == before
    d = hdb.open_db(url)
    try:
        shown = "\n".join(query.table(query.history_rows(d, limit=500)) + q.table(q.active(d)))
        assert "\x1b" not in shown and "\x00" not in shown
        shown.encode("utf-8")
    finally:
        d.close()


@pytest.fixture(scope="module")
def validate_doc(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("v")
    write_validation(out, "h200-01", fail_gpu=1)
    return json.loads((out / "validate.json").read_text())


def _set(doc, path, value):
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


# the red team's cases (each a traceback or a half-written database on ac25178), then Hypothesis's
KNOWN_VALIDATE = [
    (("hosts", "h200-01", "checks", 0, "check"), "bad \udc80 name"),
    (("hosts", "h200-01", "gpus", "0", "uuid"), "GPU-\udc80"),
    (("hosts", "h200-01", "gpus", "0", "index"), 2**40),
    (("hosts", "h200-01", "checks", 0, "reason"), "a\x00b"),
    (("hosts", "h200-01", "gpus", "0", "checks"), 7),
    (("hosts", "h200-01", "checks"), {"not": "a list"}),
]


@pytest.mark.parametrize("path, value", KNOWN_VALIDATE)
def test_a_known_hostile_validate_json(db_url, tmp_path, validate_doc, path, value):
    path_ = tmp_path / "validate.json"
    path_.write_text(json.dumps(_set(copy.deepcopy(validate_doc), path, value)))
    import_or_refuse(db_url, [path_])


KNOWN_STATUS = [("gpus", [0, 0]), ("gpus", [2**63]), ("seed", 2**40), ("start", "0001-01-01T00:00:00Z")]


@pytest.mark.parametrize("key, value", KNOWN_STATUS)
def test_a_known_hostile_run_status(db_url, tmp_path, key, value):
    d = write_run(tmp_path / "runs" / "sw", "r740-01", "ncf-s1", gpus=(0, 1))
    (d / writer.STATUS).write_text(json.dumps(_set(json.loads((d / writer.STATUS).read_text()), (key,), value)))
    writer.write_sums(d)
    import_or_refuse(db_url, [tmp_path / "runs"])


@FEW
@given(data=st.data())
def test_a_hostile_validate_json(db_url, tmp_path_factory, validate_doc, data):
    doc = mutate(copy.deepcopy(validate_doc), data)
    path = tmp_path_factory.mktemp("vj") / "validate.json"
    path.write_text(json.dumps(doc))
    import_or_refuse(db_url, [path])


@FEW
@given(data=st.data())
def test_a_hostile_run_status(db_url, tmp_path_factory, data):
    root = tmp_path_factory.mktemp("runs")
    d = write_run(root / "sw", "r740-01", "ncf-s1", gpus=(0, 1))
    status = mutate(json.loads((d / writer.STATUS).read_text()), data)
    (d / writer.STATUS).write_text(json.dumps(status))
    writer.write_sums(d)
    import_or_refuse(db_url, [root])


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_hostile_burnin_document_and_its_tools_output(tmp_path_factory, data):
    """The burn-in document (the vendor tools' output inside it: DCGM, nccl-tests, nvbandwidth) through
    validate's verdicts into the database."""
    out = tmp_path_factory.mktemp("b")
    doc = mutate(burnin_doc(), data, times=4)
    try:
        path = write_validation(out, "h200-01", doc=doc)
    except GpulabError as exc:  # validate itself refuses it: one line
        assert "\n" not in exc.message
        return
    import_or_refuse(f"sqlite:///{out / 'h.sqlite'}", [path])


def _health(i: int) -> dict:
    return {
        "kind": "gpulab-health",
        "schema": 1,
        "collected_at": "2026-12-01T10:00:00+00:00",
        "boot_id": "6a1f5d2e-0000-4000-8000-000000000001",
        "uptime_s": 1000.0,
        "nvidia": None,
        "gpu_count": 2,
        "gpus": [
            {
                "index": g,
                "name": "Tesla T4",
                "uuid": f"GPU-0000000{g}-aaaa-bbbb-cccc-dddddddddd{i:02d}",
                "serial": f"13200000000{g}",
                "ecc": {"uncorrected_volatile": 0, "uncorrected_aggregate": 0},
                "row_remap": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
            }
            for g in range(2)
        ],
        "xid": {"source": "dmesg", "error": None, "events": []},
    }


@settings(FEW, phases=[Phase.explicit, Phase.reuse, Phase.generate])  # a failure is shown, not shrunk for minutes
@given(data=st.data())
def test_a_hostile_health_document(db_url, data):
    from lab.validate import health as judge

    doc = mutate(_health(data.draw(st.integers(0, 99))), data)
    before = state(db_url)
    problem = judge.check_document(doc)  # what the health gate asks first (lab.sweep.gate)
    if problem is not None:
        assert "\n" not in problem
        return
    memory = sweeps.open_for(db_url, "sw")
    try:
        h = judge.judge(doc, expect_gpus=True)
        memory.record_health("r740-01", h, doc)
    except ConfigError as exc:
        assert "\n" not in exc.message
        assert state(db_url) == before
    finally:
        memory.close()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(doc=st.one_of(HOSTILE, st.fixed_dictionaries({"scaling_factor": HOSTILE})))
def test_a_hostile_scaling_json(tmp_path_factory, doc):
    d = tmp_path_factory.mktemp("s")
    (d / roundtree.SCALING_FILE).write_text(json.dumps(doc))
    factor, note = roundtree.scaling_factor(d, d)
    assert roundtree.SCALING_RANGE[0] <= factor <= roundtree.SCALING_RANGE[1] and "\n" not in note


SYSTEM_KEYS = ("accelerator_model_name", "accelerators_per_node", "number_of_nodes", "submitter", "framework", "nodes")


NODE = st.dictionaries(st.sampled_from(["accelerator", "num_accelerators", "num_nodes"]), HOSTILE)
SYSTEM = st.dictionaries(st.sampled_from(SYSTEM_KEYS), st.one_of(HOSTILE, st.lists(NODE, max_size=3)), max_size=6)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(doc=SYSTEM)
def test_a_hostile_systems_json(tmp_path_factory, doc):
    from types import SimpleNamespace

    root = tmp_path_factory.mktemp("sys")
    reader = resulttree.TreeReader.__new__(resulttree.TreeReader)
    reader.rules = SimpleNamespace(device=lambda name, published=True: name)
    reader.root = root
    reader._inside = lambda p: True
    facts = resulttree.SystemFacts(submitter="org", system="sys", key="org/results/sys")
    reader._apply(facts, doc, root / "systems" / "sys.json")
    assert facts.nodes is None or resulttree.NODES[0] <= facts.nodes <= resulttree.NODES[1] * 3
    assert facts.accelerators is None or 0 <= facts.accelerators <= resulttree.NODES[1] * resulttree.ACCELERATORS[1] * 3


SETTING_KEYS = (
    "results",
    "history_url",
    "history_lock_timeout_s",
    "seeds",
    "gpus",
    "mode",
    "workloads",
    "validate",
    "sweep",
    "nodes",
    "run_timeout_minutes",
)


@pytest.mark.parametrize("word", ["off", "no", "0", 0, "yes"])
def test_a_yes_no_word_in_a_file_layer_is_taken(word):
    assert config._checked({"validate": {"quarantine": word}}, "invoke.yaml")


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    key=st.sampled_from(SETTING_KEYS),
    value=st.one_of(
        HOSTILE, st.fixed_dictionaries({"quarantine": HOSTILE}), st.fixed_dictionaries({"poll_s": HOSTILE})
    ),
)
def test_a_hostile_setting_in_a_file_layer_is_one_line(key, value):
    try:
        config._checked({key: value}, "invoke.yaml")
    except ConfigError as exc:
        assert "\n" not in exc.message and "(invoke.yaml)" in exc.message and len(exc.message) < 400


ENV_VARS = (
    "INVOKE_GPULAB_VALIDATE_QUARANTINE",
    "INVOKE_GPULAB_SEEDS",
    "INVOKE_GPULAB_SWEEP_POLL_S",
    "INVOKE_GPULAB_HISTORY_LOCK_TIMEOUT_S",
    "INVOKE_GPULAB_RESULTS",
    "INVOKE_GPULAB_NOSUCH",
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(var=st.sampled_from(ENV_VARS), value=st.text(max_size=30))
def test_a_hostile_environment_variable_is_one_line(var, value):
    defaults = config.defaults()["gpulab"]
    try:
        env = config.env_section(defaults, {var: value})
    except ConfigError as exc:
        assert "\n" not in exc.message and var in exc.message and len(exc.message) < 400
        return
    if var == "INVOKE_GPULAB_VALIDATE_QUARANTINE":
        assert env["validate"]["quarantine"] is flag(value, var)
