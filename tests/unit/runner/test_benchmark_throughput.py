"""benchmarks/throughput.py on the CPU: the smoke path of one workload (no timing assertions)."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from runner_helpers import ROOT, env


def test_smoke_run_on_cpu_writes_the_document(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--device", "cpu",
                        "--workloads", "transformer", "--measure-seconds", "0.3", "--out", str(out),
                        "--workdir", str(tmp_path / "work")],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    row = doc["transformer"]
    assert "errors" not in row, row
    assert row["speed_settings"] == {}
    assert row["unit"] == "tokens/s" and row["optimized"] > 0 and row["baseline"] > 0 and row["compiled"] > 0
    assert row["ratio"] == pytest.approx(row["optimized"] / row["baseline"], rel=1e-2)
    assert row["ratio_to_compiled"] == pytest.approx(row["optimized"] / row["compiled"], rel=1e-2)
    assert row["compiled_ratio"] == pytest.approx(row["compiled"] / row["baseline"], rel=1e-2)
    assert row["batch"] == 32 * 10  # tiny throughput: 32 sentences of 10 target tokens
    for which in ("cold", "warm"):
        assert row["time_to_first_step_s"][which] > 0
        assert row["runner_samples_per_s"][which] > 0
    assert doc["_meta"]["device"] == "cpu" and doc["_meta"]["scale"] == "tiny"
    assert doc["_meta"]["variants"] == ["optimized", "compiled", "baseline"] and doc["_meta"]["torch"]


def test_the_plain_compiled_variant_drops_the_workload_speed_settings():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import throughput

    r50 = throughput.plain_compile_overrides("resnet50", "full")
    assert r50["space_to_depth_stem"] is False and r50.get("inductor", {}) == {} and r50["compile_mode"] == "default"
    assert set(r50) <= set(throughput.PLAIN_COMPILE) and set(r50) <= set(_scale("resnet50", "full"))
    assert throughput.plain_compile_overrides("maskrcnn", "full")["compile_roi_align"] is False
    assert throughput.plain_compile_overrides("gnmt", "small") == {"compile": True}  # compiled like the others
    assert throughput.plain_compile_overrides("ncf", "full") == {}
    # what the optimized path has beyond plain torch.compile, recorded in each row
    assert throughput.speed_settings("resnet50", "full") == {"space_to_depth_stem": True, "stem_pad_channels": 16}
    assert throughput.speed_settings("maskrcnn", "full") == {"compile_roi_align": True}
    for name in ("ssd", "gnmt", "transformer", "ncf"):
        assert throughput.speed_settings(name, "full") == {}, name


def _scale(name, scale):
    from runner import workloads

    return workloads.load()[name]["scales"][scale]


def test_selection_and_the_deadline_still_write_the_document(tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--device", "cpu",
                        "--workloads", "ncf", "--variants", "compiled,baseline", "--runner-runs", "gnmt",
                        "--deadline", "1", "--out", str(out), "--workdir", str(tmp_path / "work")],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["ncf"]["errors"] == {"compiled": "not started: deadline", "baseline": "not started: deadline"}
    assert "optimized" not in doc["ncf"] and "time_to_first_step_s" not in doc["ncf"]
    assert doc["gnmt"]["errors"] == {"runner_cold": "not started: deadline", "runner_warm": "not started: deadline"}
    assert doc["_meta"]["deadline_s"] == 1 and doc["_meta"]["runner_runs"] == ["gnmt"]


@pytest.mark.parametrize("argv, says", [(["--workloads", "bert"], "--workloads: unknown bert"),
                                        (["--variants", "fast"], "--variants: unknown fast"),
                                        (["--runner-runs", "bert"], "--runner-runs: unknown bert"),
                                        (["--deadline", "-5"], "--deadline -5.0: must be positive")])
def test_bad_input_is_one_line_exit_2(tmp_path, argv, says):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--device", "cpu",
                        *argv, "--out", str(tmp_path / "x.json")],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not (tmp_path / "x.json").exists()


def test_profile_step_splits_the_step_time_into_kernel_categories(tmp_path):
    out = tmp_path / "profile.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_step.py"), "resnet50", "--device", "cpu",
                        "--steps", "2", "--profile-steps", "2", "--set", "space_to_depth_stem=false", "--out", str(out)],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["workload"] == "resnet50" and doc["variant"] == "optimized" and doc["samples_per_s"] > 0
    cats = doc["categories"]
    # a ResNet step on a CPU: convolutions (forward and both gradients) are the largest share
    assert max(cats, key=lambda c: cats[c]["ms_per_step"]) == "convolution", cats
    assert sum(v["share"] for v in cats.values()) == pytest.approx(1.0, abs=0.01)
    assert doc["kernel_ms_per_step"] == pytest.approx(sum(v["ms_per_step"] for v in cats.values()), rel=0.01)
    assert any("convolution" in k["name"] for k in doc["top_kernels"])
    assert "[profile]   convolution" in r.stdout
    assert doc["settings"]["set"] == {"space_to_depth_stem": False}


@pytest.mark.parametrize("argv, says", [(["bert"], "workload 'bert' is not registered"),
                                        (["ncf", "--batch", "0"], "--batch 0: must be at least 1"),
                                        (["ncf", "--set", "bogus=1"], "setting 'bogus': the tiny scale of ncf"),
                                        (["ncf", "--set", "nokey"], "--set: 'nokey' is not key=value")])
def test_profile_step_bad_input_is_one_line_exit_2(tmp_path, argv, says):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_step.py"), *argv, "--device", "cpu",
                        "--out", str(tmp_path / "p.json")],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not (tmp_path / "p.json").exists()
