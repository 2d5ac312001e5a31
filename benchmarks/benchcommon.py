"""Small pieces that several benchmark scripts share (imported with benchmarks/ on sys.path)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def default_device() -> str:
    """cuda when torch is there and sees a GPU, else cpu."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def torch_meta(device: str) -> dict:
    """The torch version, and the GPU's name when ``device`` is cuda and one is there; {} without torch."""
    out = {}
    try:
        import torch

        out["torch"] = torch.__version__
        if device == "cuda" and torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return out


def catalogue(error: type[Exception] = ValueError) -> dict:
    """The runner's workload catalogue (runner/workloads/workloads.yml, with the extra file that
    GPULAB_RUNNER_CATALOGUE names), checked: where the benchmarks take their workload list and their
    per-workload settings. ``error`` (one line) when it does not check."""
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)  # this checkout's runner
    from runner import workloads

    try:
        return workloads.load()
    except workloads.CatalogueError as exc:
        raise error(str(exc)) from None


def workload_names(error: type[Exception] = ValueError) -> tuple[str, ...]:
    """Every workload of the catalogue, in its order."""
    return tuple(catalogue(error))


def name_list(text: str, known: tuple, what: str, error: type[Exception] = ValueError) -> list[str]:
    """The comma-separated names of ``text``; ``error`` (one line) when empty or when one is not in ``known``."""
    items = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in items if w not in known]
    if bad or not items:
        raise error(f"{what}: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(known)})")
    return items


def recorded_platform(runs_dir: Path, stack_keys: tuple[str, ...]) -> dict:
    """torch, GPU and the named stack entries as the runner's own probe recorded them (a run's manifest.json)."""
    for man in sorted(Path(runs_dir).glob("*/manifest.json")):
        try:
            probe = json.loads(man.read_text()).get("probe") or {}
        except (OSError, ValueError):
            continue
        gpus = probe.get("gpus") or []
        stack = probe.get("stack") or {}
        out = {
            "torch": (probe.get("frameworks") or {}).get("torch"),
            "gpu": gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else None,
        }
        out.update({key: stack.get(key) for key in stack_keys})
        return out
    return {}
