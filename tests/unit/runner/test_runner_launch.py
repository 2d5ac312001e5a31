"""GPU selection and launch commands (no framework, no GPU needed)."""

import pytest

from runner import launch


@pytest.mark.parametrize(
    "spec, host, want",
    [
        ("all", 4, [0, 1, 2, 3]),
        ("all", 0, []),  # a CPU host: all means no GPU
        ("0", 0, []),  # a count of 0 is a CPU run
        ("2", 4, [0, 1]),  # a bare number is a count
        ("4", 4, [0, 1, 2, 3]),
        ("0,2", 4, [0, 2]),  # indices as the host numbers them
        ("3,", 4, [3]),  # a single index takes a trailing comma
        ("2,0", 4, [2, 0]),
    ],
)
def test_parse_gpus_accepts(spec, host, want):
    assert launch.parse_gpus(spec, host) == want


@pytest.mark.parametrize(
    "spec, host, words",
    [
        ("1", 0, "asks for 1 GPUs but this host has no GPUs"),
        ("5", 4, "asks for 5 GPUs but this host has only 4 GPUs"),
        ("0,", 0, "GPU 0 does not exist (this host has no GPUs)"),
        ("0,4", 4, "GPU 4 does not exist (this host has GPUs 0..3)"),
        ("1,1", 4, "GPU 1 is listed twice"),
        ("a", 4, "expected 'all', a count"),
        ("-1", 4, "expected 'all', a count"),
        ("1,,2", 4, "expected 'all', a count"),
        ("", 4, "expected 'all', a count"),
    ],
)
def test_parse_gpus_rejects_with_one_line(spec, host, words):
    with pytest.raises(launch.LaunchError) as exc:
        launch.parse_gpus(spec, host)
    msg = str(exc.value)
    assert words in msg and "\n" not in msg and "--gpus" in msg


@pytest.mark.parametrize(
    "value, ok",
    [
        ("node1:29500", True),
        ("10.0.0.2:1", True),
        ("[fe80::1]:29400", True),
        ("node1", False),
        ("node1:0", False),
        ("node1:70000", False),
        ("a b:1", False),
    ],
)
def test_parse_endpoint(value, ok):
    if ok:
        assert launch.parse_endpoint(value)[1] > 0
    else:
        with pytest.raises(launch.LaunchError):
            launch.parse_endpoint(value)


def test_one_process_runs_the_worker_directly(tmp_path):
    cmd = launch.worker_command("/usr/bin/python3", tmp_path / "s.json", nprocs=1)
    assert cmd == ["/usr/bin/python3", "-m", "runner.worker", "--spec", str(tmp_path / "s.json")]


def test_several_processes_go_through_torchrun(tmp_path):
    cmd = launch.worker_command("py", tmp_path / "s.json", nprocs=4)
    assert cmd[:3] == ["py", "-m", "torch.distributed.run"]
    assert "--nproc-per-node=4" in cmd and "--standalone" in cmd
    assert cmd[-4:] == ["-m", "runner.worker", "--spec", str(tmp_path / "s.json")]


def test_multi_host_uses_the_rendezvous(tmp_path):
    cmd = launch.worker_command(
        "py", tmp_path / "s.json", nprocs=2, nnodes=3, node_rank=1, rdzv="head:29400", run_id="x"
    )
    assert "--standalone" not in cmd
    for part in (
        "--nnodes=3",
        "--node-rank=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=head:29400",
        "--rdzv-id=x",
        "--nproc-per-node=2",
    ):
        assert part in cmd


def test_child_env_selects_gpus_in_bus_order(tmp_path):
    env = launch.child_env([2, 0], cache_dir=tmp_path, nprocs=2, base={})
    assert env["CUDA_VISIBLE_DEVICES"] == "2,0"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    cpu = launch.child_env([], cache_dir=None, nprocs=1, base={})
    assert cpu["CUDA_VISIBLE_DEVICES"] == ""  # hides every GPU: a CPU run


def test_cpu_ranks_split_the_thread_budget_instead_of_each_taking_it():
    import os

    assert launch.child_env([], cache_dir=None, nprocs=2, base={"OMP_NUM_THREADS": "2"})["OMP_NUM_THREADS"] == "1"
    assert launch.child_env([], cache_dir=None, nprocs=4, base={"OMP_NUM_THREADS": "16"})["OMP_NUM_THREADS"] == "4"
    assert launch.child_env([], cache_dir=None, nprocs=3, base={"OMP_NUM_THREADS": "2"})["OMP_NUM_THREADS"] == "1"
    cores = len(os.sched_getaffinity(0))
    for base in ({}, {"OMP_NUM_THREADS": "many"}, {"OMP_NUM_THREADS": "0"}):
        assert launch.child_env([], cache_dir=None, nprocs=2, base=base)["OMP_NUM_THREADS"] == str(max(1, cores // 2))
    # one process, or GPU ranks: the caller's setting stands
    assert launch.child_env([], cache_dir=None, nprocs=1, base={"OMP_NUM_THREADS": "2"})["OMP_NUM_THREADS"] == "2"
    assert "OMP_NUM_THREADS" not in launch.child_env([0, 1], cache_dir=None, nprocs=2, base={})
