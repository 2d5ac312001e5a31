"""What this CPU's kernels can run, found by trying them.

The flags in /proc/cpuinfo do not tell: oneDNN and ATen pick their kernels
at run time and may be held to a smaller instruction set
(``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``), and oneDNN has no bf16 LSTM
below AVX-512 (an AVX2-only CPU fails to create the primitive). Imported only
in workload processes and in tests (it imports torch).
"""

from __future__ import annotations

import functools
import os
import platform

import torch

# oneDNN's instruction-set names as ONEDNN_MAX_CPU_ISA takes them, by rank (aliases share one)
ONEDNN_ISAS = {
    "SSE41": 1,
    "AVX": 2,
    "AVX2": 3,
    "AVX2_VNNI": 4,
    "AVX2_VNNI_2": 5,
    "AVX512_CORE": 6,
    "AVX512_CORE_VNNI": 7,
    "AVX512_CORE_BF16": 8,
    "AVX10_1_512": 9,
    "AVX512_CORE_FP16": 9,
    "AVX512_CORE_AMX": 10,
    "AVX10_1_512_AMX": 11,
    "AVX512_CORE_AMX_FP16": 11,
    "AVX10_1_512_AMX_FP16": 11,
    "AVX10_2_512": 12,
    "AVX10_2_512_AMX_2": 13,
}
AVX512_CORE = ONEDNN_ISAS["AVX512_CORE"]


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


def onednn_isa() -> str | None:
    """The instruction set oneDNN's CPU kernels use in this process (a name ONEDNN_MAX_CPU_ISA takes),
    or None off x86.

    The CPU's best as torch's cpuinfo reports it (AMX, AVX-512 with bf16, VNNI, AVX-512, AVX2),
    held to ``ONEDNN_MAX_CPU_ISA`` (or its old name ``DNNL_MAX_CPU_ISA``) as oneDNN holds it; a
    value oneDNN does not know leaves the CPU's best, as oneDNN does.
    """
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return None
    c = torch.cpu
    cpu = (
        "AVX512_CORE_AMX"
        if c._is_amx_tile_supported()
        else "AVX512_CORE_BF16"
        if c._is_avx512_bf16_supported()
        else "AVX512_CORE_VNNI"
        if c._is_avx512_supported() and c._is_vnni_supported()
        else "AVX512_CORE"
        if c._is_avx512_supported()
        else "AVX2"
        if c._is_avx2_supported()
        else "SSE41"
    )
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    if cap in ONEDNN_ISAS and ONEDNN_ISAS[cap] < ONEDNN_ISAS[cpu]:
        return cap
    return cpu


def bf16_channels_last_crash() -> str | None:
    """Why bf16 training must not take channels-last convolutions on this CPU, or None where it may.

    oneDNN 3.x's AVX-512 weight-gradient kernel of a 1x1 stride-2 convolution (``jit_bf16_1x1``,
    ``backward_weights``) writes past its buffer with channels-last (NHWC) bf16 tensors of some
    channel counts (8 -> 16, for instance): the process dies by SIGSEGV or SIGABRT (runner/README,
    "CPU runs and oneDNN"). It is used from ``AVX512_CORE`` up; AVX2 takes another kernel.
    Decided from the instruction set, since trying the kernel would kill the process.
    """
    isa = onednn_isa()
    if isa is None or ONEDNN_ISAS[isa] < AVX512_CORE:
        return None
    return f"this CPU's oneDNN ({isa}) has an AVX-512 bf16 channels-last convolution gradient that kills the process"
