"""benchmarks/throughput.py on the CPU: the smoke path of one workload (no timing assertions)."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from runner_helpers import ROOT, env  # noqa: E402


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
    assert row["unit"] == "tokens/s" and row["optimized"] > 0 and row["baseline"] > 0
    assert row["ratio"] == pytest.approx(row["optimized"] / row["baseline"], rel=1e-2)
    assert row["batch"] == 32 * 10  # tiny throughput: 32 sentences of 10 target tokens
    for which in ("cold", "warm"):
        assert row["time_to_first_step_s"][which] > 0
        assert row["runner_samples_per_s"][which] > 0
    assert doc["_meta"]["device"] == "cpu" and doc["_meta"]["scale"] == "tiny"


def test_unknown_workload_is_one_line_exit_2(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--device", "cpu",
                        "--workloads", "bert", "--out", str(tmp_path / "x.json")],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown bert" in r.stderr, r.stderr
    assert not (tmp_path / "x.json").exists()
