"""Whole-model gradient check: every optimized path against the plain model.

For each workload x scale (x mode), in a child process of its own:
``runner.workloads.gradients.gradient_step`` builds the plain model (eager,
fp32, NCHW, no compile, no TF32) and runs one training step, then builds the
optimized model (what the runner runs on a GPU: ctx.optimized, torch.compile
with the scale's settings, channels-last, the workload's replacement layers,
fused optimizer) from the same weights and runs the same step on the same
batch, dropout off, optimizer step not taken, once per precision asked for:

- bf16 (the runner's path, TF32 as the runner sets it), judged against a
  third pass, the plain eager model under bf16 autocast with the same TF32
  setting: the precision's own noise on this model and batch;
- fp32 with TF32 off in every pass: the strict structural check, with a
  third pass too, the plain model in fp32 in the optimized path's
  channels-last layout (the same sums in another order): its distance sets
  the bound where the model amplifies fp32 rounding past the fixed one.

``runner.workloads.gradjudge.judge`` gives the verdict (the rules and their
reasons are there): the whole gradient vector's distance from fp32 against
the noise pass's (bf16; fp32: a fixed bound or, where larger, twice the plain
fp32 pass's spread); per parameter only missing,
extra, zero, non-finite and scaled gradients (and, in fp32, a relative error
bound). ``--plants`` adds cases whose optimized model carries a planted fault
(benchmarks/gradplant.py: maxpool, scaled, detached); they must fail.

    python benchmarks/gradcheck.py [--workloads resnet50,ssd,...] [--scales small,full]
        [--modes throughput[,ttt]] [--device cuda|cpu] [--precisions bf16,fp32]
        [--plants resnet50:small:maxpool,...] [--skip resnet50:full,...]
        [--backend inductor|aot_eager] [--batch N] [--cache-dir DIR] [--deadline S]
        [--timeout S] [--jobs N] [--out gradcheck.json]

Prints one table row per case and rewrites the JSON after each group:
``{"_meta": {...}, "cases": [{workload, scale, mode, precision, plant,
expect, batch, passed, caught, parameters, compared, zero_in_both, distance,
lowest, failures, planted, replacement_modules, loss, seconds, rows}]}``
(``expect``: "pass", or the judge's rule a planted fault must show;
``caught``: for a planted case, whether it failed by that rule on the planted
parameter). Exit 0 when every real case passed and every planted fault was
caught, 1 otherwise, 2 on bad input. On a CPU the optimized path is compiled
and channels-last too (``--backend aot_eager`` skips Inductor's code
generation, which takes minutes on a CPU).
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
from benchcommon import catalogue, default_device, name_list, torch_meta  # noqa: E402
from gradplant import EXPECT, planted  # noqa: E402

SCALES = ("tiny", "small", "full")
MODES = ("throughput", "ttt")
PRECISIONS = ("bf16", "fp32")
#: the workloads, the per-process batch of the check (throughput mode) and the rough seconds of one
#: group (bf16 and fp32, for the order in which groups start: the longest first keeps --jobs busy to
#: the end) come from the runner's catalogue: each entry's 'bench' (gradcheck_batch, gradcheck_s);
#: a workload without them runs its scale's throughput batch and counts 10 s
DEFAULT_COST_S = 10


def check_group(
    name: str,
    scale: str,
    mode: str,
    device: str,
    precisions: list,
    batch: int | None,
    seed: int,
    backend: str | None,
    plant: str | None = None,
) -> list[dict]:
    """One case per precision of workload ``name`` at ``scale``, in this process: the plain
    fp32 pass once, then the optimized pass of each precision (and, for bf16, the plain bf16
    noise pass), each judged."""
    import gc

    import torch

    from runner.workloads import gradients as G
    from runner.workloads import gradjudge as J

    cpu = device == "cpu"
    common = {"scale": scale, "seed": seed, "batch_size": batch, "mode": mode}
    ref = G.gradient_step(name, device, False, **common)
    noises: dict = {}
    out = []
    for precision in precisions:
        tf32 = precision != "fp32"  # fp32: TF32 off in every pass, the strict check
        gc.collect()
        info: dict = {}
        with planted(name, plant, info):
            opt = G.gradient_step(
                name,
                device,
                True,
                precision=precision,
                weights=ref["weights"],
                compile=True if cpu else None,
                channels_last=True if cpu else None,
                backend=backend,
                tf32=tf32,
                **common,
            )
        noise_s = 0.0
        kind = "bf16" if precision != "fp32" else "fp32"  # bf16/fp16 share the plain bf16 pass's rule
        if kind not in noises:
            gc.collect()
            # bf16: the plain model under the optimized path's precision and TF32; fp32: the plain model
            # in fp32 in the optimized path's channels-last layout, TF32 off (the same sums, another order)
            noises[kind] = G.gradient_step(
                name,
                device,
                False,
                precision=precision,
                weights=ref["weights"],
                tf32=tf32,
                channels_last=True if kind == "fp32" else None,
                **common,
            )
            noise_s = noises[kind]["build_s"] + noises[kind]["step_s"]
        noise = noises[kind]
        res = J.judge(ref["grads"], opt["grads"], precision, noise["grads"])
        res.update(
            {
                "loss": {"plain": ref["loss"], "optimized": opt["loss"], "noise": noise["loss"]},
                "seconds": {
                    "plain": ref["build_s"] + ref["step_s"],
                    "optimized": opt["build_s"] + opt["step_s"],
                    "optimized_step": opt["step_s"],
                    "noise": noise_s,
                },
                "replacement_modules": sorted(set(opt["modules"]) - set(ref["modules"])),
                "perturbed": len(ref["perturbed"]),
                "planted": info or None,
            }
        )
        del opt
        if not cpu:
            torch.cuda.empty_cache()
        out.append(res)
    return out


def caught(case: dict) -> bool:
    """A planted case: failed by the plant's rule, on the planted parameter where it names one."""
    rule = EXPECT[case["plant"]]
    hits = [f for f in case.get("failures", []) if f["rule"] == rule]
    names = set((case.get("planted") or {}).get("parameters") or [])
    return bool(hits) and (not names or bool(names & {f["name"] for f in hits}))


def run_group(
    name: str,
    scale: str,
    mode: str,
    *,
    device: str,
    precisions: list,
    batch: int | None,
    seed: int,
    backend: str | None,
    timeout: float,
    cache: Path | None,
    plant: str | None,
) -> list[dict]:
    """check_group in a child process (its own Inductor settings and GPU memory); [{'error'}] on failure."""
    fd, res = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_case",
        f"{name}:{scale}:{mode}",
        "--_result",
        res,
        "--device",
        device,
        "--precisions",
        ",".join(precisions),
        "--seed",
        str(seed),
        "--batch",
        str(batch if batch is not None else 0),
    ]
    if backend:
        cmd += ["--backend", backend]
    if plant:
        cmd += ["--_plant", plant]
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
        err = {"error": lines[-1][:400], "log_tail": "\n".join(lines[-30:])[-4000:]}
    except subprocess.TimeoutExpired:
        err = {"error": f"timed out after {time.time() - t0:.0f} s"}
    finally:
        os.unlink(res)
    return [dict(err) for _ in precisions]


def _fmt(x, digits=4):
    return "-" if x is None else f"{x:.{digits}f}"


def _verdict(c: dict) -> str:
    if c.get("error"):
        return "ERROR: " + c["error"]
    if c.get("plant"):
        return "caught" if c.get("caught") else "NOT CAUGHT"
    return "pass" if c.get("passed") else "FAIL"


def table(cases: list[dict]) -> list[str]:
    head = (
        f"{'workload':<12}{'scale':<6}{'mode':<11}{'prec':<5}{'plant':<9}{'params':>7}{'cmp':>5}{'zero':>5}"
        f"  {'distance':>9} {'noise':>9} {'limit':>9}  {'lowest cos':<10} {'parameter':<30}{'fail':>5}"
        f"  {'s':>6}  verdict"
    )
    out = [head, "-" * len(head)]
    for c in cases:
        low = c.get("lowest") or {}
        dist = c.get("distance") or {}
        sec = sum((c.get("seconds") or {}).get(k, 0) for k in ("plain", "optimized", "noise"))
        out.append(
            f"{c['workload']:<12}{c['scale']:<6}{c['mode']:<11}{c.get('precision', ''):<5}"
            f"{c.get('plant') or '-':<9}{c.get('parameters', 0):>7}{c.get('compared', 0):>5}"
            f"{len(c.get('zero_in_both', [])):>5}  {_fmt(dist.get('optimized'), 6):>9}"
            f" {_fmt(dist.get('noise'), 6):>9} {_fmt(dist.get('limit'), 6):>9}"
            f"  {_fmt(low.get('cosine'), 6):<10} {str(low.get('name', '-'))[:29]:<30}"
            f"{len(c.get('failures', [])):>5}  {sec:>6.1f}  {_verdict(c)}"
        )
        for f in (c.get("failures") or [])[:5]:
            out.append(f"    {f['rule']}: {f['name']}: {f['why']}")
        if len(c.get("failures") or []) > 5:
            out.append(f"    ... {len(c['failures']) - 5} more (in the JSON)")
    return out


def meta(args) -> dict:
    import platform

    m = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "device": args.device,
        "precisions": args.precisions,
        "backend": args.backend or "inductor",
        "seed": args.seed,
        "jobs": args.jobs,
        "host": platform.node(),
        "python": platform.python_version(),
    }
    m.update(torch_meta(args.device))
    return m


def _pairs(text: str, what: str, parts: int, names: tuple) -> list[tuple]:
    """workload:scale (parts 2) or workload:scale:plant (parts 3) items of a comma-separated list."""
    out = []
    for item in (w.strip() for w in text.split(",")):
        if not item:
            continue
        bits = item.split(":")
        known = len(bits) == parts and bits[0] in names and bits[1] in SCALES and (parts == 2 or bits[2] in EXPECT)
        if not known:
            shape = "workload:scale" + (":plant" if parts == 3 else "")
            extra = f"; plants: {', '.join(EXPECT)}" if parts == 3 else ""
            raise ValueError(
                f"{what}: {item!r} is not {shape} (workloads: {', '.join(names)}; scales: {', '.join(SCALES)}{extra})"
            )
        out.append(tuple(bits))
    return out


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--workloads", default=None, help="comma-separated (default: every workload of the runner's catalogue)"
    )
    ap.add_argument("--scales", default=None, help="comma-separated (default: small,full on cuda, tiny on cpu)")
    ap.add_argument(
        "--modes",
        default="throughput",
        help="throughput (synthetic batch) and/or ttt (first batch of the generated data; not full)",
    )
    ap.add_argument("--skip", default="", help="workload:scale groups to leave out (for instance resnet50:full)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    ap.add_argument(
        "--precisions",
        default=None,
        help="of the optimized path, comma-separated (default: bf16,fp32 on cuda, fp32 on cpu); "
        "fp32 runs with TF32 off: the strict check",
    )
    ap.add_argument(
        "--plants",
        default="",
        help="planted-fault cases workload:scale:plant (throughput mode, bf16; plants: "
        + ", ".join(EXPECT)
        + "); each must fail",
    )
    ap.add_argument("--backend", default=None, help="torch.compile backend (default: Inductor, as the runner)")
    ap.add_argument(
        "--batch",
        type=int,
        default=None,
        help="per-process batch of throughput mode (default: a small one per workload; 0: the scale's)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache-dir", default=None, help="compiled-kernel cache (the runner's --cache-dir layout)")
    ap.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds: start no group after it, stop a running one at it, write what was done",
    )
    ap.add_argument("--timeout", type=float, default=900, help="seconds per group")
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="groups at a time, each in its own process (compilation is CPU work; one GPU holds several)",
    )
    ap.add_argument("--out", default="gradcheck.json", help="JSON output file")
    ap.add_argument("--_case", help=argparse.SUPPRESS)
    ap.add_argument("--_result", help=argparse.SUPPRESS)
    ap.add_argument("--_plant", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.device is None:
        args.device = default_device()
    if args.precisions is None:
        args.precisions = "bf16,fp32" if args.device == "cuda" else "fp32"
    if args.scales is None:
        args.scales = "small,full" if args.device == "cuda" else "tiny"
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be at least 1")
    if args.batch is not None and args.batch < 0:
        raise ValueError(f"--batch {args.batch}: must be 0 (the scale's) or more")
    if args.backend == "inductor":
        args.backend = None
    args.catalogue = catalogue()
    known = tuple(args.catalogue)
    args.workloads = name_list(args.workloads or ",".join(known), known, "--workloads")
    args.scales = name_list(args.scales, SCALES, "--scales")
    args.modes = name_list(args.modes, MODES, "--modes")
    args.precisions = name_list(args.precisions, PRECISIONS, "--precisions") if args.precisions.strip() else []
    args.skip = _pairs(args.skip, "--skip", 2, known)
    args.plants = _pairs(args.plants, "--plants", 3, known)
    return args


def plan(args) -> list[dict]:
    """The groups (one child process each), the longest first: {workload, scale, mode, precisions,
    plant, batch}."""

    def batch(w, m):
        own = args.catalogue[w].get("bench", {}).get("gradcheck_batch", {}).get(args.device)
        return (None if args.batch == 0 else (args.batch or own)) if m == "throughput" else "scale"

    groups = [
        {"workload": w, "scale": s, "mode": m, "precisions": list(args.precisions), "plant": None, "batch": batch(w, m)}
        for w in args.workloads
        for s in args.scales
        for m in args.modes
        if not (m == "ttt" and s == "full")  # ttt at full scale reads the prepared data set
        and (w, s) not in args.skip
        and args.precisions
    ]
    groups += [
        {
            "workload": w,
            "scale": s,
            "mode": "throughput",
            "precisions": ["bf16"],
            "plant": p,
            "batch": batch(w, "throughput"),
        }
        for w, s, p in args.plants
    ]

    def cost(g):
        own = args.catalogue[g["workload"]].get("bench", {}).get("gradcheck_s", {})
        return own.get(g["scale"], DEFAULT_COST_S) * (1 if g["plant"] is None else 0.5)

    return sorted(groups, key=cost, reverse=True)


def main(argv=None) -> int:
    try:
        args = parse(argv)
    except ValueError as exc:
        print(f"gradcheck.py: {exc}", file=sys.stderr)
        return 2
    if args._case:
        name, scale, mode = args._case.split(":")
        res = check_group(
            name, scale, mode, args.device, args.precisions, args.batch or None, args.seed, args.backend, args._plant
        )
        Path(args._result).write_text(json.dumps(res))
        return 0
    out = Path(args.out)
    cache = Path(args.cache_dir) if args.cache_dir else None
    end = time.time() + args.deadline if args.deadline else None
    groups = plan(args)
    if not groups:
        print("gradcheck.py: nothing to check (no precision, or every group skipped)", file=sys.stderr)
        return 2
    doc = {"_meta": meta(args), "cases": []}
    done: dict[int, list] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        g = groups[i]
        left = None if end is None else end - time.time()
        if left is not None and left < 5:
            results = [{"error": "not started: deadline"} for _ in g["precisions"]]
        else:
            timeout = args.timeout if left is None else min(args.timeout, left)
            results = run_group(
                g["workload"],
                g["scale"],
                g["mode"],
                device=args.device,
                precisions=g["precisions"],
                batch=g["batch"] if g["mode"] == "throughput" else None,
                seed=args.seed,
                backend=args.backend,
                timeout=timeout,
                cache=cache,
                plant=g["plant"],
            )
        cases = []
        for precision, res in zip(g["precisions"], results):
            case = {
                "workload": g["workload"],
                "scale": g["scale"],
                "mode": g["mode"],
                "precision": precision,
                "plant": g["plant"],
                "expect": EXPECT[g["plant"]] if g["plant"] else "pass",
                "batch": g["batch"],
                **res,
            }
            if g["plant"]:
                case["caught"] = not case.get("error") and caught(case)
            cases.append(case)
        with lock:
            done[i] = cases
            doc["cases"] = [c for k in sorted(done) for c in done[k]]
            print("\n".join(table(cases)[2:]), flush=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for f in [pool.submit(one, i) for i in range(len(groups))]:
            f.result()
    ok = bool(doc["cases"]) and all(c.get("caught") if c["plant"] else c.get("passed") for c in doc["cases"])
    print("\n".join(table(doc["cases"])), flush=True)
    doc["_meta"]["passed"] = ok
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"[gradcheck] wrote {out}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
