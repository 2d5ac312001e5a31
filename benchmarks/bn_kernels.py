"""ResNet-50's batch norm + ReLU (+ residual add) passes, forward and backward, timed alone: Inductor's against ATen's.

Issue 47 asks resnet50 for 1.3x plain torch.compile. The profiles put most of the compiled step in Inductor's
kernels of batch norm, ReLU and the residual adds (57 % on an H200, 2026-12-03), the rest in cuDNN's
convolutions: a 1.3x would have to come from those normalization passes. This measures, for every batch-norm
site of ResNet-50 v1.5 at one batch (the shapes of ``SITES``, with how many layers have each), one training
pass of ``relu(batch_norm(x) [+ residual])`` and its backward in channels-last bf16 with fp32 parameters (as
the runner's compiled step under autocast), by each implementation:

- ``inductor``: the same function under ``torch.compile`` (what the compiled model runs: batch norm
  decomposed into Triton reductions and pointwise kernels);
- ``eager``: ATen's own batch norm (cuDNN's kernels where ATen takes them for the input: its NHWC
  training mode), then ReLU and the add as separate kernels.

and sums them over the network: milliseconds per training step that the normalization costs each way. If
``eager`` is not clearly below ``inductor`` here, putting cuDNN's batch norm into the compiled graph (a
custom operator) cannot give the 1.3x either. On a GPU it also gives each site's ``floor``: its fewest
full-tensor reads and writes (``passes``) at the copy rate measured on the same GPU (``copy_gbps``), the
least any kernel could take for it; the sum, ``ms_per_step.floor``, bounds what faster normalization kernels
alone could win. JSON (``--out``): per site and in total, with the GPU and torch.

    python benchmarks/bn_kernels.py --out bn.json [--batch 384] [--impl inductor,eager] [--repeat 20]

On a CPU (``--device cpu``) it is a smoke test of the same code (small batch; the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: ResNet-50 v1.5's stages at 224 x 224: (width w, blocks n, input side s_in, side s). Batch-norm sites: the
#: stem's; per stage the first block's after its 1x1 (w at s_in), its strided 3x3 (w at s), its expansion (4w at
#: s, with the add) and its projection (4w at s; it has no ReLU of its own, timed with one all the same), then
#: n-1 blocks of w, w and 4w with the add.
STAGES = ((64, 3, 56, 56), (128, 4, 56, 28), (256, 6, 28, 14), (512, 3, 14, 7))


def sites() -> list[tuple[int, int, int, bool]]:
    """``(channels, side, layers, add)`` for every distinct batch-norm shape of ResNet-50 v1.5 (53 layers)."""
    out: dict[tuple[int, int, bool], int] = {(64, 112, False): 1}
    for w, n, s_in, s in STAGES:
        for key, k in (
            ((w, s_in, False), 1),
            ((w, s, False), 1),
            ((4 * w, s, True), 1),
            ((4 * w, s, False), 1),
            ((w, s, False), 2 * (n - 1)),
            ((4 * w, s, True), n - 1),
        ):
            out[key] = out.get(key, 0) + k
    return [(c, side, k, add) for (c, side, add), k in out.items()]


def _pass(x, res, weight, bias, mean, var):
    import torch.nn.functional as F

    y = F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.1, eps=1e-5)
    if res is not None:
        y = y + res
    return F.relu(y)


def time_site(impl: str, c: int, side: int, add: bool, batch: int, device, repeat: int) -> float:
    """Milliseconds of one forward + backward of the site's pass by ``impl`` (the mean of ``repeat``)."""
    import torch

    g = torch.Generator(device=device).manual_seed(c * 1000 + side)
    mk = dict(device=device, dtype=torch.bfloat16)
    x = torch.randn(batch, c, side, side, generator=g, **mk).contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    res = None
    if add:  # the residual branch trains too: its gradient is written, as in the network
        res = torch.randn(x.shape, generator=g, **mk).contiguous(memory_format=torch.channels_last)
        res.requires_grad_(True)
    weight = torch.ones(c, device=device, requires_grad=True)
    bias = torch.zeros(c, device=device, requires_grad=True)
    mean, var = torch.zeros(c, device=device), torch.ones(c, device=device)
    grad = torch.randn(x.shape, generator=g, **mk).contiguous(memory_format=torch.channels_last)
    fn = _pass
    if impl == "inductor":
        torch._dynamo.reset()  # each site compiled afresh: past Dynamo's recompile limit it would run eager
        fn = torch.compile(_pass, dynamic=False)

    def once():
        x.grad = weight.grad = bias.grad = None  # no accumulation pass: the training step has none either
        if res is not None:
            res.grad = None
        y = fn(x, res, weight, bias, mean, var)
        y.backward(grad)

    for _ in range(3):  # compilation, cuDNN's first calls
        once()
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    sync()
    t = time.perf_counter()
    for _ in range(repeat):
        once()
    sync()
    return (time.perf_counter() - t) / repeat * 1000.0


def passes(add: bool) -> int:
    """Full-tensor reads and writes that one training pass of a site needs at the least, each kernel perfect:
    forward, the statistics (read x) and the normalization (read x [and the residual], write y); backward, the
    reductions for the weight and bias gradients (read dy and x; ReLU's mask recomputed from x [and the
    residual: read it again]), then the input gradient (read dy and x [and the residual], write dx [and the
    residual's gradient]). 8 without the add, 12 with it."""
    return 12 if add else 8


def copy_gbps(device, repeat: int) -> float:
    """This GPU's device-to-device copy rate in GB/s (bytes read + bytes written, a 1 GiB bf16 tensor): the
    rate a memory-bound pass could reach at best, measured here rather than taken from a data sheet."""
    import torch

    src = torch.empty(1 << 29, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(device)
    t = time.perf_counter()
    for _ in range(repeat):
        dst.copy_(src)
    torch.cuda.synchronize(device)
    return 2 * src.numel() * src.element_size() * repeat / (time.perf_counter() - t) / 1e9


def measure(impls: list[str], batch: int, device: str, repeat: int, limit: int | None = None) -> dict:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        from runner.workloads.compiling import cuda_backends

        cuda_backends()
    gbps = copy_gbps(dev, repeat) if dev.type == "cuda" else None
    rows, totals = [], {i: 0.0 for i in impls}
    floor = 0.0
    for c, side, layers, add in sites()[:limit]:
        row = {"channels": c, "side": side, "layers": layers, "add": add}
        if gbps:
            row["floor_ms"] = round(passes(add) * batch * c * side * side * 2 / (gbps * 1e9) * 1000.0, 4)
            floor += row["floor_ms"] * layers
        for impl in impls:
            ms = time_site(impl, c, side, add, batch, dev, repeat)
            row[f"{impl}_ms"] = round(ms, 4)
            totals[impl] += ms * layers
        rows.append(row)
        print(
            f"[bn] {c:5d} x {side:3d}^2 x{layers:2d}{' +add' if add else '     '} "
            + "  ".join(f"{i} {row[f'{i}_ms']:.3f} ms" for i in impls),
            flush=True,
        )
    doc = {
        "batch": batch,
        "device": str(dev),
        "torch": torch.__version__,
        "sites": rows,
        "ms_per_step": {i: round(v, 3) for i, v in totals.items()},
    }
    if dev.type == "cuda":
        doc["gpu"] = torch.cuda.get_device_name(dev)
        # the least these passes can take on this GPU: every site at its fewest full-tensor passes (passes())
        # at the measured copy rate; what separates a compiled step from it is all a better kernel could win
        doc["copy_gbps"] = round(gbps, 1)
        doc["ms_per_step"]["floor"] = round(floor, 3)
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bn-kernels.json")
    ap.add_argument("--batch", type=int, default=384)
    ap.add_argument("--impl", default="inductor,eager", help="comma-separated: inductor, eager")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--sites", type=int, default=None, help="only the first N sites (a quick try)")
    args = ap.parse_args(argv)
    impls = [i.strip() for i in args.impl.split(",") if i.strip()]
    bad = [i for i in impls if i not in ("inductor", "eager")]
    if bad or not impls or args.batch < 1 or args.repeat < 1 or (args.sites is not None and args.sites < 1):
        what = f"--impl {bad[0]!r}: use inductor, eager" if bad else "--impl, --batch, --repeat, --sites: 1 or more"
        print(f"bn_kernels.py: {what}", file=sys.stderr)
        return 2
    doc = measure(impls, args.batch, args.device, args.repeat, args.sites)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2) + "\n")
    print(
        "[bn] per training step: "
        + ", ".join(f"{i} {v:.2f} ms" for i, v in doc["ms_per_step"].items())
        + f" (batch {args.batch}); wrote {args.out}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
