"""Compile once, then fan out (lab.sweep.pilot): the rule over generated host and configuration sets."""

import threading
import time

from hypothesis import given, settings, strategies as st

from lab.sweep import pilot
from lab.sweep.pilot import Key, pick
from tests.unit.localhost import local_host

K = [Key("current", "NVIDIA H200", w, "full", "ttt", g) for w in ("resnet50", "ssd", "ncf") for g in (1, 2)]


def _key_lists():
    key = st.one_of(st.none(), st.sampled_from(K[:4]))
    return st.dictionaries(
        st.sampled_from([f"h{i}" for i in range(6)]), st.lists(key, max_size=6), min_size=1, max_size=6
    )


@settings(max_examples=300, deadline=None)
@given(
    units=_key_lists(),
    wait_s=st.sampled_from([0, 2.5, 50.0]),
    times=st.lists(st.floats(0.1, 5.0), min_size=36, max_size=36),
    fail_bits=st.integers(0, 2**36 - 1),
)
def test_every_run_runs_once_one_cold_compile_per_group_and_no_host_idles_with_work(units, wait_s, times, fail_bits):
    names = sorted(units)
    dur = lambda u, i: times[(names.index(u) * 6 + i) % 36]  # noqa: E731
    fails = {(u, i) for u in units for i in range(len(units[u])) if fail_bits >> (names.index(u) * 6 + i) & 1}
    r = pilot.simulate(units, wait_s, dur, fails)
    # every run exactly once
    assert sorted((u, i) for _, u, i, _ in r.order) == sorted((u, i) for u in units for i in range(len(units[u])))
    # one cold compile per group (its pilot), unless the pilot failed or passed the wait
    starts = {(u, i): (t, role) for t, u, i, role in r.order}
    for k in {k for ks in units.values() for k in ks} - {None}:
        cold = [
            (u, i) for (u, i), (t, role) in starts.items() if units[u][i] == k and role in ("pilot", "cold", "plain")
        ]
        if wait_s == 0:
            continue
        ((pu, pi),) = [x for x in cold if starts[x][1] == "pilot"]  # one pilot per group, the first to start it
        assert starts[(pu, pi)][0] == min(starts[x][0] for x in cold)
        if (pu, pi) not in fails and dur(pu, pi) < wait_s:
            assert cold == [(pu, pi)], (k, cold)
        for x in cold:  # nobody compiles cold before the pilot's run ended or its wait passed
            if x != (pu, pi):
                assert starts[x][0] >= min(starts[(pu, pi)][0] + dur(pu, pi), starts[(pu, pi)][0] + wait_s) - 1e-9
    # a unit waits only while every run it has left belongs to a group another unit is piloting right now
    for t, u, _keys in r.idle:
        left = [units[u][i] for i in range(len(units[u])) if starts[(u, i)][0] > t]
        assert left and None not in left
        for k in left:
            ((pu, pi),) = [(v, i) for (v, i), (_, role) in starts.items() if role == "pilot" and units[v][i] == k]
            assert pu != u and starts[(pu, pi)][0] <= t < starts[(pu, pi)][0] + min(dur(pu, pi), wait_s)


def test_two_hosts_one_configuration_five_seeds():
    k = K[0]
    r = pilot.simulate({"a": [k] * 5, "b": [k] * 5}, wait_s=600)
    assert r.pilots == {k: "a"}
    assert [(t, u, role) for t, u, _, role in r.order][:3] == [(0, "a", "pilot"), (1, "a", "warm"), (1, "b", "warm")]
    assert r.idle == [(0, "b", ((k, "a"),))]


def test_a_host_runs_other_work_while_another_pilots():
    r = pilot.simulate({"a": [K[0], K[1]], "b": [K[0], K[1]], "c": [K[0], None]}, wait_s=600)
    assert r.pilots == {K[0]: "a", K[1]: "b"}
    assert ("c", 1, "plain") in [(u, i, role) for t, u, i, role in r.order if t == 0]
    assert r.idle == []


def test_a_failed_pilot_releases_the_others():
    r = pilot.simulate({"a": [K[0]], "b": [K[0]], "c": [K[0]]}, wait_s=600, fails={("a", 0)})
    assert [(u, role) for _, u, _, role in r.order] == [("a", "pilot"), ("b", "cold"), ("c", "cold")]


def test_a_slow_pilot_releases_the_others_at_the_wait():
    r = pilot.simulate({"a": [K[0]], "b": [K[0]]}, wait_s=30, duration=lambda u, i: 100.0)
    assert [(t, u, role) for t, u, _, role in r.order] == [(0, "a", "pilot"), (30, "b", "cold")]


def test_off_and_artifacts_held_already():
    assert pick("a", [K[0], K[0]], {}, 0.0, 0) == pilot.Pick(0, "plain")
    r = pilot.simulate({"a": [K[0]], "b": [K[0]]}, wait_s=600, ready=[K[0]])
    assert [role for *_, role in r.order] == ["warm", "warm"] and r.pilots == {}


def test_cpu_runs_have_no_group_and_the_plan_names_each_pilot():
    from lab.sweep.plan import PlannedRun

    def host(name, model):
        return local_host("/tmp", name, gpu_model=model, gpu_count=2)

    hosts = {"a": host("a", "H200"), "b": host("b", "H200"), "c": host("c", "H100")}
    runs = [PlannedRun(h, "resnet50", 1, s, scale="full") for h in "abc" for s in (1, 2)]
    assert pilot.key_of(PlannedRun("a", "ncf", 0, 1), hosts["a"]) is None
    lines = pilot.describe(runs, hosts, 600)
    assert lines[0].startswith("compile once, then fan out: 2 compile group(s)")
    assert lines[1:] == [
        "  resnet50 full ttt 1 GPU on H100 (current): pilot c",
        "  resnet50 full ttt 1 GPU on H200 (current): pilot a, then b",
    ]
    assert "off" in pilot.describe(runs, hosts, 0)[0]


def test_threads_wait_for_the_pilot_and_stop_ends_a_wait():
    p = pilot.Pilots(wait_s=60)
    stop = threading.Event()
    assert p.next("a", [K[0]], stop) == pilot.Pick(0, "pilot")
    got = []
    t = threading.Thread(target=lambda: got.append(p.next("b", [K[0]], stop)))
    t.start()
    time.sleep(0.3)
    assert got == [] and p.pilots("a", K[0])
    p.artifacts(K[0])
    t.join(5)
    assert got == [pilot.Pick(0, "warm")]
    p2 = pilot.Pilots(wait_s=60)
    p2.next("a", [K[1]], stop)
    t = threading.Thread(target=lambda: got.append(p2.next("b", [K[1]], stop)))
    t.start()
    time.sleep(0.2)
    stop.set()
    t.join(5)
    assert not t.is_alive() and got[-1] is None
    p3 = pilot.Pilots(wait_s=60)
    p3.next("a", [K[2]], threading.Event())
    p3.ended("a", K[2], "host lost")
    assert p3.next("b", [K[2]], threading.Event()) == pilot.Pick(0, "cold")


def test_cpu_runs_compile_and_have_pilots_when_the_sweep_says_so(tmp_path):
    from lab.sweep import compiled
    from lab.sweep.hostrun import Settings
    from lab.sweep.plan import PlannedRun

    host = local_host("/tmp", "a")
    run = PlannedRun("a", "ncf", 0, 1, mode="throughput")
    k = pilot.key_of(run, host, cpu=True)
    assert k.label() == "ncf tiny throughput CPU on cpu (current)" and pilot.key_of(run, host) is None
    assert compiled.matches("ncf.tiny.throughput.fp32.x1.cpu.torch2.13.0+cpu.nocuda.bin", k)
    store = compiled.store_dir(tmp_path, "current", "cpu")
    store.mkdir(parents=True)
    (store / "ncf.tiny.throughput.fp32.x1.cpu.torch2.13.0+cpu.nocuda.bin").write_bytes(b"x")
    assert pilot.for_sweep(tmp_path, [run], {"a": host}, Settings(compile_cpu=1)).groups[k].state == "ready"
    assert pilot.for_sweep(tmp_path, [run], {"a": host}, Settings()).groups == {}


def test_a_unit_that_submits_in_batches_claims_what_may_go_and_waits_for_the_rest():
    """pilot.claim (the Slurm backend): pick's rule run by run, for units that submit several runs at once."""
    groups: dict = {}
    go, last = pilot.claim("a", [K[0], None, K[0], K[1]], groups, 0.0, 600)
    assert go == [(0, "pilot"), (1, "plain"), (2, "cold"), (3, "pilot")] and last.index is None and not last.waiting_on
    go, last = pilot.claim("b", [K[0], K[2], None], groups, 1.0, 600)  # K[0]: a pilots it; K[2]: nobody yet
    assert go == [(1, "pilot"), (2, "plain")] and last.waiting_on == ((K[0], "a"),) and last.wake == 600.0
    assert pilot.claim("b", [K[0]], groups, 2.0, 600)[0] == []  # still piloting: wait
    pilot.artifacts(groups, K[0])
    assert pilot.claim("b", [K[0]], groups, 3.0, 600)[0] == [(0, "warm")]  # the artifacts: go, warm
    assert pilot.claim("c", [K[1]], groups, 700.0, 600)[0] == [(0, "cold")]  # a's K[1] past the wait
    assert pilot.claim("d", [K[0], K[1]], {}, 0.0, 0)[0] == [(0, "plain"), (1, "plain")]  # the rule off
