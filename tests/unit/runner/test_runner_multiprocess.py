"""Every workload with two gloo processes on the CPU (``--cpu-procs 2``), as on two GPUs.

The same code path as a 2-GPU run (torchrun, DistributedDataParallel, one
process per device), with gloo instead of NCCL: each workload trains at tiny
scale to its target, rank 0 alone writes MLLOG, every rank ends through the
synchronized teardown, no process of the run outlives the runner (found by
the GPULAB_RUN_TOKEN tag the controller puts on a run's processes), and
throughput mode reports the figure of both processes together.
"""

import json
import os
import secrets
import subprocess
import sys
from collections import Counter

import pytest

from runner_helpers import ROOT, assert_complete, env, mllog_events, status

pytest.importorskip("torch")

WORKLOADS = ["ncf", "resnet50", "ssd", "maskrcnn", "gnmt", "transformer"]
SEEDS = {"ncf": 2, "resnet50": 4, "ssd": 1, "maskrcnn": 3, "gnmt": 3, "transformer": 3}
# events of the run as a whole: a second writer would log them twice
ONCE = (
    "init_start",
    "init_stop",
    "run_start",
    "run_stop",
    "seed",
    "submission_benchmark",
    "submission_platform",
    "global_batch_size",
    "train_samples",
    "eval_samples",
)


def tagged(token: str) -> list[int]:
    """Live processes whose environment carries GPULAB_RUN_TOKEN=token."""
    want = f"GPULAB_RUN_TOKEN={token}".encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                found = want in f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                zombie = ") Z " in f.read()
        except OSError:
            continue
        if found and not zombie:
            pids.append(int(d))
    return pids


def run_tagged(*args, timeout=900):
    token = f"test-{secrets.token_hex(6)}"
    e = env()
    e["GPULAB_RUN_TOKEN"] = token
    r = subprocess.run(
        [sys.executable, "-m", "runner", *map(str, args)],
        cwd=ROOT,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return r, tagged(token)


@pytest.mark.slow
@pytest.mark.parametrize("name", WORKLOADS)
def test_two_gloo_processes_train_to_target_and_measure_together(tmp_path, name):
    out = tmp_path / "ttt"
    r, left = run_tagged(
        "run", name, "--scale", "tiny", "--seed", SEEDS[name], "--gpus", "0", "--cpu-procs", "2", "--out", out
    )
    log = (out / "stdout.log").read_text() if (out / "stdout.log").exists() else ""
    assert r.returncode == 0, r.stdout + r.stderr + log[-6000:]
    assert left == [], f"processes of the run still alive after the runner exited: {left}"
    assert_complete(out)
    st = status(out)
    assert (st["outcome"], st["world_size"], st["gpus"]) == ("success", 2, [])
    res = st["result"]
    assert res["epochs"] >= 1 and res["target"] is not None
    # rank 0 alone wrote MLLOG: the run-level events once, one epoch_start and one evaluation per epoch
    ev = mllog_events(out)
    n = Counter(e["key"] for e in ev)
    assert {k: n[k] for k in ONCE} == {k: 1 for k in ONCE}, n
    assert n["epoch_start"] == n["epoch_stop"] == res["epochs"]
    assert n["eval_accuracy"] >= 1 and [e["value"] for e in ev if e["key"] == "eval_accuracy"][-1] == res["quality"]
    assert next(e for e in ev if e["key"] == "submission_platform")["value"].startswith("2x")
    if name != "ncf":  # a batch per process: the global batch is twice the catalogue's
        from runner import workloads

        gbs = next(e for e in ev if e["key"] == "global_batch_size")["value"]
        assert gbs == 2 * workloads.load()[name]["scales"]["tiny"]["batch_size"]
    # every rank went through the synchronized teardown
    for rank in (0, 1):
        assert f"[runner] rank {rank} ended: success (exit 0)" in log, log[-4000:]

    out = tmp_path / "throughput"
    r, left = run_tagged(
        "run",
        name,
        "--scale",
        "tiny",
        "--seed",
        "1",
        "--mode",
        "throughput",
        "--gpus",
        "0",
        "--cpu-procs",
        "2",
        "--measure-seconds",
        "0.5",
        "--warmup-steps",
        "1",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stdout + r.stderr + (out / "stdout.log").read_text()[-6000:]
    assert left == []
    res = status(out)["result"]
    assert res["world_size"] == 2 and res["steps"] >= 1 and res["batch_per_process"] >= 1
    # the figure of both processes: steps x batch of each x 2 over the measured time
    both = res["steps"] * res["batch_per_process"] * 2 / res["measured_s"]
    assert res["samples_per_s"] == pytest.approx(both, rel=0.01)
    tp = [e for e in mllog_events(out) if e["key"] == "throughput"]
    assert len(tp) == 1 and tp[0]["value"] == pytest.approx(res["samples_per_s"], rel=1e-3)
    assert tp[0]["metadata"]["steps"] == res["steps"]
    for rank in (0, 1):
        assert f"[runner] rank {rank} ended: success (exit 0)" in (out / "stdout.log").read_text()
    assert json.loads((out / "manifest.json").read_text())["world_size"] == 2
