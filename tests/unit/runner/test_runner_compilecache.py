"""Compiled artifacts a sweep reuses (runner.compilecache): the first run writes them after its first
compiled step, a run on another host (another, empty Inductor cache) loads them and compiles nothing."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from runner import compilecache  # noqa: E402
from runner_helpers import ROOT, cpu_context, env  # noqa: E402

pytestmark = pytest.mark.skipif(not compilecache.supported(), reason="this torch has no save/load_cache_artifacts")

# one process of a run: load the artifacts file when present, compile a small training step, mark the
# first step (which saves the artifacts of rank 0), report the compile caches' counters
_RUN = """
import json, sys, types, torch
from pathlib import Path
from torch._dynamo.utils import counters
from runner import compilecache, phases
from runner.workloads import base
art = Path(sys.argv[1])
loaded = compilecache.load(art)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
step = base.compile_fn(types.SimpleNamespace(compile=True, cfg={}), net)
step(torch.randn(4, 8)).square().sum().backward()
ctx = types.SimpleNamespace(first_step_time=None, artifacts=art, is_main=True, sync=lambda: None)
base.Context.mark_step(ctx)
print(json.dumps({"loaded": loaded, "inductor": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"]),
                  "grad": net[0].weight.grad.abs().sum().item(), "summary": compilecache.summary(),
                  "split": phases.compile_split()}))
"""


def _process(art, inductor_dir):
    e = {
        **env(),
        "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }
    e.pop("GPULAB_INDUCTOR", None)
    e.pop("GPULAB_COMPILE_MODE", None)
    r = subprocess.run(
        [sys.executable, "-c", _RUN, str(art)], cwd=ROOT, env=e, capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_second_host_loads_the_first_hosts_artifacts_and_compiles_nothing(tmp_path):
    art = tmp_path / "shipped" / "artifacts" / "w.bin"
    first = _process(art, tmp_path / "host-a")
    assert first["loaded"] is False and art.is_file() and art.stat().st_size > 0
    assert first["inductor"].get("fxgraph_cache_miss", 0) >= 1, first
    saved = art.read_bytes()
    second = _process(art, tmp_path / "host-b")  # another host: its own, empty Inductor cache
    assert second["loaded"] is True
    assert second["inductor"].get("fxgraph_cache_miss", 0) == 0, second
    assert second["aot"].get("autograd_cache_hit", 0) >= 1 or second["inductor"].get("fxgraph_cache_hit", 0) >= 1, (
        second
    )
    assert second["grad"] == first["grad"]
    assert "fxgraph 0 compiled" in second["summary"] and "fxgraph 0 compiled" not in first["summary"], second
    assert art.read_bytes() == saved  # kept: the first run's file is not rewritten
    # the first step's compile time, split by PyTorch's own timers (runner.phases): the first run compiles the
    # forward and the backward, the second loads them from the cache
    (text1, s1), (text2, s2) = first["split"], second["split"]
    assert s1 > 0 and text1.startswith(f"compile {s1:.1f} s (tracing ") and "forward backend" in text1, text1
    assert "backward" in text1 and "cache loads" not in text1, text1
    assert s2 > 0 and "cache loads" in text2, text2


def test_a_damaged_file_costs_a_compilation_not_the_run(tmp_path, capsys):
    art = tmp_path / "bad.bin"
    art.write_bytes(b"not artifacts")
    assert compilecache.load(art) is False
    assert "not loaded" in capsys.readouterr().err
    assert compilecache.load(tmp_path / "absent.bin") is False


def test_the_key_names_what_compiled_graphs_depend_on():
    k = dict(
        gpu="NVIDIA H200",
        torch_version="2.11.0+cu128",
        cuda="12.8",
        workload="resnet50",
        scale="full",
        mode="ttt",
        precision="bf16",
        world_size=8,
    )
    name = compilecache.key(**k)
    assert name == "resnet50.full.ttt.bf16.x8.NVIDIA_H200.torch2.11.0+cu128.cuda12.8.bin"
    for field, other in (
        ("gpu", "NVIDIA H100 80GB HBM3"),
        ("torch_version", "2.13.0"),
        ("world_size", 1),
        ("scale", "small"),
        ("precision", "fp32"),
        ("workload", "ssd"),
    ):
        assert compilecache.key(**{**k, field: other}) != name
    assert "/" not in compilecache.key(**{**k, "gpu": "a/../b"})


def _ctx(tmp_path, **spec_extra):
    return cpu_context("resnet50", mode="ttt", **{"compile": True, **spec_extra})


def test_a_run_keeps_its_artifacts_in_the_cache_folder_only_when_compiled(tmp_path):
    ctx = _ctx(tmp_path, cache_dir=str(tmp_path / "cache"))
    path = compilecache.for_context(ctx)
    assert path.parent == tmp_path / "cache" / "artifacts"
    assert path.name.startswith("resnet50.tiny.ttt.fp32.x1.cpu.torch")
    assert compilecache.for_context(_ctx(tmp_path)) is None  # no cache folder
    assert compilecache.for_context(_ctx(tmp_path, cache_dir=str(tmp_path), compile=False)) is None


def test_compile_and_no_compile_together_are_bad_input(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "run",
            "ncf",
            "--scale",
            "tiny",
            "--compile",
            "--no-compile",
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "--compile and --no-compile: choose one" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
