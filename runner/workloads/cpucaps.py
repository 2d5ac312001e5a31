"""What this CPU's kernels can run, found by trying them.

The flags in /proc/cpuinfo do not tell: oneDNN and ATen pick their kernels
at run time and may be held to a smaller instruction set
(``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``), and oneDNN has no bf16 LSTM
below AVX-512 (an AVX2-only CPU fails to create the primitive). Imported only
in workload processes and in tests (it imports torch).
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def bf16_lstm_missing() -> str | None:
    """None where an LSTM trains under CPU bf16 autocast (forward and backward); else the reason."""
    try:
        lstm = torch.nn.LSTM(8, 8)
        x = torch.randn(3, 2, 8, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, _ = lstm(x)
        y.float().sum().backward()
    except RuntimeError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"this CPU's oneDNN has no bf16 LSTM (needs AVX-512): {first.split('. ')[0]}"
    return None
