"""Where SSD's bf16 gradient departs from its fp32 gradient: the study behind runner/README "ssd under bf16".

One SSD model (the scale's geometry, its own initialization with the constant
parameters moved off their constant as ``gradients.perturb_constants`` does),
one synthetic batch (noise images, 8 boxes per image as the throughput mode
draws them), matched once in fp32. Each case runs one forward and backward
pass and is compared with the plain fp32 gradient, parameter by parameter
(cosine similarity):

- ``fp32_repeat``: fp32 again (the floor: 1.0 when the pass is deterministic);
- ``bf16``: bf16 autocast, NCHW, eager (the loss in fp32, as the trainer runs it);
- ``bf16_fp32_negatives``: the same, with the hard negatives that fp32 chose;
- ``fp32_input_noise``: fp32, the input multiplied by ``1 + 2^-9 N(0, 1)``
  (one bf16 rounding of the input, nothing else);
- ``fp32_input_noise_fp32_negatives``: the same with fp32's hard negatives;
- ``bf16_channels_last_vs_bf16``: bf16 channels-last against bf16 NCHW (two
  bf16 paths that differ only in the order of their sums); on a CPU whose
  oneDNN would die in that pass (``cpucaps.bf16_channels_last_crash``) the
  case holds ``{"skipped": reason}`` instead.

    python benchmarks/ssd_bf16.py [--scale full] [--batch 4] [--device cpu|cuda] [--seed 0] [--out FILE]

Prints one line per case (lowest cosine and its parameter, parameters below
0.9 and 0.99, hard negatives that differ from fp32's) and writes JSON.
Exit 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def study(scale: str, batch: int, device: str, seed: int) -> dict:
    import torch
    import torch.nn.functional as F

    from runner.workloads import gradients as G
    from runner.workloads import load
    from runner.workloads import ssd as S

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    cfg = load()["ssd"]["scales"][scale]
    torch.manual_seed(seed)
    model = S.SSD(cfg, cfg["classes"] + 1).train()
    G.perturb_constants(model, seed)
    model.to(dev)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    size = cfg["image_size"]
    anchors = S.default_boxes(size, S.feature_sizes(cfg), cfg["scales"], cfg["aspect_ratios"], cfg.get("steps")).to(dev)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, 3, size, size, generator=g)
    centre = torch.rand(batch, 8, 2, generator=g) * 0.7 + 0.1
    extent = torch.rand(batch, 8, 2, generator=g) * 0.25 + 0.05
    boxes = torch.cat([centre - extent / 2, centre + extent / 2], -1).clamp(0, 1)
    labels = torch.randint(1, cfg["classes"] + 1, (batch, 8), generator=g)
    noise = 1 + 2**-9 * torch.randn(x.shape, generator=torch.Generator().manual_seed(seed + 2))
    x, boxes, labels, noise = x.to(dev), boxes.to(dev), labels.to(dev), noise.to(dev)
    gloc, glab = S.match(anchors, boxes, labels)

    def run(bf16=False, channels_last=False, negatives=None, noisy=False):
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model.to(memory_format=fmt)
        xi = (x * noise if noisy else x).contiguous(memory_format=fmt)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            ploc, pconf = model(xi)
        loss, neg = S.ssd_loss(ploc, pconf, gloc, glab, negatives)
        loss.backward()
        return {
            k: p.grad.detach().double().flatten().clone() for k, p in model.named_parameters() if p.grad is not None
        }, neg

    def compare(ref, got, neg_ref, neg_got) -> dict:
        cos = {
            k: F.cosine_similarity(ref[k], got[k], 0).item()
            for k in ref
            if k in got and (ref[k].abs().sum() > 0 or got[k].abs().sum() > 0)
        }
        low = sorted(cos.items(), key=lambda kv: kv[1])
        below = [k for k, v in cos.items() if v < 0.9]
        return {
            "compared": len(cos),
            "lowest": {"name": low[0][0], "cosine": round(low[0][1], 6)},
            "below_0.9": len(below),
            "below_0.9_backbone": sum(k.startswith("backbone.") for k in below),
            "below_0.99": sum(v < 0.99 for v in cos.values()),
            "negatives_differ": int((neg_ref != neg_got).sum()),
            "negatives": int(neg_ref.sum()),
            "rows": {k: round(v, 6) for k, v in low},
        }

    ref, n32 = run()
    cases = {}
    again, n = run()
    cases["fp32_repeat"] = compare(ref, again, n32, n)
    b16, n16 = run(bf16=True)
    cases["bf16"] = compare(ref, b16, n32, n16)
    got, n = run(bf16=True, negatives=n32)
    cases["bf16_fp32_negatives"] = compare(ref, got, n32, n)
    got, n = run(noisy=True)
    cases["fp32_input_noise"] = compare(ref, got, n32, n)
    got, n = run(noisy=True, negatives=n32)
    cases["fp32_input_noise_fp32_negatives"] = compare(ref, got, n32, n)
    from runner.workloads import cpucaps

    why = cpucaps.bf16_channels_last_crash() if dev.type == "cpu" else None
    if why:  # the pass would kill this process (runner/README "CPU runs and oneDNN")
        cases["bf16_channels_last_vs_bf16"] = {"skipped": why}
    else:
        got, n = run(bf16=True, channels_last=True)
        cases["bf16_channels_last_vs_bf16"] = compare(b16, got, n16, n)
    return {
        "_meta": {
            "scale": scale,
            "batch": batch,
            "device": str(dev),
            "seed": seed,
            "torch": torch.__version__,
            "positives": int((glab > 0).sum()),
        },
        "cases": cases,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="full", choices=("tiny", "small", "full"))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.batch < 1:
        print("ssd_bf16: --batch must be at least 1", file=sys.stderr)
        return 2
    import torch

    if a.device not in ("cpu", "cuda") or (a.device == "cuda" and not torch.cuda.is_available()):
        print(f"ssd_bf16: device {a.device!r} is not available here (cpu or cuda)", file=sys.stderr)
        return 2
    res = study(a.scale, a.batch, a.device, a.seed)
    m = res["_meta"]
    print(f"ssd {m['scale']} batch {m['batch']} on {m['device']}: {m['positives']} positives")
    for name, c in res["cases"].items():
        if "skipped" in c:
            print(f"{name:34s} skipped: {c['skipped']}")
            continue
        print(
            f"{name:34s} lowest {c['lowest']['cosine']:.4f} ({c['lowest']['name']}), "
            f"below 0.9: {c['below_0.9']} (backbone {c['below_0.9_backbone']}), below 0.99: {c['below_0.99']} "
            f"of {c['compared']}; hard negatives differing {c['negatives_differ']} of {c['negatives']}"
        )
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
