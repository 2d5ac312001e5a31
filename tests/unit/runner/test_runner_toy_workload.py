"""A seventh workload takes one new module and one catalogue entry.

toy_workload.py (beside this file) is the module, toy_catalogue.yml its entry, joined to the
built-in catalogue through GPULAB_RUNNER_CATALOGUE; ``python -m runner`` lists it and runs it tiny
with the shared driver: MLPerf logging, time to train, throughput mode, a complete run directory.
The MLPerf compliance checker knows only MLPerf's benchmarks (its rules for an open-division log
load ``open_<benchmark>.yaml``), so the toy's log is checked here event by event instead.
"""

import copy
import os
from pathlib import Path

import pytest
import yaml

from runner import workloads
from runner_helpers import ROOT, assert_complete, mllog_events, status

HERE = Path(__file__).resolve().parent
CATALOGUE = HERE / "toy_catalogue.yml"


def toy_env() -> dict:
    from runner_helpers import env

    e = env()
    e["PYTHONPATH"] = str(HERE) + os.pathsep + e["PYTHONPATH"]
    e[workloads.EXTRA_ENV] = str(CATALOGUE)
    return e


def runner(*args, timeout=300):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "runner", *map(str, args)],
        cwd=ROOT,
        env=toy_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_toy_is_listed_beside_the_six():
    r = runner("list")
    assert r.returncode == 0, r.stderr
    names = [ln.split()[0] for ln in r.stdout.splitlines()[1:]]
    assert names == [*workloads.load(extra=""), "toy"]


def test_a_tiny_toy_run_trains_to_its_target_through_the_shared_driver(tmp_path):
    out = tmp_path / "run"
    r = runner("run", "toy", "--scale", "tiny", "--seed", "1", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr + (out / "stdout.log").read_text()
    assert_complete(out)
    st = status(out)
    assert (st["workload"], st["benchmark"], st["outcome"]) == ("toy", "toy", "success")
    res = st["result"]
    assert res["quality"] >= res["target"] == 0.9 and res["time_to_train_s"] > 0
    ev = mllog_events(out)
    keys = [e["key"] for e in ev]
    for first, then in [("init_start", "init_stop"), ("init_stop", "run_start"), ("run_start", "run_stop")]:
        assert keys.index(first) < keys.index(then)
    stop = [e for e in ev if e["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "success"
    # time to train is the MLLOG span from run_start to run_stop (ms), as status.json says it (s)
    span = (stop[0]["time_ms"] - next(e for e in ev if e["key"] == "run_start")["time_ms"]) / 1000
    assert abs(span - res["time_to_train_s"]) < 0.5
    accs = [e["value"] for e in ev if e["key"] == "eval_accuracy"]
    assert accs[-1] == res["quality"] and all(a < 0.9 for a in accs[:-1]) and len(accs) == res["epochs"]
    hp = {e["key"]: e["value"] for e in ev}
    assert hp["submission_benchmark"] == "toy" and hp["global_batch_size"] == 64 and hp["model_hidden"] == 16
    assert hp["train_samples"] == 2048 and hp["eval_samples"] == 512


def test_two_processes_and_throughput_mode_run_the_toy_too(tmp_path):
    out = tmp_path / "ddp"
    r = runner("run", "toy", "--scale", "tiny", "--seed", "1", "--cpu-procs", "2", "--out", out, timeout=600)
    assert r.returncode in (0, 1), r.stdout + r.stderr + (out / "stdout.log").read_text()
    assert_complete(out)
    st = status(out)
    assert st["world_size"] == 2 and st["outcome"] in ("success", "target_missed")
    gbs = next(e["value"] for e in mllog_events(out) if e["key"] == "global_batch_size")
    assert gbs == 2 * 64
    out = tmp_path / "tp"
    r = runner("run", "toy", "--scale", "tiny", "--mode", "throughput", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr + (out / "stdout.log").read_text()
    assert_complete(out)
    res = status(out)["result"]
    assert res["samples_per_s"] > 0


def _extra(tmp_path, mutate) -> Path:
    doc = yaml.safe_load(CATALOGUE.read_text())
    mutate(doc)
    p = tmp_path / "extra.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize(
    "mutate, words",
    [
        (
            lambda d: d["workloads"]["toy"]["scales"]["tiny"].update(hiden=16),
            "extra.yml: workloads.toy.scales.tiny: unknown setting 'hiden'",
        ),
        (
            lambda d: d["workloads"]["toy"]["scales"]["small"].update(momentum=1.5),
            "extra.yml: workloads.toy.scales.small: 'momentum' must be a number in 0..1 (not 1.5)",
        ),
        (
            lambda d: d["workloads"].update(ncf=copy.deepcopy(d["workloads"]["toy"])),
            "extra.yml (GPULAB_RUNNER_CATALOGUE): workloads.ncf: that name is a workload of workloads.yml already",
        ),
        (
            lambda d: d["workloads"]["toy"].update(module="toy workload"),
            "extra.yml: workloads.toy: 'module' must be a module's import path",
        ),
        (lambda d: d.update(schema=2), "extra.yml: top level: 'schema: 1' expected"),
    ],
)
def test_the_extra_catalogue_is_checked_as_strictly_as_the_built_in_one(tmp_path, mutate, words):
    with pytest.raises(workloads.CatalogueError) as exc:
        workloads.load(extra=str(_extra(tmp_path, mutate)))
    assert str(exc.value).startswith(words) and "\n" not in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p,  # missing
        lambda p: (p.mkdir(), p)[1],  # a folder
        lambda p: (p.write_bytes(b"x" * (2 << 20)), p)[1],  # over 1 MiB
        lambda p: (p.write_bytes(b"\xff\xfe: ["), p)[1],  # not UTF-8 YAML
        lambda p: (p.write_text("schema: !!int abc\n"), p)[1],  # a tag's constructor refuses the value
        lambda p: (p.write_text("when: !!timestamp soon\n"), p)[1],
        lambda p: (p.write_text("n: " + "9" * 5000 + "\n"), p)[1],  # past Python's digits limit for int()
        lambda p: (p.write_text("[" * 5000 + "]" * 5000 + "\n"), p)[1],  # nesting past the recursion limit
    ],
)
def test_an_unreadable_extra_catalogue_is_one_line_and_exit_2(tmp_path, make):
    import subprocess
    import sys

    p = make(tmp_path / "extra.yml")
    e = toy_env()
    e[workloads.EXTRA_ENV] = str(p)
    r = subprocess.run(
        [sys.executable, "-m", "runner", "list"], cwd=ROOT, env=e, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "extra.yml: cannot be read" in r.stderr and "Traceback" not in r.stderr
