"""Compiled artifacts a sweep reuses across hosts (``torch.compiler.save_cache_artifacts`` /
``load_cache_artifacts``, where the running PyTorch offers them).

Inductor's own caches (FX graph, AOTAutograd, autotuning, Triton kernels) live in the run's
``--cache-dir`` (``runner.launch.child_env``): one folder per host that the runs of a sweep share.
On top of that, rank 0 of a compiled run writes the artifacts its first compiled step produced to
``<cache-dir>/artifacts/<key>.bin`` (once: an existing file is kept), and every run loads that
file, when present, before it compiles. The key names what the compiled graphs depend on: the GPU
model, the PyTorch build, the workload, its scale and mode (which fix the batch), the precision and
the number of processes; the lab's controller copies these files from the first host to the
others of the same GPU model and stack, so that a sweep compiles once.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

from runner import rundir

ARTIFACTS = "artifacts"


def supported(torch_module=None) -> bool:
    """Whether the running PyTorch can save and load compiled artifacts."""
    if torch_module is None:
        import torch as torch_module
    compiler = getattr(torch_module, "compiler", None)
    return all(callable(getattr(compiler, n, None)) for n in ("save_cache_artifacts", "load_cache_artifacts"))


def _part(text) -> str:
    return re.sub(r"[^A-Za-z0-9.+_-]+", "_", str(text)).strip("_") or "none"


def key(
    *,
    gpu: str | None,
    torch_version: str,
    cuda: str | None,
    workload: str,
    scale: str,
    mode: str,
    precision: str,
    world_size: int,
) -> str:
    """The file name of a run's artifacts: one per compiled configuration."""
    parts = [
        workload,
        scale,
        mode,
        precision,
        f"x{int(world_size)}",
        gpu or "cpu",
        f"torch{torch_version}",
        f"cuda{cuda}" if cuda else "nocuda",
    ]
    return ".".join(_part(p) for p in parts) + ".bin"


def path_for(cache_dir: str | Path, name: str) -> Path:
    return Path(cache_dir) / ARTIFACTS / name


def load(path: Path) -> bool:
    """Load ``path`` into this process's compile caches; False (with a note) when absent or unreadable."""
    if not supported() or not path.is_file():
        return False
    import torch

    quiet = logging.getLogger("torch.compiler._cache")  # it logs a damaged file with a traceback
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        info = torch.compiler.load_cache_artifacts(path.read_bytes())
        why = "" if info is not None else "damaged, or written by another PyTorch"
    except Exception as exc:  # a damaged or foreign file costs a compilation, never the run
        why = f"{type(exc).__name__}: {exc}"
    finally:
        quiet.setLevel(level)
    if why:
        print(f"note: compiled artifacts {path} not loaded: {why}", file=sys.stderr, flush=True)
        return False
    print(f"[runner] loaded compiled artifacts {path.name}", flush=True)
    return True


def save(path: Path) -> bool:
    """Write this process's compiled artifacts to ``path`` unless it exists; True when written."""
    if not supported() or path.exists():
        return False
    import torch

    try:
        got = torch.compiler.save_cache_artifacts()
        if not got or not got[0]:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        rundir.write_new(path, got[0])  # whole or absent: a concurrent run sees no half-written file
    except (OSError, RuntimeError) as exc:
        print(f"note: compiled artifacts not saved to {path}: {exc}", file=sys.stderr, flush=True)
        return False
    print(f"[runner] saved compiled artifacts {path.name} ({len(got[0])} bytes)", flush=True)
    return True


def for_context(ctx) -> Path | None:
    """The artifacts file of a run (``runner.workloads.base.Context``), or None when it keeps none: no
    cache folder in its spec, not compiled, or a PyTorch without the API."""
    cache = ctx.spec.get("cache_dir")
    if not cache or not ctx.compile or not supported():
        return None
    import torch

    gpu = torch.cuda.get_device_name(ctx.device) if ctx.cuda else None
    return path_for(
        cache,
        key(
            gpu=gpu,
            torch_version=torch.__version__,
            cuda=torch.version.cuda,
            workload=ctx.spec["workload"],
            scale=ctx.scale,
            mode=ctx.mode,
            precision=ctx.precision,
            world_size=ctx.world_size,
        ),
    )


def summary() -> str:
    """One line for stdout.log: how many graphs this process compiled and how many came from the caches
    (Inductor's FX graph cache and the AOTAutograd cache; a run that loaded another host's artifacts
    compiles none)."""
    from torch._dynamo.utils import counters

    ind, aot = counters["inductor"], counters["aot_autograd"]
    return (
        f"[runner] compile caches: fxgraph {ind.get('fxgraph_cache_miss', 0)} compiled, "
        f"{ind.get('fxgraph_cache_hit', 0)} from the cache; aot_autograd {aot.get('autograd_cache_miss', 0)} "
        f"compiled, {aot.get('autograd_cache_hit', 0)} from the cache"
    )
