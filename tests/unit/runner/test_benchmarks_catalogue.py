"""The benchmark scripts take their workloads and per-workload batches from the runner's catalogue.

With the toy workload's extra catalogue (toy_catalogue.yml, GPULAB_RUNNER_CATALOGUE) a seventh
workload is in every script's default list and runs through them; gradcheck.py's batch and the
order of its groups come from each entry's 'bench'.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

from runner import workloads
from runner_helpers import ROOT, env

HERE = Path(__file__).resolve().parent
TOY = HERE / "toy_catalogue.yml"
SCRIPTS = ("throughput", "gradcheck", "multigpu", "scale_matrix", "tune")


def toy_env(catalogue: Path = TOY) -> dict:
    e = env()
    e["PYTHONPATH"] = str(HERE) + os.pathsep + e["PYTHONPATH"]
    e[workloads.EXTRA_ENV] = str(catalogue)
    return e


def script(name: str, *args, catalogue: Path = TOY, timeout=600):
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *map(str, args)],
        cwd=ROOT,
        env=toy_env(catalogue),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def toy_with_bench(tmp_path: Path, bench: dict) -> Path:
    doc = yaml.safe_load(TOY.read_text())
    doc["workloads"]["toy"]["bench"] = bench
    p = tmp_path / "toy.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_no_script_keeps_its_own_list_of_workloads_or_batches():
    for name in SCRIPTS:
        text = (ROOT / "benchmarks" / f"{name}.py").read_text()
        assert '"resnet50", "ssd", "maskrcnn"' not in text and "BATCH = {" not in text, name


def test_the_default_workload_lists_are_the_catalogue_with_its_extra_entries(monkeypatch, tmp_path):
    monkeypatch.setenv(workloads.EXTRA_ENV, str(TOY))
    names = list(workloads.load())
    assert names[-1] == "toy" and len(names) == 7
    assert load_script("gradcheck").parse(["--device", "cpu"]).workloads == names
    assert load_script("scale_matrix").parse(["--device", "cpu"]).workloads == names
    assert load_script("multigpu").parse(["--out", str(tmp_path / "o"), "--device", "cpu"]).workloads == names


def test_gradcheck_takes_batches_and_group_order_from_the_entries(monkeypatch, tmp_path):
    monkeypatch.setenv(
        workloads.EXTRA_ENV,
        str(toy_with_bench(tmp_path, {"gradcheck_batch": {"cpu": 24, "cuda": 512}, "gradcheck_s": {"tiny": 99}})),
    )
    gc = load_script("gradcheck")
    groups = gc.plan(gc.parse(["--device", "cpu", "--workloads", "ncf,toy", "--scales", "tiny"]))
    assert [(g["workload"], g["batch"]) for g in groups] == [("toy", 24), ("ncf", 1024)]  # 99 s before 10 s
    cuda = gc.plan(
        gc.parse(["--device", "cuda", "--workloads", "ncf,toy", "--scales", "small", "--precisions", "fp32"])
    )
    assert {g["workload"]: g["batch"] for g in cuda} == {"toy": 512, "ncf": 65536}
    assert workloads.load(extra="")["ncf"]["bench"]["gradcheck_batch"] == {"cuda": 65536, "cpu": 1024}


def test_the_scripts_run_the_toy_workload(tmp_path):
    cat = toy_with_bench(tmp_path, {"gradcheck_batch": {"cpu": 24, "cuda": 64}})
    r = script(
        "gradcheck",
        "--device",
        "cpu",
        "--workloads",
        "toy",
        "--scales",
        "tiny",
        "--out",
        tmp_path / "gc.json",
        catalogue=cat,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (case,) = json.loads((tmp_path / "gc.json").read_text())["cases"]
    assert (case["workload"], case["batch"], case["passed"], case["compared"]) == ("toy", 24, True, 4)
    r = script(
        "scale_matrix",
        "--device",
        "cpu",
        "--workloads",
        "toy",
        "--measure-seconds",
        "0.3",
        "--workdir",
        tmp_path / "w",
        "--out",
        tmp_path / "m.json",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    ttt, tp = json.loads((tmp_path / "m.json").read_text())["runs"]
    assert (ttt["workload"], ttt["mode"], ttt["outcome"]) == ("toy", "ttt", "success")
    assert ttt["quality"] >= ttt["target"] == 0.9 and ttt["time_to_train_s"] > 0
    assert (tp["mode"], tp["outcome"], tp["sample_unit"]) == ("throughput", "success", "samples")
    r = script(
        "throughput",
        "--device",
        "cpu",
        "--workloads",
        "toy",
        "--variants",
        "baseline",
        "--runner-runs",
        "none",
        "--measure-seconds",
        "0.3",
        "--out",
        tmp_path / "t.json",
        "--workdir",
        tmp_path / "tw",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    row = json.loads((tmp_path / "t.json").read_text())["toy"]
    assert row["baseline"] > 0 and row["batch"] == 64 and row["unit"] == "samples/s"


@pytest.mark.parametrize(
    "name, argv",
    [
        ("throughput", ["--device", "cpu", "--out", "OUT"]),
        ("gradcheck", ["--device", "cpu", "--out", "OUT"]),
        ("multigpu", ["--device", "cpu", "--out", "OUT"]),
        ("scale_matrix", ["--device", "cpu", "--out", "OUT"]),
    ],
)
def test_a_catalogue_that_does_not_check_stops_each_script_in_one_line(tmp_path, name, argv):
    bad = toy_with_bench(tmp_path, {"gradcheck_batch": {"cpu": 0}})
    out = tmp_path / "out"
    r = script(name, *[out if a == "OUT" else a for a in argv], catalogue=bad, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().endswith(
        "toy.yml: workloads.toy: 'bench.gradcheck_batch.cpu' must be an integer >= 1 (not 0)"
    ), r.stderr
    assert r.stderr.count("\n") == 1 and not out.exists()


def test_tune_knows_the_workloads_of_the_catalogue(tmp_path):
    r = script("tune", "--device", "cpu", "--variant", "toy", "--variant", "toys", "--out", tmp_path / "t.json")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and not (tmp_path / "t.json").exists()
    assert "tune.py: --variant: unknown workload 'toys' (known: ncf, " in r.stderr and ", toy)" in r.stderr
