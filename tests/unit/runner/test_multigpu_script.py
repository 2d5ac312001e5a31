"""benchmarks/multigpu.py on the CPU: the refusal, bad input, and its scaling and ttt parts with gloo processes."""

import importlib.util
import json
import os
import subprocess

import pytest

import runner_helpers
from runner_helpers import ROOT
from tests.testlab.util import exec_done

SCRIPT = ROOT / "benchmarks" / "multigpu.py"


def script(*args, timeout=900, extra_env=None):
    return runner_helpers.script(SCRIPT, *args, timeout=timeout, extra_env=extra_env)


def module():
    spec = importlib.util.spec_from_file_location("multigpu_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fewer_than_two_gpus_is_refused_in_one_line_and_nothing_runs(tmp_path):
    from runner import launch

    seen = launch.host_gpu_count()
    if seen >= 2:
        pytest.skip(f"this machine has {seen} GPUs: the script would run")
    out = tmp_path / "mg"
    r = script("--out", out, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"multigpu.py: needs a machine with 2 or more GPUs; NVML sees {seen} here (nothing run)\n"
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--parts", "scaling,bench"], "--parts: unknown bench"),
        (["--workloads", "bert"], "--workloads: unknown bert"),
        (["--gpus", "1"], "--gpus 1: the multi-GPU runs need at least 2"),
        (["--gpus", "two"], "argument --gpus: invalid int value: 'two'"),
        (["--deadline", "-5"], "--deadline -5: must be positive"),
        (["--device", "cpu", "--parts", "ttt,validate"], "--device cpu: only the parts scaling and ttt"),
        (["--inductor", "coordinate_descent_tuning"], "--inductor 'coordinate_descent_tuning': expected KEY=VALUE"),
        (["--wheels", "/nonexistent/wheels"], "--wheels '/nonexistent/wheels': no such folder"),
        ([], "the following arguments are required: --out"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, argv, says):
    out = tmp_path / "mg"
    r = script(*(["--out", out] if argv else []), *argv, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not out.exists()


def test_an_occupied_out_folder_is_refused(tmp_path):
    (tmp_path / "keep").write_text("x")
    r = script("--out", tmp_path, "--device", "cpu", timeout=120)
    assert r.returncode == 2 and "exists and is not an empty folder" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]


def test_nvlink_multicast_stays_off_for_every_child_whatever_the_caller_set(monkeypatch):
    mod = module()
    for k in mod.NO_MULTICAST:
        monkeypatch.setenv(k, "1" if k == "NCCL_NVLS_ENABLE" else "0")
    e = mod.child_env({"GPULAB_RUN_TOKEN": "t"})
    assert {k: e[k] for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")} == {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
    assert e["GPULAB_RUN_TOKEN"] == "t" and e["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


def test_tagged_processes_are_found_until_they_end():
    mod = module()
    p = subprocess.Popen(["sleep", "30"], env=dict(os.environ, GPULAB_RUN_TOKEN="mg-test-tag"))
    try:
        exec_done(p)  # Popen returns before /proc shows its environment
        assert mod.tagged_pids("mg-test-tag") == [p.pid]
        assert mod.tagged_pids("mg-test-ta") == []  # the whole value, not a prefix
    finally:
        p.kill()
        p.wait()
    assert mod.tagged_pids("mg-test-tag") == []


@pytest.mark.slow
def test_cpu_scaling_and_ttt_with_two_gloo_processes(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "mg"
    r = script(
        "--out",
        out,
        "--device",
        "cpu",
        "--parts",
        "scaling,ttt",
        "--workloads",
        "ncf",
        "--measure-seconds",
        "0.5",
        "--cache-dir",
        tmp_path / "cache",
        extra_env={"NCCL_NVLS_ENABLE": "1"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "multigpu.json").read_text())
    meta = doc["_meta"]
    assert meta["device"] == "cpu" and meta["gpus"] == 2 and meta["torch"] and meta["elapsed_s"] > 0
    assert meta["env"] == {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
    (row,) = doc["scaling"]
    one, two = row["one_gpu"], row["multi_gpu"]
    assert (one["outcome"], two["outcome"], one["world_size"], two["world_size"]) == ("success", "success", 1, 2)
    assert "--cpu-procs" not in one["command"] and "--gpus 0 --cpu-procs 2" in two["command"]
    assert "--measure-seconds 0.5" in two["command"] and "--cache-dir" in two["command"]
    assert row["speedup"] == round(two["samples_per_s"] / one["samples_per_s"], 3)
    # efficiency is the measured ratio per GPU, rounded once (not the rounded speedup halved)
    assert row["efficiency"] == round(two["samples_per_s"] / one["samples_per_s"] / 2, 3)
    assert row["below_0.9_efficiency"] == (row["efficiency"] < 0.9)
    assert one["leftover_pids"] == two["leftover_pids"] == [] and two["ranks_ended"] == [0, 1]
    (ttt,) = doc["ttt"]
    assert (ttt["workload"], ttt["mode"], ttt["scale"], ttt["outcome"]) == ("ncf", "ttt", "tiny", "success")
    assert ttt["ok"] is True and ttt["leftover_pids"] == [] and ttt["ranks_ended"] == [0, 1]
    assert ttt["mllog"]["ok"] and ttt["mllog"]["run_start"] == 1 and ttt["mllog"]["not_once"] == {}
    assert "[multigpu] ttt ncf: success" in r.stdout
    # a second writer (every event twice) is caught
    run_dir = out / ttt["run_dir"]
    text = (run_dir / "mllog.log").read_text()
    (tmp_path / "twice").mkdir()
    (tmp_path / "twice" / "mllog.log").write_text(text + text)
    twice = module().mllog_check(tmp_path / "twice", ttt["epochs"])
    assert (
        not twice["ok"]
        and twice["not_once"]["run_start"] == 2
        and twice["not_once"]["epoch_start"] == 2 * ttt["epochs"]
    )


def test_speedup_and_efficiency_are_each_rounded_once_from_the_measured_ratio():
    mod = module()
    one = {"workload": "ncf", "outcome": "success", "samples_per_s": 1000.0}
    row = mod.scaling_row(one, {**one, "samples_per_s": 599.4}, 2)
    # 0.5994 per run: speedup 0.599; efficiency 0.2997 -> 0.3 (halving the rounded 0.599 would give 0.299)
    assert (row["speedup"], row["efficiency"], row["below_0.9_efficiency"]) == (0.599, 0.3, True)
    row = mod.scaling_row(one, {**one, "samples_per_s": 1900.0}, 2)
    assert (row["speedup"], row["efficiency"], row["below_0.9_efficiency"]) == (1.9, 0.95, False)
    assert "speedup" not in mod.scaling_row(one, {**one, "outcome": "failed"}, 2)


def test_without_the_controller_packages_the_sweep_is_skipped_with_one_line(tmp_path, monkeypatch, capsys):
    mod = module()
    monkeypatch.setattr(mod, "CONTROLLER", mod.CONTROLLER + ("gpulab_no_such_package",))
    args = mod.parse(["--out", str(tmp_path / "mg")])
    args.out = tmp_path / "mg"
    doc, saved = {}, []
    mod.part_sweep(args, doc, None, lambda: saved.append(1))
    assert doc["controller"] == {"missing": ["gpulab_no_such_package"]}
    assert doc["sweep"]["skipped"].startswith("controller packages not installed (missing gpulab_no_such_package)")
    assert capsys.readouterr().out.count("\n") == 1 and saved == [1]
    assert not mod.ok({"scaling": [], "ttt": [], **doc})
    assert not (tmp_path / "mg").exists()  # nothing started
