"""How far the ResNet stem's gradients in fp32 are from float64: the plain layers, the space-to-depth
stem eager and compiled, with cuDNN's TF32 off and on.

tests/gpu/test_stem_gpu.py's fp32 test compares the compiled fast stem with the plain one. This prints,
for each parameter gradient and for the output, the norm-relative error ``|g - ref| / |ref|`` of every
form against the plain stem computed in float64 on the same device (same weights, input and output
gradient), the largest element-wise difference between the fast and the plain form, and how many
elements an element-wise check at ``rtol = atol = 1e-3`` (the test's earlier form) would reject.
fp32 arithmetic lands near 1e-5 or below; TF32 (10-bit mantissa) near 3e-4 and above.

    python benchmarks/stem_precision.py [--device cuda|cpu] [--batch 8] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn as nn
import torch.nn.functional as F

from runner.workloads import vision as V

PARAMS = (("0.weight", 0, "weight"), ("1.weight", 1, "weight"), ("1.bias", 1, "bias"))


def stems(dev, dtype=torch.float32):
    """The plain stem and the fast one with the same weights (tests/gpu/test_stem_gpu.py uses these too)."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
    fast = nn.Sequential(
        V.SpaceToDepthConv7(3, 64, pad_channels=16), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
    )
    fast.load_state_dict(plain.state_dict())
    cl = torch.channels_last
    return plain.to(dev, dtype, memory_format=cl), fast.to(dev, dtype, memory_format=cl)


def grads(model, x, g):
    y = model(x)
    (y * g.to(y.dtype)).sum().backward()
    layers = getattr(model, "_orig_mod", model)  # a compiled module's layers
    out = {"out": y.detach().double(), **{n: getattr(layers[i], k).grad.detach().double() for n, i, k in PARAMS}}
    for p in model.parameters():
        p.grad = None
    return out


def pool_winners(model, x):
    """The max pool's chosen element in every window (eager forms only)."""
    with torch.no_grad():
        return F.max_pool2d(model[:3](x), 3, 2, 1, return_indices=True)[1]


def rel(a, ref) -> float:
    return float((a - ref).norm() / ref.norm())


def measure(dev, batch: int, tf32: bool) -> dict:
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        gen = torch.Generator(device=dev).manual_seed(1)
        x = torch.randn(batch, 3, 224, 224, device=dev, generator=gen).contiguous(memory_format=torch.channels_last)
        out = {}
        for pool in (True, False):
            size = 56 if pool else 112
            g = torch.randn(batch, 64, size, size, device=dev, generator=gen, dtype=torch.float64)
            models = [stems(dev, torch.float64)[0], *stems(dev)]
            if not pool:
                models = [m[:3] for m in models]
            ref = grads(models[0], x.double(), g)
            forms = {"plain": grads(models[1], x, g), "fast eager": grads(models[2], x, g)}
            if dev.type == "cuda":
                forms["fast compiled"] = grads(torch.compile(models[2]), x, g)
            tag = "" if pool else ", no max pool"
            out.update({f"{form}{tag}": row for form, row in compare(forms, ref).items()})
            if pool:
                win = pool_winners(models[0], x.double())
                out["max pool windows won by another element than in float64"] = {
                    form: int((pool_winners(m, x) != win).sum()) for form, m in zip(("plain", "fast eager"), models[1:])
                }
        return out
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def old_test_draw(dev) -> dict:
    """The draw of tests/gpu/test_stem_gpu.py's earlier fp32 test (input and output gradient from the
    global generator after ``stems``), TF32 off: its element-wise check, the forms' distance from
    float64 and the max pool windows whose winner differs from float64."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = stems(dev, torch.float64)[0]
        plain, fast = stems(dev)  # seeds 0, as the test did, then draws as it did
        x = torch.randn(8, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            shape = plain(x).shape
        g = torch.randn(shape, device=dev).double()
        r = grads(ref, x.double(), g)
        forms = {"plain": grads(plain, x, g), "fast eager": grads(stems(dev)[1], x, g)}
        if dev.type == "cuda":
            forms["fast compiled"] = grads(torch.compile(fast), x, g)
        out = compare(forms, r)
        win = pool_winners(ref, x.double())
        out["max pool windows won by another element than in float64"] = {
            "plain": int((pool_winners(plain, x) != win).sum()),
            "fast eager": int((pool_winners(stems(dev)[1], x) != win).sum()),
        }
        return out
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def compare(forms, ref) -> dict:
    out = {}
    for form, got in forms.items():
        row = {}
        for n in ref:
            d = (got[n] - forms["plain"][n]).abs()
            bad = int((d > 1e-3 + 1e-3 * forms["plain"][n].abs()).sum())
            row[n] = {
                "rel_to_fp64": rel(got[n], ref[n]),
                "max_abs_vs_plain": float(d.max()),
                "elements_beyond_1e-3_vs_plain": bad,
                "max_abs_ref": float(ref[n].abs().max()),
            }
        out[form] = row
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--json", default=None, help="write the figures here too")
    args = ap.parse_args(argv)
    if args.batch < 1:
        print(f"stem_precision.py: --batch {args.batch}: must be at least 1", file=sys.stderr)
        return 2
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    doc = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "batch": args.batch,
    }
    runs = [("tf32_off", lambda: measure(dev, args.batch, False))]
    if dev.type == "cuda":
        runs.append(("tf32_on", lambda: measure(dev, args.batch, True)))
    runs.append(("old_test", lambda: old_test_draw(dev)))
    for key, fn in runs:
        doc[key] = fn()
        for form, row in doc[key].items():
            if form.startswith("max pool"):
                print(f"{key:8} {form}: {row}", flush=True)
                continue
            for n, v in row.items():
                print(
                    f"{key:8} {form:28} {n:8} rel to fp64 {v['rel_to_fp64']:.2e}  max|diff vs plain| "
                    f"{v['max_abs_vs_plain']:.2e} (max|ref| {v['max_abs_ref']:.3g})  elements beyond "
                    f"rtol=atol=1e-3 vs plain: {v['elements_beyond_1e-3_vs_plain']}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
