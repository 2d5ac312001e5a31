"""benchmarks/scale_matrix.py on the CPU: the real ``runner run`` of a tiny workload in both modes."""

import json

import pytest

pytest.importorskip("torch")

from runner_helpers import ROOT, script

SCRIPT = ROOT / "benchmarks" / "scale_matrix.py"


def matrix(*args, timeout=600):
    return script(SCRIPT, "--device", "cpu", *args, timeout=timeout)


def test_a_tiny_workload_trains_to_target_and_measures_throughput(tmp_path):
    out = tmp_path / "m.json"
    r = matrix("--workloads", "ncf", "--measure-seconds", "0.5", "--workdir", tmp_path / "w", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    ttt, tp = doc["runs"]
    assert (ttt["workload"], ttt["mode"], ttt["scale"]) == ("ncf", "ttt", "tiny")
    assert ttt["outcome"] == "success" and ttt["exit_code"] == 0 and ttt["epochs"] >= 1
    assert ttt["quality"] >= ttt["target"] == 0.6
    assert 0 < ttt["time_to_first_step_s"] < ttt["wall_s"] and ttt["time_to_train_s"] > 0 and ttt["samples_per_s"] > 0
    assert "runner run ncf --mode ttt --scale tiny --gpus 0" in ttt["command"] and "--cache-dir" in ttt["command"]
    assert (tp["mode"], tp["scale"], tp["outcome"], tp["sample_unit"]) == ("throughput", "tiny", "success", "samples")
    assert tp["samples_per_s"] > 0 and tp["time_to_first_step_s"] > 0
    meta = doc["_meta"]
    assert meta["device"] == "cpu" and meta["torch"] and meta["cache_was_empty"] and doc["summary"] == {"success": 2}
    assert (tmp_path / "w" / "cache").is_dir() and "[matrix] ncf ttt tiny: success" in r.stdout


def test_the_deadline_leaves_runs_unstarted_and_still_writes_the_json(tmp_path):
    out = tmp_path / "m.json"
    r = matrix(
        "--workloads",
        "ncf,gnmt",
        "--deadline",
        "1",
        "--jobs",
        "2",
        "--workdir",
        tmp_path / "w",
        "--out",
        out,
        timeout=120,
    )
    assert r.returncode == 1
    doc = json.loads(out.read_text())
    assert [(x["workload"], x["mode"], x["outcome"]) for x in doc["runs"]] == [
        ("ncf", "ttt", "not_started"),
        ("gnmt", "ttt", "not_started"),
        ("ncf", "throughput", "not_started"),
        ("gnmt", "throughput", "not_started"),
    ]
    assert doc["summary"] == {"not_started": 4} and doc["_meta"]["deadline_s"] == 1 and doc["_meta"]["jobs"] == 2


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--workloads", "bert"], "--workloads: unknown bert"),
        (["--ttt-scales", "full"], "--ttt-scales: full trains on the prepared data sets"),
        (["--throughput-scales", "huge"], "--throughput-scales: unknown huge"),
        (["--deadline", "0"], "--deadline 0.0: must be positive"),
        (["--jobs", "0"], "--jobs 0: must be at least 1"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, argv, says):
    out = tmp_path / "m.json"
    r = matrix(*argv, "--out", out, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not out.exists()
