"""Where compilation falls in a run's MLLOG (runner/README "All workloads: the timed region"): under the
MLPerf v0.5 rules it is on the clock, so a compiled run's first compilation comes after ``run_start``."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch._dynamo.callback")

from runner_helpers import ROOT, env

# a tiny compiled resnet50 ttt run on the CPU, one epoch; the first compilation records the MLLOG keys
# written so far
_RUN = """
import importlib, json, sys, time, torch
from pathlib import Path
from torch._dynamo.callback import callback_handler
from runner import workloads
from runner.mllog import MLLog
from runner.workloads import base
path = Path(sys.argv[1])
entry = workloads.load()["resnet50"]
spec = {"workload": "resnet50", "scale": "tiny", "mode": "ttt", "seed": 0, "entry": entry,
        "compile": True, "max_epochs": 1, "t_launch": time.time()}
log = MLLog(path)
seen = []
def first(*a, **k):
    if not seen:
        seen.append([json.loads(l.split(":::MLLOG ", 1)[1])["key"]
                     for l in path.read_text().splitlines() if ":::MLLOG" in l])
callback_handler.register_start_callback(first)
ctx = base.Context(spec=spec, entry=entry, log=log, device=torch.device("cpu"), rank=0, world_size=1,
                   local_rank=0, precision="fp32")
out = base.run(ctx, importlib.import_module("runner.workloads.resnet50"))
log.close()
print(json.dumps({"keys": seen[0] if seen else None, "compiled": ctx.compile}))
"""


def test_compilation_of_a_ttt_run_is_inside_the_timed_region(tmp_path):
    e = {**env(), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    e.pop("GPULAB_COMPILE_MODE", None)
    e.pop("GPULAB_INDUCTOR", None)
    log = tmp_path / "mllog.log"
    r = subprocess.run(
        [sys.executable, "-c", _RUN, str(log)], cwd=ROOT, env=e, capture_output=True, text=True, timeout=1200
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["compiled"] is True
    keys = out["keys"]
    assert keys is not None, "nothing was compiled"
    assert "init_stop" in keys and "run_start" in keys, keys
    assert keys.index("init_stop") < keys.index("run_start"), keys
    assert "run_stop" not in keys
    lines = [json.loads(x.split(":::MLLOG ", 1)[1])["key"] for x in log.read_text().splitlines() if ":::MLLOG" in x]
    assert lines[-1] == "run_stop"
