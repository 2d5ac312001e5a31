"""Where a burn-in worker (runner.burnin_worker) measures: torch's ``cuda`` device (the GPU the parent chose)
or the ``cpu``, with the clock its timings read (CUDA events on the stream, else the host's), its memory and
what it says of itself."""

from __future__ import annotations

import os
import time


class Device:
    """Where the tests run: ``cuda`` (the GPU the parent chose) or ``cpu``.

    ``cpu`` exists so that the whole path (worker, records, document) can be
    exercised on a machine without a GPU; ``runner burnin`` itself always
    asks for ``cuda``.
    """

    def __init__(self, kind: str):
        import torch

        self.torch = torch
        self.kind = kind
        if kind == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
        if kind not in ("cuda", "cpu"):
            raise ValueError(f"unknown device {kind!r}")
        self.name = kind

    @property
    def cuda(self) -> bool:
        return self.kind == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def mark(self):
        """A point in time: a CUDA event recorded on the stream, or the host clock (CPU work is synchronous)."""
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def elapsed_ms(self, a, b) -> float:
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b)
        return (b - a) * 1000.0

    def total_memory(self) -> int:
        if self.cuda:
            return self.torch.cuda.get_device_properties(0).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def info(self) -> dict:
        t = self.torch
        if not self.cuda:
            return {"name": "cpu", "torch": t.__version__, "cuda": None}
        p = t.cuda.get_device_properties(0)
        info = {"name": p.name, "torch": t.__version__, "cuda": t.version.cuda}
        for attr in ("pci_domain_id", "pci_bus_id", "pci_device_id"):
            info[attr] = getattr(p, attr, None)
        return info
