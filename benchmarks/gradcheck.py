"""Whole-model gradient check: every optimized path against the plain model, parameter by parameter.

For each workload x scale (x mode), in a child process of its own:
``runner.workloads.gradients.gradient_step`` builds the plain model (eager,
fp32, NCHW, no compile, no TF32) and runs one training step, then builds the
optimized model (what the runner runs on a GPU: ctx.optimized, torch.compile
with the scale's settings, channels-last, the workload's replacement layers,
fused optimizer, bf16 autocast) from the same weights and runs the same step
on the same batch, dropout off, optimizer step not taken; every parameter's
gradient is compared (``gradients.compare``: cosine similarity and norm
ratio; the thresholds and their reasons are there). Only when some parameter
misses the fixed thresholds (and nothing worse is wrong) does the case run a
third pass, the noise floor: the plain eager model, same weights and batch,
under the optimized path's precision and TF32 setting; such a parameter
passes when it is no further from fp32 than that pass allows
(``gradients.FLOOR_MARGIN``); its row says which rule passed it.

    python benchmarks/gradcheck.py [--workloads resnet50,ssd,...] [--scales small,full]
        [--modes throughput[,ttt]] [--device cuda|cpu] [--precision bf16|fp32]
        [--fp32-cases ssd:small,ssd:full]
        [--backend inductor|aot_eager] [--batch N] [--cache-dir DIR] [--deadline S]
        [--timeout S] [--jobs N] [--out gradcheck.json]

Prints one table row per case (lowest cosine and its parameter) and rewrites
the JSON after each case: ``{"_meta": {...}, "cases": [{workload, scale,
mode, precision, batch, passed, parameters, compared, zero_in_both, lowest,
floor, failures, replacement_modules, loss, seconds, rows}]}`` (``floor``:
null when the third pass was not needed, else its margin and the parameters
it passed; each row's ``rule``: fixed, floor or null, and ``floor_cosine``). Exit 0 when every
case passed, 1 when one failed or did not finish, 2 on bad input. On a CPU the
optimized path is compiled and channels-last too (``--backend aot_eager``
skips Inductor's code generation, which takes minutes on a CPU).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from benchcommon import default_device, name_list, torch_meta  # noqa: E402

ALL = ("resnet50", "ssd", "maskrcnn", "gnmt", "transformer", "ncf")
SCALES = ("tiny", "small", "full")
MODES = ("throughput", "ttt")
#: per-process batch of the check (throughput mode): small enough to compile and run
#: quickly at full model size, large enough that every head receives a gradient
BATCH = {"cuda": {"resnet50": 32, "ssd": 16, "maskrcnn": 2, "gnmt": 64, "transformer": 64, "ncf": 65536},
         "cpu": {"resnet50": 4, "ssd": 8, "maskrcnn": 2, "gnmt": 8, "transformer": 8, "ncf": 1024}}


def check_case(name: str, scale: str, mode: str, device: str, precision: str, batch: int | None,
               seed: int, backend: str | None) -> dict:
    """Plain and optimized gradients of one case, in this process, and their comparison."""
    import gc

    import torch

    from runner.workloads import gradients as G

    cpu = device == "cpu"
    common = {"scale": scale, "seed": seed, "batch_size": batch, "mode": mode}
    # An fp32 case is the strict check of the optimized path's structure (compile, channels-last,
    # replacement layers, fused optimizer): TF32 stays off in every pass, so that rounding does not hide
    # or fake a difference. A bf16 case runs the optimized path with the runner's own TF32 setting.
    tf32 = precision != "fp32"
    ref = G.gradient_step(name, device, False, **common)
    gc.collect()
    opt = G.gradient_step(name, device, True, precision=precision, weights=ref["weights"],
                          compile=True if cpu else None, channels_last=True if cpu else None,
                          backend=backend, tf32=tf32, **common)
    res = G.compare(ref["grads"], opt["grads"], precision)
    floor_s = 0.0
    if G.floor_may_help(res):  # the noise-floor pass: plain eager model, the optimized path's numerics
        gc.collect()
        fl = G.gradient_step(name, device, False, precision=precision, weights=ref["weights"], tf32=tf32, **common)
        res = G.compare(ref["grads"], opt["grads"], precision, floor=fl["grads"])
        res["floor"]["loss"] = fl["loss"]
        floor_s = fl["build_s"] + fl["step_s"]
        del fl
    del ref["weights"], opt["weights"]
    if not cpu:
        torch.cuda.empty_cache()
    res.update({"loss": {"plain": ref["loss"], "optimized": opt["loss"]},
                "seconds": {"plain": ref["build_s"] + ref["step_s"], "optimized": opt["build_s"] + opt["step_s"],
                            "optimized_step": opt["step_s"], "floor": floor_s},
                "replacement_modules": sorted(set(opt["modules"]) - set(ref["modules"])),
                "perturbed": len(ref["perturbed"])})
    return res


def run_case(name: str, scale: str, mode: str, *, device: str, precision: str, batch: int | None, seed: int,
             backend: str | None, timeout: float, cache: Path | None) -> dict:
    """check_case in a child process (its own Inductor settings and GPU memory); {'error'} on failure."""
    fd, res = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_case", f"{name}:{scale}:{mode}",
           "--_result", res, "--device", device, "--precision", precision, "--seed", str(seed),
           "--batch", str(batch if batch is not None else 0)]
    if backend:
        cmd += ["--backend", backend]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if cache is not None:  # the layout runner run gives --cache-dir
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        env["TRITON_CACHE_DIR"] = str(cache / "triton")
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max(1.0, timeout))
        text = Path(res).read_text() if os.path.getsize(res) else ""
        if p.returncode == 0 and text:
            return json.loads(text)
        lines = (p.stderr or p.stdout).strip().splitlines() or [f"exit {p.returncode}"]
        return {"error": lines[-1][:400], "log_tail": "\n".join(lines[-30:])[-4000:]}
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {time.time() - t0:.0f} s"}
    finally:
        os.unlink(res)


def _fmt(x, digits=4):
    return "-" if x is None else f"{x:.{digits}f}"


def table(cases: list[dict]) -> list[str]:
    head = (f"{'workload':<12}{'scale':<6}{'mode':<11}{'prec':<5}{'params':>7}{'cmp':>5}{'zero':>5}"
            f"  {'lowest cosine':<13} {'parameter':<34}{'fail':>5}  {'s':>6}  verdict")
    out = [head, "-" * len(head)]
    for c in cases:
        low = c.get("lowest") or {}
        sec = sum((c.get("seconds") or {}).get(k, 0) for k in ("plain", "optimized", "floor"))
        verdict = "ERROR: " + c["error"] if c.get("error") else ("pass" if c.get("passed") else "FAIL")
        out.append(f"{c['workload']:<12}{c['scale']:<6}{c['mode']:<11}{c.get('precision', ''):<5}"
                   f"{c.get('parameters', 0):>7}{c.get('compared', 0):>5}{len(c.get('zero_in_both', [])):>5}"
                   f"  {_fmt(low.get('cosine'), 8):<13} {str(low.get('name', '-'))[:33]:<34}"
                   f"{len(c.get('failures', [])):>5}  {sec:>6.1f}  {verdict}")
        for f in (c.get("failures") or [])[:5]:
            out.append(f"    {f['name']}: {f['why']}")
        fl = c.get("floor")
        if fl:
            rows = [r for r in c.get("rows", []) if r.get("floor_cosine") is not None]
            passed = [r for r in rows if r.get("rule") == "floor"]
            out.append(f"    noise floor (plain {c.get('precision')} pass, margin {fl['margin']}): "
                       f"{len(passed)} of {len(rows)} parameters below the fixed thresholds passed by it")
            for r in sorted(passed, key=lambda r: r["cosine"])[:5]:
                out.append(f"    {r['name']}: rule floor, cosine {r['cosine']:.4f} (floor {r['floor_cosine']:.4f}),"
                           f" norm ratio {r['norm_ratio']:.4f} (floor {r['floor_norm_ratio']:.4f})")
            if len(passed) > 5:
                out.append(f"    ... {len(passed) - 5} more passed by the floor (rows in the JSON)")
    return out


def meta(args) -> dict:
    import platform

    m = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "device": args.device,
         "precision": args.precision, "backend": args.backend or "inductor", "seed": args.seed, "jobs": args.jobs,
         "host": platform.node(), "python": platform.python_version()}
    m.update(torch_meta(args.device))
    return m


def _list(text: str, known: tuple, what: str) -> list[str]:
    return name_list(text, known, what)


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(ALL), help="comma-separated (default: all six)")
    ap.add_argument("--scales", default=None, help="comma-separated (default: small,full on cuda, tiny on cpu)")
    ap.add_argument("--modes", default="throughput",
                    help="throughput (synthetic batch) and/or ttt (first batch of the generated data; not full)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default=None,
                    help="of the optimized path (default: bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--fp32-cases", default="",
                    help="extra cases workload:scale (throughput mode) whose optimized path runs in fp32: "
                         "the strict check of compiled + channels-last + replacement layers")
    ap.add_argument("--backend", default=None, help="torch.compile backend (default: Inductor, as the runner)")
    ap.add_argument("--batch", type=int, default=None,
                    help="per-process batch of throughput mode (default: a small one per workload; 0: the scale's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache-dir", default=None, help="compiled-kernel cache (the runner's --cache-dir layout)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds: start no case after it, stop a running one at it, write what was done")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per case")
    ap.add_argument("--jobs", type=int, default=1,
                    help="cases at a time, each in its own process (compilation is CPU work; one GPU holds several)")
    ap.add_argument("--out", default="gradcheck.json", help="JSON output file")
    ap.add_argument("--_case", help=argparse.SUPPRESS)
    ap.add_argument("--_result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.device is None:
        args.device = default_device()
    args.precision = args.precision or ("bf16" if args.device == "cuda" else "fp32")
    if args.scales is None:
        args.scales = "small,full" if args.device == "cuda" else "tiny"
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be at least 1")
    if args.batch is not None and args.batch < 0:
        raise ValueError(f"--batch {args.batch}: must be 0 (the scale's) or more")
    if args.backend == "inductor":
        args.backend = None
    args.workloads = _list(args.workloads, ALL, "--workloads")
    args.scales = _list(args.scales, SCALES, "--scales")
    args.modes = _list(args.modes, MODES, "--modes")
    extra = []
    for item in (w.strip() for w in args.fp32_cases.split(",")):
        if not item:
            continue
        w, _, sc = item.partition(":")
        if w not in ALL or sc not in SCALES:
            raise ValueError(f"--fp32-cases: {item!r} is not workload:scale (workloads: {', '.join(ALL)}; "
                             f"scales: {', '.join(SCALES)})")
        extra.append((w, sc))
    args.fp32_cases = extra
    return args


def main(argv=None) -> int:
    try:
        args = parse(argv)
    except ValueError as exc:
        print(f"gradcheck.py: {exc}", file=sys.stderr)
        return 2
    if args._case:
        name, scale, mode = args._case.split(":")
        res = check_case(name, scale, mode, args.device, args.precision, args.batch or None, args.seed, args.backend)
        Path(args._result).write_text(json.dumps(res))
        return 0
    out = Path(args.out)
    cache = Path(args.cache_dir) if args.cache_dir else None
    end = time.time() + args.deadline if args.deadline else None
    def batch(w, m):
        return (None if args.batch == 0 else (args.batch or BATCH[args.device][w])) if m == "throughput" else "scale"

    cases = [{"workload": w, "scale": s, "mode": m, "precision": args.precision, "batch": batch(w, m)}
             for w in args.workloads for s in args.scales for m in args.modes
             if not (m == "ttt" and s == "full")]  # ttt at full scale reads the prepared data set
    cases += [{"workload": w, "scale": s, "mode": "throughput", "precision": "fp32", "batch": batch(w, "throughput")}
              for w, s in args.fp32_cases
              if not any(c["workload"] == w and c["scale"] == s and c["mode"] == "throughput"
                         and c["precision"] == "fp32" for c in cases)]
    doc = {"_meta": meta(args), "cases": []}
    done: dict[int, dict] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        case = dict(cases[i])
        left = None if end is None else end - time.time()
        if left is not None and left < 5:
            case["error"] = "not started: deadline"
        else:
            timeout = args.timeout if left is None else min(args.timeout, left)
            case.update(run_case(case["workload"], case["scale"], case["mode"], device=args.device,
                                 precision=case["precision"], batch=case["batch"] if case["mode"] == "throughput"
                                 else None, seed=args.seed, backend=args.backend, timeout=timeout, cache=cache))
        with lock:
            done[i] = case
            doc["cases"] = [done[k] for k in sorted(done)]
            print("\n".join(table([case])[2:]), flush=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")

    # the largest first, so that --jobs keeps the GPU busy to the end
    order = sorted(range(len(cases)), key=lambda i: SCALES.index(cases[i]["scale"]), reverse=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for f in [pool.submit(one, i) for i in order]:
            f.result()
    ok = bool(doc["cases"]) and all(c.get("passed") for c in doc["cases"])
    print("\n".join(table(doc["cases"])), flush=True)
    doc["_meta"]["passed"] = ok
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"[gradcheck] wrote {out}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
