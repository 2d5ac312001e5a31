"""resnet50 with ``--framework tensorflow``, in the TensorFlow environment that ``.ci/setup --test`` builds.

TensorFlow is an optional extra: the main environment (.venv) has none, so that
its absence is tested there (test_runner_vision.py). These tests run the
runner under ``.venv-tf/bin/python`` (or ``GPULAB_TF_PYTHON``), a second
environment with the project and tensorflow-cpu. They skip without it, except
in CI (``GPULAB_REQUIRE_LAB=1``), where a missing environment fails.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from runner_helpers import ROOT, assert_complete, env, mllog_events, runner, status

TF_PYTHON = Path(os.environ.get("GPULAB_TF_PYTHON") or ROOT / ".venv-tf" / "bin" / "python")


@pytest.fixture(scope="module")
def tf_python():
    if not TF_PYTHON.is_file():
        why = f"no TensorFlow environment at {TF_PYTHON} (made by .ci/setup --test)"
        if os.environ.get("GPULAB_REQUIRE_LAB", "") not in ("", "0"):
            pytest.fail(f"GPULAB_REQUIRE_LAB is set but {why}", pytrace=False)
        pytest.skip(why)
    return str(TF_PYTHON)


def _run(py, *args):
    return runner(*args, timeout=900, python=py)


def test_tiny_trains_to_target_and_the_log_passes_the_checker(tmp_path, tf_python):
    out = tmp_path / "run"
    r = _run(tf_python, "run", "resnet50", "--framework", "tensorflow", "--scale", "tiny", "--seed", "3", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr + (out / "stdout.log").read_text()
    assert_complete(out)
    st = status(out)
    assert st["outcome"] == "success" and st["framework"] == "tensorflow"
    res = st["result"]
    accs = [e["value"] for e in mllog_events(out) if e["key"] == "eval_accuracy"]
    assert accs and accs[-1] == res["quality"] >= res["target"] == 0.8
    assert all(a < res["target"] for a in accs[:-1])
    man = json.loads((out / "manifest.json").read_text())
    assert man["probe"]["frameworks"]["tensorflow"]
    chk = subprocess.run(
        [
            tf_python,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            "training",
            "--ruleset",
            "0.7.0",
            str(out / "mllog.log"),
        ],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert chk.returncode == 0 and "SUCCESS" in chk.stdout + chk.stderr, chk.stdout + chk.stderr


def test_tiny_throughput_mode_measures_images_per_s(tmp_path, tf_python):
    out = tmp_path / "run"
    r = _run(
        tf_python,
        "run",
        "resnet50",
        "--framework",
        "tensorflow",
        "--scale",
        "tiny",
        "--mode",
        "throughput",
        "--measure-seconds",
        "0.5",
        "--warmup-steps",
        "1",
        "--seed",
        "1",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert_complete(out)
    res = status(out)["result"]
    assert res["sample_unit"] == "images" and res["samples_per_s"] > 0 and res["steps"] >= 4


def test_two_processes_are_refused_with_one_line(tmp_path, tf_python):
    r = _run(
        tf_python,
        "run",
        "resnet50",
        "--framework",
        "tensorflow",
        "--scale",
        "tiny",
        "--cpu-procs",
        "2",
        "--out",
        tmp_path / "run",
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "run").exists()
