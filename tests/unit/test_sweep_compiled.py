"""Compiled artifacts shipped between the hosts of a sweep (lab.sweep.compiled), on two local hosts."""

import pytest

from lab.hosts import remote
from lab.hosts.inventory import Host
from lab.sweep import compiled


def _host(tmp_path, name, stack="current", gpu="NVIDIA H200"):
    workdir = tmp_path / name
    workdir.mkdir()
    return remote.LocalRemote(
        Host(
            name=name,
            address="127.0.0.1",
            port=22,
            user=None,
            connection="local",
            gpu_model=gpu,
            gpu_count=1,
            stack=stack,
            groups=(),
            workdir=str(workdir),
            python=None,
            ssh_key=None,
            known_hosts="/dev/null",
        )
    ), str(workdir)


def _write(workdir, name, data):
    d = compiled.REMOTE_DIR.split("/")
    path = __import__("pathlib").Path(workdir, *d, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_the_first_hosts_artifacts_reach_a_second_host_of_the_same_group(tmp_path):
    (a, wa), (b, wb) = _host(tmp_path, "a"), _host(tmp_path, "b")
    store = compiled.store_dir(tmp_path / "sweep", "current", "NVIDIA H200")
    assert compiled.push(b, wb, store) == []  # nothing compiled yet: nothing to ship
    _write(wa, "resnet50.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin", b"graphs")
    _write(wa, ".resnet50.bin.123.tmp", b"half")  # the runner's unfinished write: never shipped
    _write(wa, "notes.txt", b"x")
    assert compiled.pull(a, wa, store) == ["resnet50.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin"]
    assert compiled.pull(a, wa, store) == []  # already held
    assert compiled.push(b, wb, store) == ["resnet50.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin"]
    got = tmp_path / "b" / "cache" / "artifacts" / "resnet50.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin"
    assert got.read_bytes() == b"graphs"
    assert sorted(p.name for p in got.parent.iterdir()) == [got.name]  # no temporary file left
    assert compiled.push(b, wb, store) == []  # the host has it: not copied again


def test_a_host_keeps_its_own_file_and_groups_stay_apart(tmp_path):
    (a, wa), (b, wb) = _host(tmp_path, "a"), _host(tmp_path, "b")
    name = "ncf.full.throughput.bf16.x1.NVIDIA_H200.torch2.11.bin"
    _write(wa, name, b"from a")
    own = _write(wb, name, b"from b")
    store = compiled.store_dir(tmp_path / "sweep", "current", "NVIDIA H200")
    compiled.pull(a, wa, store)
    assert compiled.push(b, wb, store) == [] and own.read_bytes() == b"from b"
    other = compiled.store_dir(tmp_path / "sweep", "current", "NVIDIA H100 80GB HBM3")
    assert other != store and not other.exists()
    assert compiled.store_dir(tmp_path / "s", "older", "NVIDIA H200") != store
    assert compiled.store_dir(tmp_path / "s", "../x", "a/b").parent == tmp_path / "s" / compiled.STORE


@pytest.mark.parametrize("name", ["../x.bin", "a/b.bin", ".hidden.bin", "x.txt", "x.bin.tmp"])
def test_only_plain_artifact_names_travel(tmp_path, name):
    (a, wa) = _host(tmp_path, "a")
    d = tmp_path / "a" / "cache" / "artifacts"
    d.mkdir(parents=True)
    if "/" not in name:
        (d / name).write_bytes(b"x")
    assert compiled.pull(a, wa, tmp_path / "store") == []


class _Progress:
    def __init__(self):
        self.lines = []

    def status(self, unit, text):
        self.lines.append((unit, text))


def _worker(tmp_path, sweep, name, gpu="NVIDIA H200"):
    import threading

    from lab.hosts.remote import RunnerInstall
    from lab.sweep.hostrun import Settings
    from lab.sweep.node import Node
    from lab.sweep.unitworker import UnitWorker

    r, _ = _host(tmp_path, name, gpu=gpu)
    node = Node(r.host, r, RunnerInstall("python3", "", "0", False), Settings(), sweep.name)
    return UnitWorker(sweep, [node], [], Settings(), _Progress(), threading.Event())


def test_the_controller_pulls_after_a_run_and_pushes_before_the_next_host_runs(tmp_path):
    from lab.sweep.state import Sweep

    sweep = Sweep.open(tmp_path / "results" / "S", "S", [], {})
    first, second, other = (
        _worker(tmp_path, sweep, "a"),
        _worker(tmp_path, sweep, "b"),
        _worker(tmp_path, sweep, "c", gpu="NVIDIA H100 80GB HBM3"),
    )
    name = "resnet50.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin"
    _write(tmp_path / "a", name, b"graphs")
    first._share_compiled("pull")
    assert first.progress.lines == [("a", "compiled artifacts from a: 1")]
    second._share_compiled("push")
    other._share_compiled("push")
    assert (tmp_path / "b" / "cache" / "artifacts" / name).read_bytes() == b"graphs"
    assert not (tmp_path / "c" / "cache" / "artifacts").exists()  # another GPU model: not shipped
    assert (tmp_path / "results" / "S" / compiled.STORE).is_dir()


def test_a_failed_share_never_fails_the_run(tmp_path):
    from lab.sweep.state import Sweep

    sweep = Sweep.open(tmp_path / "results" / "S", "S", [], {})
    w = _worker(tmp_path, sweep, "a")
    store = compiled.store_dir(sweep.root, "current", "NVIDIA H200")
    store.mkdir(parents=True)
    (store / "x.bin").write_bytes(b"x")
    (tmp_path / "a" / "cache").write_text("a file where the cache folder belongs")
    w._share_compiled("push")  # mkdir fails on the host: the run goes on without the artifacts
    assert w.progress.lines == []


def test_a_link_planted_where_the_store_belongs_is_refused(tmp_path):
    from lab.core.errors import ConfigError

    (a, wa) = _host(tmp_path, "a")
    _write(wa, "x.bin", b"x")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (sweep / compiled.STORE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError):
        compiled.pull(a, wa, compiled.store_dir(sweep, "current", "NVIDIA H200"))
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_the_controller_reads_the_runners_artifact_names_by_compile_group():
    from runner import compilecache
    from lab.sweep.pilot import Key

    k = Key("current", "NVIDIA H200", "resnet50", "full", "ttt", 2, 2)
    name = compilecache.key(
        gpu="NVIDIA H200",
        torch_version="2.11.0+cu128",
        cuda="12.8",
        workload="resnet50",
        scale="full",
        mode="ttt",
        precision="bf16",
        world_size=4,
    )  # 2 GPUs x 2 nodes
    assert compiled.matches(name, k)
    for other in (dict(workload="ssd"), dict(scale="small"), dict(mode="throughput"), dict(world_size=2)):
        assert not compiled.matches(
            compilecache.key(
                **{
                    **dict(
                        gpu="g",
                        torch_version="2.11",
                        cuda=None,
                        workload="resnet50",
                        scale="full",
                        mode="ttt",
                        precision="bf16",
                        world_size=4,
                    ),
                    **other,
                }
            ),
            k,
        )


def test_a_pilots_artifacts_release_the_hosts_waiting_for_them(tmp_path):
    import threading

    from lab.sweep import pilot
    from lab.sweep.plan import PlannedRun
    from lab.sweep.state import Sweep

    sweep = Sweep.open(tmp_path / "results" / "S", "S", [], {})
    pilots = pilot.Pilots(wait_s=600)
    a, b = _worker(tmp_path, sweep, "a"), _worker(tmp_path, sweep, "b")
    seats = {
        w: pilot.Seat(
            pilots, w.unit, w.nodes[0].host, sweep.root, lambda w=w: w._share_compiled("pull"), w.progress.status
        )
        for w in (a, b)
    }
    ra, rb = PlannedRun("a", "resnet50", 1, 1, scale="full"), PlannedRun("b", "resnet50", 1, 1, scale="full")
    assert seats[a].next([ra], threading.Event()) == (ra, "pilot")
    got = []
    t = threading.Thread(target=lambda: got.append(seats[b].next([rb], threading.Event())))
    t.start()
    seats[a].check()  # nothing written yet: b keeps waiting
    t.join(0.5)
    assert (
        got == []
        and ("b", "waiting for compiled artifacts: resnet50 full ttt 1 GPU on NVIDIA H200 (current) from a")
        in b.progress.lines
    )
    _write(tmp_path / "a", "resnet50.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin", b"graphs")
    seats[a].check()  # the first compiled step wrote them: pulled, b goes
    t.join(5)
    assert got == [(rb, "warm")] and seats[a].piloting is None
    b._share_compiled("push")
    assert (tmp_path / "b" / "cache" / "artifacts" / "resnet50.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin").is_file()


def test_a_cpu_run_asks_the_runner_to_compile_only_when_the_sweep_says_so(tmp_path):
    from lab.sweep.hostrun import Settings
    from lab.sweep.plan import PlannedRun
    from lab.sweep.state import Sweep

    sweep = Sweep.open(tmp_path / "results" / "S", "S", [], {})
    w = _worker(tmp_path, sweep, "a")
    cpu, gpu = PlannedRun("a", "ncf", 0, 1, mode="throughput"), PlannedRun("a", "ncf", 1, 1, mode="throughput")
    assert "--compile" not in w._args(cpu, w.nodes[0], 0)
    w.settings = Settings(compile_cpu=1)
    assert "--compile" in w._args(cpu, w.nodes[0], 0) and "--compile" not in w._args(gpu, w.nodes[0], 0)


def test_slurm_units_submit_a_groups_runs_after_its_pilots_artifacts(tmp_path):
    """The Slurm backend keeps the pilot rule: b's run of the group a pilots is held back (not submitted)
    until the controller pulled a's artifacts; a pilot run that ends without any releases its group."""
    from lab.sweep import pilot
    from lab.sweep.plan import PlannedRun
    from lab.sweep.slurmworker import SlurmUnitWorker
    from lab.sweep.state import Sweep

    sweep = Sweep.open(tmp_path / "results" / "S", "S", [], {})
    pilots = pilot.Pilots(wait_s=600)

    def slurm_worker(name):
        w = _worker(tmp_path, sweep, name)
        w.progress.print = lambda line: w.progress.lines.append((name, line))
        return SlurmUnitWorker(sweep, w.nodes, [], w.settings, w.progress, w.stop, pilots)

    a, b = slurm_worker("a"), slurm_worker("b")
    ra, rb = PlannedRun("a", "resnet50", 1, 1, scale="full"), PlannedRun("b", "resnet50", 1, 1, scale="full")
    other = PlannedRun("b", "ssd", 1, 1, scale="full")
    assert (
        a._claim([ra]) == [ra]
        and ("a", "  [a] resnet50-ttt-full-1gpu-s1 (pilot: compiles it for the hosts of its GPU model and stack)")
        in a.progress.lines
    )
    assert b._claim([rb, other]) == [other]  # b pilots ssd meanwhile; resnet50 waits for a
    assert (
        "b",
        "waiting for compiled artifacts: resnet50 full ttt 1 GPU on NVIDIA H200 (current) from a",
    ) in b.progress.lines
    a._check_pilots()  # nothing written yet on a: b keeps waiting
    assert b._claim([rb]) == []
    name = "resnet50.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin"
    _write(tmp_path / "a", name, b"graphs")
    a._check_pilots()  # pulled: the group is ready, b's run may go
    assert a.piloting == {} and b._claim([rb]) == [rb]
    b._share_compiled("push")  # what _submit does right before sbatch
    assert (tmp_path / "b" / "cache" / "artifacts" / name).read_bytes() == b"graphs"

    # b's ssd pilot ends without artifacts: a's ssd run goes at once and compiles for itself
    other.state, other.reason = "failed", "run failed"
    b._check_pilots(ended=other)
    assert b.piloting == {} and a._claim([PlannedRun("a", "ssd", 1, 1, scale="full")])[0].workload == "ssd"
