"""A host's own expectations in `invoke validate`: a CPU host (the inventory expects no GPU) is validated as
one, never failed nor quarantined for having no GPU; a host that expects GPUs and has none fails. The
runner a local burn-in starts sees the Python path the controller was started with."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lab.hosts import remote as rem
from lab.hosts.inventory import Host
from lab.validate import fleet

NO_GPU_PROBE = {
    "schema": 1,
    "gpu_count": 0,
    "gpus": [],
    "nvidia": "no NVIDIA driver/GPU found: NVML Shared Library Not Found",
    "stack": {"driver": None},
    "frameworks": {},
}


def host(name="cpu-01", **over) -> dict:
    return {"name": name, "gpu_model": "auto", "gpu_count": "auto", "stack": None, **over}


@pytest.mark.parametrize(
    "inv, verdict, check",
    [
        (host(), "PASS", "GPU count"),  # inventory/local.yml: auto, auto
        (host(gpu_count=0, gpu_model="H100"), "PASS", "GPU count"),
        (host(gpu_count=2), "FAIL", "GPU present"),
        (host(gpu_model="H100"), "FAIL", "GPU present"),
    ],
)
def test_a_host_without_gpus_is_judged_by_what_its_inventory_expects(refs, inv, verdict, check):
    snap = {
        **NO_GPU_PROBE,
        "dcgm": {"installed": False, "level": 1},
        "fabricmanager": {"version": None, "service": "inactive"},
    }
    v = fleet.evaluate({"cpu-01": snap}, [inv], refs, None, level="quick")
    h = v.hosts["cpu-01"]
    assert h["verdict"] == verdict and h["checks"][0]["check"] == check
    if verdict == "PASS":
        assert [c["check"] for c in h["checks"]] == [check]  # no DCGM, no Fabric Manager to judge
        assert "validated as a CPU host" in h["checks"][0]["reason"] and v.ok
        assert "NVML Shared Library Not Found" in h["checks"][0]["reason"]  # why it has none, said
    else:
        assert h["reason"].startswith("GPU present: no NVIDIA GPU: NVML Shared Library Not Found")


def test_the_local_runner_sees_the_controllers_python_path(tmp_path, monkeypatch):
    """The burn-in on a local host starts `python -m runner` (and it `runner run resnet50`) with the
    runner's folder first and then the PYTHONPATH the controller had (issue 48: mlperf_logging was on
    the controller's path and not the runner's)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "gpulab_probe_mod.py").write_text("VALUE = 48\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    local = Host(
        name="localhost",
        address="localhost",
        port=22,
        user="root",
        connection="local",
        gpu_model="auto",
        gpu_count="auto",
        stack=None,
        groups=(),
        workdir=str(tmp_path / "work"),
        python=sys.executable,
        ssh_key=None,
        known_hosts="/dev/null",
    )
    inst = rem.ensure_runner(rem.connect(local))
    env, path = inst.argv("--version")[:2]
    assert env == "env" and path == f"PYTHONPATH={inst.pythonpath}:{site}"
    out = subprocess.run(
        ["env", path, sys.executable, "-c", "import gpulab_probe_mod; print(gpulab_probe_mod.VALUE)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0 and out.stdout.split() == ["48"]
    # an SSH host's runner gets only its own folder: the controller's path means nothing there
    remote = rem.RunnerInstall("python3", "/w/runner/abc", "v", False)
    assert remote.argv("list")[1] == "PYTHONPATH=/w/runner/abc"


def test_validate_records_into_the_default_database_on_a_fresh_checkout(refs, tmp_path):
    """results/ of a fresh checkout does not exist: the default database is made there (issue 48's H100
    run: "history: not recorded: ... folder <checkout>/results does not exist")."""
    from lab.history import memory as history
    from lab.validate.verdict import write_outputs

    v = fleet.evaluate({"cpu-01": dict(NO_GPU_PROBE)}, [host()], refs, None, level="quick")
    files = write_outputs(v, tmp_path / "elsewhere")
    results = tmp_path / "checkout" / "results"
    url = f"sqlite:///{results / 'history.sqlite'}"
    (tmp_path / "checkout").mkdir()
    lines = history.after_validate([f for f in files if f.name == "validate.json"], v.data, url, True)
    assert lines[0].startswith("history: not recorded") and not results.exists()  # an explicit URL: nothing made
    lines = history.after_validate([f for f in files if f.name == "validate.json"], v.data, url, True, make_folder=True)
    assert lines[0].startswith("history: ") and "not recorded" not in lines[0], lines
    assert (results / "history.sqlite").is_file()
