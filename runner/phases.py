"""Where a run's start goes: named moments from the runner's start to the end of the first training step.

Each moment is one ``[runner] +12.3 s NAME`` line in stdout.log (rank 0) and one entry of status.json's
``result.phases_s`` (``{NAME: seconds since the runner started}``, in order), so that a slow first step
shows its split: the supervisor's own work, the workload process's start, the framework's import, the
device, the compiled-artifact load, the model build and the first step, with the first step's compile
time split into Dynamo's tracing and the compiler backend (AOTAutograd and Inductor, or their cache
loads) where the running PyTorch reports it (``compile_split``). Imports no framework.
"""

from __future__ import annotations

import sys
import time

_T0: float | None = None
_MARKS: dict[str, float] = {}
_LOUD = True


def start(t_launch: float, *, loud: bool = True) -> None:
    """Count from ``t_launch`` (the supervisor's start); ``loud``: print each moment (rank 0)."""
    global _T0, _LOUD
    _T0 = float(t_launch)
    _LOUD = loud
    _MARKS.clear()


def mark(name: str, detail: str = "", at: float | None = None) -> None:
    """The moment ``name`` (now, or the time ``at``); a name already marked keeps its first moment."""
    if _T0 is None or name in _MARKS:
        return
    _MARKS[name] = round((time.time() if at is None else at) - _T0, 3)
    if _LOUD:
        print(f"[runner] +{_MARKS[name]:.1f} s {name}" + (f": {detail}" if detail else ""), flush=True)


def marks() -> dict[str, float]:
    """The moments so far, in order (for status.json's ``result.phases_s``)."""
    return dict(_MARKS)


def compile_split() -> tuple[str, float]:
    """This process's torch.compile time so far, split (PyTorch's own timers; "" where it has none):
    ``compile 20.1 s (tracing 4.2 s, forward backend 12.9 s, backward 3.0 s, of all that cache loads
    3.0 s, waiting on kernel compilation 9.1 s)`` and its seconds; ``("", 0.0)`` without compilation.
    Read once, after the first step."""
    utils = sys.modules.get("torch._dynamo.utils")  # nothing compiled in a process that never loaded it
    if utils is None:
        return "", 0.0
    try:
        spent = utils.calculate_time_spent()
        metrics = utils.compilation_time_metrics
    except Exception:  # a private API: a release without it gives no split, never a failed run
        return "", 0.0

    def total(key: str) -> float:
        return float(sum(metrics.get(key) or ()))

    frame = float(spent.get("entire_frame_compile", 0.0))  # Dynamo's frames, their backend included
    backward = float(spent.get("entire_backward_compile", 0.0))  # AOTAutograd compiles it at the first backward
    whole = frame + backward
    if not whole:
        return "", 0.0
    backend = float(spent.get("backend_compile", 0.0))
    parts = [f"tracing {frame - backend:.1f} s", f"forward backend {backend:.1f} s"]
    if backward:
        parts.append(f"backward {backward:.1f} s")
    loads = total("AOTAutogradCache.inductor_load")
    wait = float(spent.get("async_compile.wait", 0.0))
    inner = [f"cache loads {loads:.1f} s"] if loads >= 0.05 else []
    if wait >= 0.05:
        inner.append(f"waiting on kernel compilation {wait:.1f} s")
    if inner:
        parts.append("of all that " + ", ".join(inner))
    return f"compile {whole:.1f} s ({', '.join(parts)})", whole


def first_step(since: str = "model built", at: float | None = None) -> None:
    """Mark the end of the first training step, with its compile time split (``compile_split``) and the
    rest of the time since ``since``: running the step the first time (kernels, cuDNN's algorithm search
    under ``cudnn.benchmark``, memory allocation, the synthetic or first real batch)."""
    now = time.time() if at is None else at
    split, compiled = compile_split()
    detail = split
    if _T0 is not None and since in _MARKS:
        rest = now - _T0 - _MARKS[since] - compiled
        if rest >= 0:  # below 0 when compiling began before ``since`` (a cache loaded at torch.compile)
            detail += ("; " if detail else "") + f"the rest of the step {rest:.1f} s"
    mark("first step", detail, at=now)
