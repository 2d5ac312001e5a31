"""The vision workloads (resnet50, ssd, maskrcnn) through ``python -m runner run``.

Each trains at tiny scale on CPU to its tiny target, leaves a complete run
directory and an MLLOG file that passes the MLPerf 0.7.0 compliance checker
(whose rules include a quality floor: the tiny targets sit above it).
"""

import json
import subprocess
import sys

import pytest

from runner_helpers import ROOT, assert_complete, env, mllog_events, runner, status

VISION = ["resnet50", "ssd", "maskrcnn"]


def compliance(mllog, cwd):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            "training",
            "--ruleset",
            "0.7.0",
            str(mllog),
        ],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
    )
    return r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The run directory of one tiny run to target of a workload, trained once for the module (each tiny run
    to target costs tens of seconds of CPU; the tests below read the same run without changing it)."""
    runs = {}

    def get(name):
        if name not in runs:
            out = tmp_path_factory.mktemp(f"tiny-{name}") / "run"
            r = runner("run", name, "--scale", "tiny", "--seed", "5", "--out", out, timeout=900)
            log = out / "stdout.log"
            assert r.returncode == 0, r.stdout + r.stderr + (log.read_text() if log.exists() else "")
            runs[name] = out
        return runs[name]

    return get


@pytest.mark.parametrize("name", VISION)
def test_tiny_trains_to_target_and_the_log_passes_the_checker(tmp_path, name, tiny_run):
    out = tiny_run(name)
    assert_complete(out)
    st = status(out)
    assert st["outcome"] == "success" and st["precision"] == "fp32"
    res = st["result"]
    target = res["target"]
    accs = [e["value"] for e in mllog_events(out) if e["key"] == "eval_accuracy"]
    assert accs[-1] == res["quality"]
    if isinstance(target, dict):  # maskrcnn: box and mask AP
        assert set(target) == {"BBOX", "SEGM"}
        assert all(res["quality"][k] >= t for k, t in target.items())
        assert all(any(a[k] < t for k, t in target.items()) for a in accs[:-1])
    else:
        assert res["quality"] >= target and all(a < target for a in accs[:-1])
    rc, text = compliance(out / "mllog.log", tmp_path)
    assert rc == 0 and "SUCCESS" in text, text
    keys = {e["key"] for e in mllog_events(out)}
    assert {"global_batch_size", "opt_base_learning_rate", "train_samples", "eval_samples"} <= keys


def test_the_closed_rules_reject_a_vision_log_that_misses_a_required_key(tmp_path, tiny_run):
    # A tiny run claims the open division, whose rules check no recipe keys. The closed rules (what a
    # full-scale ttt run claims) check resnet50's SGD keys: the tiny log relabelled closed passes them,
    # and the same log without the SGD end learning rate fails them: the check is real.
    out = tiny_run("resnet50")  # the run of the test above, read only
    lines = (out / "mllog.log").read_text().splitlines()
    division = [ln for ln in lines if '"submission_division"' in ln]
    assert len(division) == 1 and '"value": "open"' in division[0]
    closed = [ln.replace('"value": "open"', '"value": "closed"') if ln in division else ln for ln in lines]
    good = tmp_path / "closed.log"
    good.write_text("\n".join(closed) + "\n")
    rc, text = compliance(good, tmp_path)
    assert rc == 0 and "closed_resnet_sgd.yaml" in text and "SUCCESS" in text.splitlines()[-1], text
    bad = tmp_path / "bad.log"
    bad.write_text("\n".join(ln for ln in closed if '"sgd_opt_end_learning_rate"' not in ln) + "\n")
    rc, text = compliance(bad, tmp_path)
    assert "sgd_opt_end_learning_rate" in text and "SUCCESS" not in text.splitlines()[-1], text


@pytest.mark.parametrize("name", VISION)
def test_tiny_throughput_mode_measures_images_per_s(tmp_path, name):
    out = tmp_path / "run"
    r = runner(
        "run",
        name,
        "--scale",
        "tiny",
        "--seed",
        "1",
        "--mode",
        "throughput",
        "--measure-seconds",
        "0.5",
        "--warmup-steps",
        "1",
        "--out",
        out,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert_complete(out)
    res = status(out)["result"]
    assert res["sample_unit"] == "images" and res["samples_per_s"] > 0 and res["steps"] >= 4
    tp = [e for e in mllog_events(out) if e["key"] == "throughput"]
    assert len(tp) == 1 and tp[0]["metadata"]["unit"] == "images/s"


def test_tensorflow_absent_is_one_line_exit_2(tmp_path):
    import importlib.util

    if importlib.util.find_spec("tensorflow") is not None:
        pytest.skip("TensorFlow is installed here")
    out = tmp_path / "run"
    r = runner("run", "resnet50", "--framework", "tensorflow", "--scale", "tiny", "--out", out)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "TensorFlow is not installed" in r.stderr, r.stderr
    assert not out.exists() and r.stdout == ""


def test_tensorflow_is_not_offered_for_detection(tmp_path):
    r = runner("run", "ssd", "--framework", "tensorflow", "--out", tmp_path / "run")
    assert r.returncode == 2 and "has no tensorflow implementation" in r.stderr


def test_full_scale_without_its_data_fails_naming_what_is_missing(tmp_path):
    # (ssd and maskrcnn first need their backbone weights: test_runner_artifacts.py)
    data = tmp_path / "data"
    (data / "imagenet").mkdir(parents=True)
    out = tmp_path / "run"
    r = runner("run", "resnet50", "--scale", "full", "--data", data, "--seed", "1", "--out", out, timeout=600)
    assert r.returncode == 1
    assert_complete(out)
    st = status(out)
    assert st["outcome"] == "failed"
    assert "imagenet" in st["reason"], st["reason"]


@pytest.mark.parametrize("name", VISION)
def test_bench_step_builds_the_optimized_and_the_baseline_step(name):
    pytest.importorskip("torch")
    from runner.workloads import base

    for optimized in (True, False):
        step, n = base.bench_step(name, "cpu", optimized, scale="tiny", precision="bf16", batch_size=2)
        assert n == 2
        step()  # one real training step on synthetic data (errors fail the test)
        step()


def test_list_names_the_vision_workloads():
    js = json.loads(runner("list", "--json").stdout)
    got = {w["name"]: w for w in js}
    assert got["resnet50"]["targets"]["full"] == 0.749 and got["resnet50"]["frameworks"] == ["pytorch", "tensorflow"]
    assert got["ssd"]["targets"]["full"] == 0.212
    assert got["maskrcnn"]["targets"]["full"] == {"BBOX": 0.377, "SEGM": 0.339}
    assert all(got[n]["compliance_checked"] for n in VISION)
    assert (ROOT / "runner" / "workloads" / "resnet50_tf.py").is_file()
