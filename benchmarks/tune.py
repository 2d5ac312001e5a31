"""Try speed settings of the runner's workloads side by side, on one GPU, in one call.

Each ``--variant`` is one measurement of benchmarks/throughput.py's optimized
path (or, with ``compiled``, its plain ``torch.compile`` of the same model without
the workload's speed settings; with ``baseline``, its eager baseline) in a child
process of its own, with:

    WORKLOAD [compiled|baseline] [batch=N] [mode=COMPILE_MODE] [inductor=KEY=VALUE,KEY=VALUE] [set=KEY=VALUE,...]
             [cudnn=on|off|N]

``set`` replaces settings of the workload's scale in workloads.yml for that
measurement (keys the scale already has, such as ``compile``). ``mode``
sets ``GPULAB_COMPILE_MODE`` (default, reduce-overhead, max-autotune,
max-autotune-no-cudagraphs) and ``inductor`` sets ``GPULAB_INDUCTOR``
(``torch._inductor.config`` settings, see runner.workloads.base.compile_fn),
``cudnn`` sets ``GPULAB_CUDNN_BENCHMARK`` (cuDNN's algorithm search on, off, or at most
N algorithms, see runner.workloads.compiling.cuda_backends)
for that child only (``compiled`` with them: plain compile plus that one setting). The variants run in the order given, until ``--deadline``
seconds have passed: a variant that could not finish in the time left is
recorded as skipped, so that one call of a limited length still returns its
JSON. The JSON (``--out``) is rewritten after every variant.

    python benchmarks/tune.py --out tune.json --deadline 540 \\
        --variant "resnet50" --variant "resnet50 batch=512" \\
        --variant "resnet50 mode=reduce-overhead" --variant "resnet50 baseline"

Once a setting pays, put it into runner/workloads/workloads.yml (``compile_mode``,
``inductor``, ``throughput.batch_by_memory``) and confirm it with
benchmarks/throughput.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput
from benchcommon import workload_names

from runner.workloads.compiling import key_values  # no torch in this process: its children load it
from runner.workloads.errors import WorkloadError

KEYS = ("batch", "mode", "inductor", "set", "cudnn")


def parse_variant(text: str) -> dict:
    """``"resnet50 batch=512 mode=reduce-overhead"`` -> a dict; ValueError names what is wrong."""
    words = text.split()
    if not words:
        raise ValueError("empty variant")
    v = {"label": text.strip(), "workload": words[0], "baseline": False, "compiled": False}
    for w in words[1:]:
        if w in ("baseline", "compiled"):
            if v["baseline"] or v["compiled"]:
                raise ValueError(f"{w!r}: a variant is the optimized path, compiled or baseline, one of them")
            v[w] = True
            continue
        key, sep, value = w.partition("=")
        if not sep or key not in KEYS or not value:
            raise ValueError(f"{w!r}: expected compiled, baseline or one of {', '.join(k + '=...' for k in KEYS)}")
        if key == "set":
            try:
                v[key] = key_values(value, w)
            except WorkloadError as exc:
                raise ValueError(str(exc)) from None
        elif key == "cudnn":
            if value not in ("on", "off") and not (value.isdigit() and int(value) > 0):
                raise ValueError(f"cudnn={value}: use on, off or a count of algorithms (1 or more)")
            v[key] = value
        elif key == "batch":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"batch={value}: not a positive integer")
            v[key] = int(value)
        else:
            v[key] = value
    return v


def run_variant(v: dict, args, timeout: float, cache: Path) -> dict:
    env = {
        "GPULAB_COMPILE_MODE": v.get("mode", ""),
        "GPULAB_INDUCTOR": v.get("inductor", ""),
        "GPULAB_CUDNN_BENCHMARK": v.get("cudnn", ""),
    }
    t0 = time.time()
    variant = "baseline" if v["baseline"] else "compiled" if v["compiled"] else "optimized"
    out = throughput.run_child(
        v["workload"],
        variant,
        device=args.device,
        scale=args.scale,
        measure_s=args.measure_seconds,
        warmup=args.warmup_steps,
        timeout=timeout,
        cache=cache,
        batch=v.get("batch"),
        extra_env=env,
        overrides=v.get("set"),
    )
    out["wall_s"] = round(time.time() - t0, 1)
    out["variant"] = variant
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        required=True,
        help='"WORKLOAD [compiled|baseline] [batch=N] [mode=M] [inductor=K=V,K=V] [set=K=V,K=V] '
        '[cudnn=on|off|N]" (repeat)',
    )
    ap.add_argument("--out", default="tune.json")
    ap.add_argument("--deadline", type=float, default=570.0, help="seconds for all variants together")
    ap.add_argument(
        "--min-left", type=float, default=30.0, help="do not start a variant with fewer seconds than this left"
    )
    ap.add_argument("--measure-seconds", type=float, default=8.0)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--scale", choices=("full", "small", "tiny"), default="full")
    ap.add_argument("--cache", default=None, help="compiled-kernel cache (default: a new temp dir)")
    args = ap.parse_args(argv)
    try:
        variants = [parse_variant(t) for t in args.variant]
        known = workload_names()  # the runner's catalogue
        unknown = [v["workload"] for v in variants if v["workload"] not in known]
        if unknown:
            raise ValueError(f"unknown workload {unknown[0]!r} (known: {', '.join(known)})")
    except ValueError as exc:
        print(f"tune.py: --variant: {exc}", file=sys.stderr)
        return 2
    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="gpulab-tune-"))
    start = time.time()
    rows = []
    for v in variants:
        left = args.deadline - (time.time() - start)
        if left < args.min_left:
            r = {"error": f"skipped: {left:.0f} s left of the deadline"}
        else:
            r = run_variant(v, args, left, cache)
        rows.append({**v, **r})
        sps = r.get("samples_per_s")
        print(
            f"[tune] {v['label']:<60} "
            + (
                f"{sps:,.1f} {r.get('unit', '')} batch {r.get('samples_per_step')}"
                f" first step {r.get('build_and_first_step_s')} s"
                + (f" cudagraph skips {r['cudagraph_skips']}" if "cudagraph_skips" in r else "")
                if sps
                else r["error"]
            ),
            flush=True,
        )
        Path(args.out).write_text(
            json.dumps({"variants": rows, "device": args.device, "scale": args.scale}, indent=2) + "\n"
        )
    print(f"[tune] wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
