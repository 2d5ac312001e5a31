"""The Slurm side of gpulab without a cluster: scontrol's records read back, task ids, drain reasons,
node names, sweep.json's slurm_job and the gpulab.slurm settings, each hostile input one clear error.
(tests/integration/test_slurm_lab.py runs all of it against the test lab's real Slurm.)"""

from __future__ import annotations

import pytest

from lab.core import config
from lab.core.errors import ConfigError, HostError
from lab.hosts import slurm
from lab.sweep import statefile
from lab.validate import nodehealth

# scontrol show job -o / show node -o of Slurm 22.05 (Debian bookworm), as the test lab's printed them
JOB = (
    "JobId=4 ArrayJobId=1 ArrayTaskId=2 ArrayTaskThrottle=2 JobName=wrap UserId=root(0) GroupId=root(0) "
    "JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=0:15 NodeList=sl-01 BatchHost=sl-01\n"
    "JobId=1 ArrayJobId=1 ArrayTaskId=3-5%2 JobState=PENDING Reason=JobArrayTaskLimit ExitCode=0:0 "
    "NodeList=(null)\n"
)
NODE = (
    "NodeName=sl-02 Arch=x86_64 CoresPerSocket=1 Gres=gpu:t4:3(S:0) NodeAddr=10.213.0.12 State=IDLE+DRAIN "
    "Partitions=gpulab Reason=gpulab: ECC uncorrected: GPU 0 3 error(s) -> reset_gpu: reset [root@2026-12-06T18:33:24]"
    "\nNodeName=sl-01 Gres=(null) State=IDLE Reason=(null)\n"
)


def test_scontrol_records_keep_free_text_values_whole():
    (node, other) = slurm.records(NODE)
    assert node["Reason"] == "gpulab: ECC uncorrected: GPU 0 3 error(s) -> reset_gpu: reset [root@2026-12-06T18:33:24]"
    assert node["State"] == "IDLE+DRAIN" and other["Reason"] == "(null)"
    assert slurm._reason_text(node["Reason"]) == (
        "gpulab: ECC uncorrected: GPU 0 3 error(s) -> reset_gpu: reset",
        "2026-12-06T18:33:24",
    )


def test_array_task_records_and_pending_ranges(monkeypatch):
    class Res:
        returncode, stdout = 0, JOB

    monkeypatch.setattr(slurm, "run", lambda args, **kw: Res())
    tasks = slurm.tasks(["1"])
    assert sorted(tasks) == [("1", 2), ("1", 3), ("1", 4), ("1", 5)]
    assert tasks[("1", 2)].state == "TIMEOUT" and tasks[("1", 2)].reason == "TimeLimit" and tasks[("1", 2)].finished
    assert not tasks[("1", 4)].finished and tasks[("1", 4)].nodes == ""
    with pytest.raises(ConfigError, match="is not a job id"):
        slurm.tasks(["1; scancel -u root"])


def test_gres_counts_gpus_of_any_type():
    node = slurm.Node("n", "IDLE", "", "gpu:t4:3(S:0),gpu:2,license:1")
    assert nodehealth.gres_gpus(node) == 5 and nodehealth.gres_gpus(None) == 0


@pytest.mark.parametrize("reason", ["ours", "admin: gpulab: later", ""])
def test_drain_refuses_a_reason_that_is_not_gpulabs(reason):
    with pytest.raises(ConfigError, match="starts 'gpulab:'"):
        slurm.drain("sl-01", reason)


def test_reason_line_is_one_line_without_quotes_and_bounded():
    line = slurm.reason_line("ECC", 'GPU 0\n "3" errors ' + "x" * 400, "reset_gpu:\treset")
    assert line.startswith("gpulab: ECC: GPU 0 '3' errors") and "\n" not in line and '"' not in line
    assert len(line) == slurm.MAX_REASON and line.endswith("...")
    assert slurm.reason_line("c", "why", None) == "gpulab: c: why"


@pytest.mark.parametrize("name", ["", "-x", "a b", "n;reboot", "x" * 65, None, 3])
def test_node_names_are_checked(name):
    with pytest.raises(ConfigError, match="is not a node name"):
        slurm.check_node(name)


def test_a_missing_slurm_command_is_one_line(monkeypatch):
    monkeypatch.setattr(slurm, "_bin", lambda name: None)
    with pytest.raises(HostError, match="sinfo is not installed here"):
        slurm.run(["sinfo"])
    assert slurm.available() is False


@pytest.mark.parametrize("value", ["1_0", "123456789012_999999"])
def test_sweep_state_slurm_job(value):
    assert statefile.RUN_FIELDS["slurm_job"](value, "runs[0].slurm_job") == value


@pytest.mark.parametrize("value", ["1", "1_", "_1", "1_0;x", "a_1", 5, ["1_0"], "1" * 13 + "_0", "١٢_٣", "1_٣"])
def test_sweep_state_slurm_job_hostile(value):
    with pytest.raises(ConfigError, match=r"runs\[0\].slurm_job: .* is not a Slurm array task"):
        statefile.RUN_FIELDS["slurm_job"](value, "runs[0].slurm_job")


def test_settings_backend_and_slurm_section():
    assert config.backend(" Slurm ") == "slurm"
    with pytest.raises(ConfigError, match="is not one of ssh, slurm, auto"):
        config.backend("kubernetes")
    got = config.slurm_settings(
        {
            "partition": "gpu",
            "qos": "",
            "constraint": "a100&ib",
            "max_running": "3",
            "time_limit_minutes": "auto",
            "poll_s": 1,
        }
    )
    assert got == {
        "partition": "gpu",
        "account": "",
        "qos": "",
        "constraint": "a100&ib",
        "max_running": 3,
        "time_limit_minutes": None,
        "poll_s": 1,
    }  # a key not given: its declared default
    for bad, match in (
        ({"partition": "gpu --wrap=x"}, "is not a Slurm name"),
        ({"max_running": 0}, "max_running"),
        ({"nodes": 2}, "no such setting"),
        ({"account": ["a"]}, "is not a Slurm name"),
    ):
        with pytest.raises(ConfigError, match=match):
            config.slurm_settings(bad)


def test_the_inventory_variable_gpulab_slurm_is_a_boolean(tmp_path):
    from lab.hosts import inventory

    base = (
        "all:\n  hosts:\n    n1:\n      ansible_host: 127.0.0.1\n      gpulab_gpu_model: cpu\n"
        "      gpulab_gpu_count: 0\n      gpulab_stack: current\n"
    )
    path = tmp_path / "hosts.yml"
    path.write_text(base + "      gpulab_slurm: true\n")
    assert inventory.load(path).select(["n1"])[0].vars["gpulab_slurm"] is True
    path.write_text(base + "      gpulab_slurm: maybe\n")
    with pytest.raises(ConfigError, match="host n1: gpulab_slurm: 'maybe' is not of type 'boolean'"):
        inventory.load(path).select(["n1"])


def test_the_health_bundle_holds_what_nodehealth_runs_and_is_reproducible(tmp_path):
    import tarfile

    from lab.hosts import runnerdist

    first = runnerdist.health_bundle(tmp_path / "a")
    again = runnerdist.health_bundle(tmp_path / "b")
    assert first.name == again.name and first.read_bytes() == again.read_bytes()
    with tarfile.open(first) as tar:
        names = tar.getnames()
        assert all(m.uid == 0 and m.mtime == 0 for m in tar.getmembers())
    for need in (
        "lab/validate/nodehealth.py",
        "lab/hosts/slurm.py",
        "lab/data/actions.yml",
        "runner/health.py",
        "inventory/references/gpus.yml",
    ):
        assert need in names, need
    assert not any("__pycache__" in n or n.startswith(("tests/", "/")) or ".." in n for n in names)


def test_sweep_state_one_slurm_task_per_run():
    """Two runs of sweep.json with one slurm_job: the Slurm unit watched one of them, the other stayed
    'running' after the sweep ended; now the file is refused in one line."""
    run = {"host": "n1", "workload": "ncf", "gpus": 0, "seed": 1, "slurm_job": "5_0"}
    doc = {"name": "S", "runs": [run, dict(run, seed=2, slurm_job="5_1"), dict(run, seed=3)]}
    with pytest.raises(ConfigError, match=r"^sweep.json: runs\[2\].slurm_job: '5_0' is runs\[0\]'s Slurm task too$"):
        statefile.conform(doc, "sweep.json")
    doc["runs"][2]["slurm_job"] = None
    assert [r["slurm_job"] for r in statefile.conform(doc, "sweep.json")["runs"]] == ["5_0", "5_1", None]
