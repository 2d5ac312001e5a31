"""Where the removed offset max pool lost its gradient: compiled backends on CUDA against ``F.max_pool2d``.

resnet50's stem once used ``OffsetMaxPool``: 3x3 stride-2 max pooling as a
custom ``torch.autograd.Function`` that saved the winner's offset in its window
(int8) and computed the input gradient as a gather. Compiled by Inductor on
CUDA it sent no gradient upstream (issue 20), while eager, CPU-compiled and
the plain layers were right; the runner now uses ``nn.MaxPool2d``. A copy of
that Function lives here, and only here, so that the fault can be placed:

- ``eager``: the Function run as written (the formula itself);
- ``aot_eager``: Dynamo + AOTAutograd tracing, eager kernels (the tracing of
  the Function and of its ``ctx`` attributes);
- ``aot_eager_decomp_partition``: plus Inductor's decompositions and the
  min-cut partitioner, eager kernels;
- ``inductor``: the generated Triton kernels;
- ``inductor, backward alone``: only the gather formula of the backward,
  compiled as a plain function of (offsets, gradient): Inductor's code for it
  without any autograd.Function around it.

Each case pools the same input (8x64x112x112, a stem activation with ties;
fp32 channels-last, fp32 NCHW and bf16 channels-last) and back-propagates the same upstream gradient; the table gives the input
gradient's largest error against ``F.max_pool2d``'s, its cosine with it and
the share of non-zero entries (the reference's share is on the first line).
The ``stem`` lines compile a plain 7x7 conv + BN + ReLU + the Function and
compare the convolution's weight gradient with the plain stem's.

    python benchmarks/maxpool_diag.py     # about 30-60 s on one H200; prints the table

Without CUDA it prints one line saying so and exits 0.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def _half(size: int) -> int:
    return (size - 1) // 2 + 1


def _is_channels_last(x: torch.Tensor) -> bool:
    return x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


def _pool_windows(size: int, out: int, device):
    """For each input index along one axis: the two windows that may hold it,
    as (window index, offset in the window, valid) each."""
    p = torch.arange(size, device=device) + 1
    first, off = p // 2, p % 2
    return (
        (first.clamp(max=out - 1), off, first < out),
        ((first - 1).clamp(min=0), off + 2, (off == 0) & (first >= 1)),
    )


def _gather_backward(code: torch.Tensor, grad: torch.Tensor, h: int, w: int) -> torch.Tensor:
    total = None
    ho, wo = code.shape[-2:]
    for ph, i, vh in _pool_windows(h, ho, grad.device):
        for pw, j, vw in _pool_windows(w, wo, grad.device):
            rows, cols = ph[:, None], pw[None, :]
            hit = (code[:, :, rows, cols] == (3 * i[:, None] + j[None, :])) & vh[:, None] & vw[None, :]
            part = torch.where(hit, grad[:, :, rows, cols].float(), 0.0)
            total = part if total is None else total + part
    return total.to(grad.dtype)


def _pool_with_codes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The padded 3x3/2 max (NaN wins) and the int8 window offset of each maximum."""
    h, w = x.shape[-2:]
    ho, wo = _half(h), _half(w)
    xp = F.pad(x, (1, 2 * wo - w, 1, 2 * ho - h), value=float("-inf"))
    best = code = None
    for k in range(9):
        i, j = divmod(k, 3)
        v = xp[:, :, i : i + 2 * ho - 1 : 2, j : j + 2 * wo - 1 : 2]
        if best is None:
            best, code = v, torch.zeros(v.shape, dtype=torch.int8, device=v.device)
            continue
        take = (v > best) | torch.isnan(v)
        best = torch.where(take, v, best)
        code = code.masked_fill(take, k)
    return best, code


class OldMaxPool3x3s2(torch.autograd.Function):
    """The removed Function, as it was in runner/workloads/vision.py."""

    @staticmethod
    def forward(ctx, x):
        h, w = x.shape[-2:]
        best, code = _pool_with_codes(x)
        ctx.save_for_backward(code)
        ctx.in_size = (h, w)
        ctx.channels_last = _is_channels_last(x)
        if ctx.channels_last:
            best = best.contiguous(memory_format=torch.channels_last)
        return best

    @staticmethod
    def backward(ctx, grad):
        (code,) = ctx.saved_tensors
        h, w = ctx.in_size
        total = _gather_backward(code, grad, h, w)
        if ctx.channels_last:
            total = total.contiguous(memory_format=torch.channels_last)
        return total


class OldPool(nn.Module):
    def forward(self, x):
        return OldMaxPool3x3s2.apply(x)


def _offsets(x: torch.Tensor) -> torch.Tensor:
    """The forward's int8 offsets, computed eagerly (input of the 'backward alone' case)."""
    with torch.no_grad():
        return _pool_with_codes(x)[1]


def _stats(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float]:
    g, r = got.detach().double().flatten(), ref.detach().double().flatten()
    err = (g - r).abs().max().item()
    cos = (g @ r / (g.norm() * r.norm()).clamp(min=1e-30)).item()
    nz = (g != 0).double().mean().item()
    return err, cos, nz


def pool_case(backend: str | None, dtype, channels_last: bool, dev):
    gen = torch.Generator(device=dev).manual_seed(5)
    x = torch.relu(torch.randn(8, 64, 112, 112, device=dev, generator=gen)).mul(2).round().to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya = F.max_pool2d(a, 3, 2, 1)
    gy = torch.randn(ya.shape, device=dev, generator=gen).to(dtype)
    ya.backward(gy)
    if backend == "backward-alone":
        fn = torch.compile(_gather_backward, backend="inductor", dynamic=False)
        grad_in = fn(_offsets(x), gy, x.shape[-2], x.shape[-1])
        same_fwd = True
    else:
        pool = OldPool() if backend is None else torch.compile(OldPool(), backend=backend, dynamic=False)
        yb = pool(b)
        same_fwd = bool(torch.equal(yb, ya))
        yb.backward(gy)
        grad_in = b.grad
    return same_fwd, *_stats(grad_in, a.grad), (a.grad != 0).double().mean().item()


def stem_case(backend: str | None, dev):
    torch.manual_seed(0)
    cl = torch.channels_last
    plain = nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
    ).to(dev, memory_format=cl)
    old = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), OldPool()).to(
        dev, memory_format=cl
    )
    old.load_state_dict(plain.state_dict())
    x = torch.randn(8, 3, 224, 224, device=dev).contiguous(memory_format=cl)
    ya = plain(x)
    run = old if backend is None else torch.compile(old, backend=backend, dynamic=False)
    yb = run(x)
    g = torch.randn_like(ya)
    (ya * g).sum().backward()
    (yb * g).sum().backward()
    return bool(torch.allclose(yb, ya, rtol=1e-4, atol=1e-4)), *_stats(old[0].weight.grad, plain[0].weight.grad)


def main() -> int:
    if not torch.cuda.is_available():
        print("maxpool_diag: no CUDA device here; this diagnostic compiles for CUDA only (skipped)")
        return 0
    dev = torch.device("cuda")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"maxpool_diag: torch {torch.__version__}, {torch.cuda.get_device_name(dev)}")
    head = (
        f"{'case':<10} {'backend':<28} {'dtype':<5} {'layout':<7} {'fwd':<4} {'max err':>10} "
        f"{'cosine':>8} {'nonzero':>8}"
    )
    print(head)
    print("-" * len(head))
    t0 = time.time()
    ref_nz = None
    backends = [None, "aot_eager", "aot_eager_decomp_partition", "inductor", "backward-alone"]
    # fp32 channels-last is the failing test's case; NCHW and bf16 tell whether layout or dtype matter
    for dtype, cl in ((torch.float32, True), (torch.float32, False), (torch.bfloat16, True)):
        for be in backends:
            torch._dynamo.reset()
            try:
                fwd, err, cos, nz, ref_nz = pool_case(be, dtype, cl, dev)
                row = f"{'yes' if fwd else 'NO':<4} {err:>10.3g} {cos:>8.4f} {nz:>8.4f}"
            except Exception as exc:  # a backend that fails to compile is a finding too
                row = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
            name = "inductor, backward alone" if be == "backward-alone" else (be or "eager")
            print(f"{'pool':<10} {name:<28} {str(dtype)[6:]:<5} {'NHWC' if cl else 'NCHW':<7} {row}", flush=True)
    if ref_nz is not None:
        print(f"(F.max_pool2d's input gradient is non-zero in {ref_nz:.4f} of the entries)")
    for be in (None, "aot_eager", "aot_eager_decomp_partition", "inductor"):
        torch._dynamo.reset()
        try:
            fwd, err, cos, nz = stem_case(be, dev)
            row = f"{'yes' if fwd else 'NO':<4} {err:>10.3g} {cos:>8.4f} {nz:>8.4f}"
        except Exception as exc:
            row = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
        print(f"{'stem':<10} {be or 'eager':<28} {'fp32':<5} {'NHWC':<7} {row}", flush=True)
    print(
        f"maxpool_diag: {time.time() - t0:.1f} s. A right case: fwd yes, cosine 1.0000, the reference's "
        f"non-zero share (stem: the conv weight gradient, cosine 1.0000)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
