"""invoke demo honours its declared settings: gpulab.demo.nodes (README settings table: "invoke demo's hosts
per run", by default the top-level gpulab.nodes) reaches the sweep. The demo used to pass nodes=1 whatever
the setting said. Only refused demos run here (one host cannot make runs of 2 hosts): fast, nothing written."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def demo(tmp_path: Path, env: dict, user_yaml: str = ""):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if user_yaml:
        (home / ".invoke.yaml").write_text(user_yaml)
    full = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    full.update(HOME=str(home), INVOKE_GPULAB_RESULTS=str(tmp_path / "results"), **env)
    return subprocess.run(
        [sys.executable, "-m", "invoke", "demo", "--seeds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )


@pytest.mark.parametrize(
    "env, user_yaml",
    [
        ({"INVOKE_GPULAB_DEMO_NODES": "2"}, ""),  # the demo's own key
        ({}, "gpulab: {nodes: 2}\n"),  # demo.nodes not set: the top-level key gives it ("as above")
    ],
)
def test_demo_nodes_reaches_the_sweep(tmp_path, env, user_yaml):
    r = demo(tmp_path, env, user_yaml)
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-500:])
    assert "1 hosts selected (localhost), not a multiple of 2" in r.stderr, r.stderr
    assert not (tmp_path / "results").exists()  # refused before anything is written
