"""lab.sweep planning and lab.remote quoting: plain data in, plain data out."""

import shlex
import subprocess

import pytest

from lab import remote, sweep
from lab.errors import ConfigError
from lab.inventory import Host


def host(name="h1", count=3):
    return Host(name=name, address="192.0.2.1", port=22, user="root", connection="ssh", gpu_model="V100",
                gpu_count=count, stack="current", groups=("v100",), workdir="/var/lib/gpulab", python=None,
                ssh_key=None, known_hosts="/dev/null")


def test_plan_is_hosts_x_workloads_x_gpus_x_seeds_with_stable_ids():
    runs = sweep.plan([host("a"), host("b")], ["ncf", "gnmt"], "1,3", 2)
    assert len(runs) == 2 * 2 * 2 * 2
    assert runs[0].run_id == "ncf-ttt-tiny-1gpu-s1"
    assert len({(r.host, r.run_id) for r in runs}) == len(runs)
    again = sweep.plan([host("a"), host("b")], ["ncf", "gnmt"], "1,3", 2)
    assert [r.run_id for r in again] == [r.run_id for r in runs]


def test_all_gpus_and_cpu_hosts():
    assert [r.gpus for r in sweep.plan([host(count=3)], ["ncf"], "all", 1)] == [3]
    assert [r.run_id for r in sweep.plan([host(count=0)], ["ncf"], None, 1)] == ["ncf-ttt-tiny-cpu-s1"]
    assert [r.gpus for r in sweep.plan([host(count="auto")], ["ncf"], "2", 1)] == [2]


@pytest.mark.parametrize("kwargs, message", [
    (dict(gpus="4"), "4 GPUs asked but h1 has 3"),
    (dict(gpus="0"), "'0' is not a GPU count"),
    (dict(gpus="two"), "'two' is not a GPU count"),
    (dict(workloads=["ncf; rm -rf /"]), "is not a workload name"),
    (dict(seeds=0), "--seeds"),
    (dict(mode="fast"), "--mode: 'fast'"),
    (dict(scale="huge"), "--scale: 'huge'"),
])
def test_bad_plan_values(kwargs, message):
    args = dict(hosts=[host()], workloads=["ncf"], gpus="1", seeds=1)
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sweep.plan(**args)


def test_cmd_quotes_values_so_metacharacters_stay_data(tmp_path):
    evil = f"x; touch {tmp_path}/pwned; echo $(id) `id` | cat > {tmp_path}/pwned2"
    text = remote.cmd(["printf", "%s", evil], "&&", ["echo", "done"])
    out = subprocess.run(["/bin/sh", "-c", text], capture_output=True, text=True)
    assert out.stdout == evil + "done\n"
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert shlex.split(text)[:3] == ["printf", "%s", evil]


def test_sweep_names_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="is not a sweep name"):
        sweep.run_sweep([], [], tmp_path, "../escape")
