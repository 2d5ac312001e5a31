"""Helpers for the runner tests: run ``python -m runner`` as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault("OMP_NUM_THREADS", "2")
    # keep compiled-kernel caches of tests out of the user's home
    e.setdefault("GPULAB_CACHE_DIR", "/tmp/gpulab-test-cache")
    return e


def runner(*args, timeout=300, check=False, python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "runner", *map(str, args)],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


def script(path, *args, timeout: float = 120, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """Run one of the project's scripts (``path``: relative to the checkout, e.g. ``benchmarks/tune.py``, or
    absolute) with ``args`` as a user would: this interpreter, from the checkout, output captured;
    ``extra_env``: variables set for it over the tests' environment (``env``)."""
    return subprocess.run(
        [sys.executable, str(ROOT / path), *map(str, args)],
        cwd=ROOT,
        env=env() | (extra_env or {}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start(*args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", *map(str, args)],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def two_gloo_workers(worker: str, cwd: Path, result: str, timeout: int = 300) -> list[dict]:
    """Run tests/unit/runner/``worker`` as two ranks under torch.distributed.run (gloo on the CPU, one thread
    each) in ``cwd``; each rank writes ``result.format(rank=...)`` there: the two results, rank 0 first."""
    e = env()
    e["OMP_NUM_THREADS"] = "1"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(ROOT / "tests" / "unit" / "runner" / worker),
        ],
        cwd=cwd,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return [json.loads((cwd / result.format(rank=rank)).read_text()) for rank in (0, 1)]


def wait_for(path: Path, text: str, timeout: float = 120) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {path}")


def status(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "status.json").read_text())


def mllog_events(run_dir: Path) -> list[dict]:
    out = []
    for line in (Path(run_dir) / "mllog.log").read_text().splitlines():
        assert line.startswith(":::MLLOG "), line
        out.append(json.loads(line[len(":::MLLOG ") :]))
    return out


def assert_complete(run_dir: Path) -> None:
    """status.json exists and SHA256SUMS verifies with the real sha256sum tool and the controller's verifier."""
    from lab.results import checksums

    run_dir = Path(run_dir)
    names = {"mllog.log", "stdout.log", "telemetry.csv", "manifest.json", "status.json", "SHA256SUMS"}
    assert names <= {p.name for p in run_dir.iterdir()}, sorted(p.name for p in run_dir.iterdir())
    r = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=run_dir, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    listed = {ln.split("  ", 1)[1] for ln in (run_dir / "SHA256SUMS").read_text().splitlines()}
    outcome = json.loads((run_dir / "status.json").read_text())["outcome"]
    extra = {"health.json"} if outcome in ("failed", "aborted") else set()  # the health epilogue (runner.health)
    assert listed - {"xid.json"} == names - {"SHA256SUMS"} | extra
    assert checksums.verify(run_dir) == []


def worker_processes(spec_path: str) -> list[int]:
    """PIDs of live processes whose command line names ``spec_path``."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            st = (d / "stat").read_text()
        except OSError:
            continue
        if spec_path in cmd and ") Z " not in st:
            pids.append(int(d.name))
    return pids


def launched_spec(run_dir: Path) -> str:
    launch = json.loads((Path(run_dir) / "manifest.json").read_text())["launch"]
    return launch[launch.index("--spec") + 1]


SIGTERM, SIGINT = signal.SIGTERM, signal.SIGINT


def cpu_context(name: str, *, scale: str = "tiny", mode: str = "throughput", world_size: int = 1, **spec):
    """A workload's run context on the CPU in this process (rank 0, fp32, no MLLOG file): the spec names
    ``name``, ``scale`` and ``mode``, seed 0 and the catalogue entry, plus ``spec``'s other keys."""
    import torch

    from runner import workloads
    from runner.mllog import MLLog
    from runner.workloads.base import Context

    entry = workloads.load()[name]
    return Context(
        spec={"workload": name, "scale": scale, "mode": mode, "seed": 0, "entry": entry, **spec},
        entry=entry,
        log=MLLog(None),
        device=torch.device("cpu"),
        rank=0,
        world_size=world_size,
        local_rank=0,
        precision="fp32",
    )


def full_scale_trainer(name: str, build, world_size: int, batch: int):
    """A workload's full-scale trainer built on the CPU by ``build`` (its module's ``build``), as if
    ``world_size`` processes of ``batch`` each ran it: the global batch and what is derived from it,
    without a process group."""
    ctx = cpu_context(
        name, scale="full", world_size=world_size, compile=False, optimized=False, throughput_batch_size=batch
    )
    ctx.distributed = False  # world_size only sets the global batch here; no process group
    return build(ctx)
