"""``python -m runner burnin``: GPU health and performance for hardware validation.

    python -m runner burnin --level quick|standard|burn-in [--gpus all|N|I,J] --out DIR [--json]

Measures; does not judge. The controller (``lab.validate.fleet``) compares the
document with references and gives the verdicts.

What it does, in order:
1. probe the host (``runner.probe``), start the NVML sampler
   (``DIR/telemetry.csv``) and sample the GPUs at idle;
2. read the kernel log since boot for NVIDIA XID events;
3. (standard, burn-in) per GPU, one after another: matmul TFLOP/s in fp32,
   tf32, bf16 and fp16 (a block of each product checked against float64),
   device memory bandwidth, pinned host-to-device and device-to-host
   bandwidth, ResNet-50 training throughput;
4. (standard, burn-in; two GPUs or more) the same on all GPUs at once,
   then NCCL all-reduce bus bandwidth over all of them;
   nvbandwidth and nccl-tests' all_reduce_perf where provisioning built them
   (``runner.bwtools``; their JSON kept beside the document);
5. (burn-in) a sustained bf16 matmul on all GPUs at once for ``--minutes``;
6. read the kernel log again (XIDs that appeared during the load), stop the
   sampler, and write ``DIR/burnin.json`` (the document), ``DIR/probe.json``
   and ``DIR/SHA256SUMS``.

The load tests run in child processes (``runner.burnin_worker``) that import
torch; this process imports no framework. ResNet-50: ``--resnet runner``
calls ``python -m runner run resnet50 --mode throughput`` (the runner's own
workload, the command-line contract), ``builtin`` the same workload's model
and training step inside the load worker (runner.workloads.resnet50 at
``--resnet-scale``, synthetic images, no run directory), ``auto`` (default) the runner's workload when
``runner list`` has it, else the builtin loop; the document says which.

Exit codes: 0 every test ran and passed its own sanity checks; 1 a test
failed (a worker crashed, wrong matmul results, a timeout), or this host has
no NVIDIA driver/GPU (the document is still written, with ``outcome:
"no_gpu"`` and the reason, and the reason is printed on stderr); 2 bad input
(unknown level, bad GPU list, ``--out`` not empty), one line on stderr,
nothing written.

Modules: this one (levels, phases, the command line), runner.burnin_procs (the worker processes),
runner.burnin_xid (XID events of the kernel log), runner.burnin_doc (the document and its outputs),
runner.burnin_worker (the load tests in a worker process), runner.burnin_resnet (ResNet-50 through
`runner run resnet50`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from runner import bwtools, probe, telemetry
from runner.burnin_xid import parse_xids, xid_scan  # noqa: F401 (runner.burnin.parse_xids stays importable)
from runner.burnin_procs import run_workers, worker_env
from runner.burnin_resnet import runner_resnet
from runner.burnin_doc import now_iso, build_document, human_summary, no_gpu_document, write_outputs
from runner.probe_link import counters as link_counters

# Durations (seconds) per level. quick: health only, no load.
LEVELS = {
    "quick": {"idle_s": 3, "load": False},
    "standard": {
        "idle_s": 5,
        "load": True,
        "matmul_s": 5,
        "membw_s": 5,
        "transfer_s": 3,
        "resnet_s": 20,
        "resnet_max_minutes": 3,
        "nccl_iters": 20,
        "burn_minutes": 0,
    },
    "burn-in": {
        "idle_s": 10,
        "load": True,
        "matmul_s": 30,
        "membw_s": 30,
        "transfer_s": 10,
        "resnet_s": 60,
        "resnet_max_minutes": 6,
        "nccl_iters": 100,
        "burn_minutes": 10,
    },
}
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
MAX_BURN_MINUTES = 60


def gpu_tests(cfg: dict, resnet_builtin: bool, resnet_scale: str = "small") -> list[dict]:
    tests = [{"test": "matmul", "dtype": p, "seconds": cfg["matmul_s"]} for p in PRECISIONS]
    tests += [
        {"test": "membw", "seconds": cfg["membw_s"]},
        {"test": "h2d", "seconds": cfg["transfer_s"]},
        {"test": "d2h", "seconds": cfg["transfer_s"]},
    ]
    if resnet_builtin:
        tests.append({"test": "resnet50", "seconds": cfg["resnet_s"], "scale": resnet_scale})
    return tests


def runner_has_resnet(python: str) -> tuple[bool, str]:
    try:
        out = subprocess.run(
            [python, "-m", "runner", "list", "--json"], capture_output=True, text=True, timeout=120, env=worker_env([])
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"runner list failed: {exc}"
    if out.returncode != 0:
        return False, f"runner list failed: {(out.stderr.strip().splitlines() or ['exit %d' % out.returncode])[-1]}"
    return (
        '"resnet50"' in out.stdout
    ), "runner list has resnet50" if '"resnet50"' in out.stdout else "runner list has no resnet50"


# ---------------------------------------------------------------- command line


def add_arguments(parser) -> None:
    parser.add_argument(
        "--level",
        default="standard",
        choices=list(LEVELS),
        help="quick: health only (seconds); standard: ~1-3 min per GPU; burn-in: minutes up to an hour",
    )
    parser.add_argument("--gpus", default="all", help="all (default), a count N (the first N) or indices I,J,...")
    parser.add_argument(
        "--out", required=True, help="directory for burnin.json, probe.json, telemetry.csv (new or empty)"
    )
    parser.add_argument("--json", action="store_true", help="print the JSON document instead of a summary")
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help=f"burn-in level: minutes of sustained all-GPU load (default 10, at most {MAX_BURN_MINUTES})",
    )
    parser.add_argument(
        "--resnet",
        default="auto",
        choices=["auto", "runner", "builtin", "off"],
        help="ResNet-50 throughput through `runner run resnet50` (runner), the same workload's step in the load "
        "worker (builtin), "
        "the first if available (auto), or not at all (off)",
    )
    parser.add_argument(
        "--resnet-scale",
        default="small",
        choices=["full", "small", "tiny"],
        help="the resnet50 workload's scale, for `runner run resnet50 --scale` and the builtin step (default small)",
    )
    parser.add_argument(
        "--interval", type=float, default=None, help="telemetry interval in seconds (default 1, 0.5 for standard)"
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for the load workers (needs torch)")
    parser.add_argument(
        "--tool-timeout",
        type=float,
        default=600.0,
        help="seconds each standard tool (nccl-tests, nvbandwidth) may run before it is killed (default 600)",
    )


def resolve_gpus(text: str, count: int) -> list[int]:
    """``all``; ``N`` (a count: the first N GPUs); ``I,J,...`` (indices; ``I,`` for one index)."""
    from runner.cli import UsageError

    text = (text or "all").strip()
    if text == "all":
        return list(range(count))
    bad = UsageError(f"runner burnin: --gpus {text!r} is not 'all', a count N or indices such as 0,2 (one index: 3,)")
    if "," not in text:
        if not text.isdigit() or int(text) == 0:
            raise bad
        if int(text) > count:
            raise UsageError(f"runner burnin: --gpus {text}: this host has {count} GPU(s)")
        return list(range(int(text)))
    try:
        idx = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise bad from None
    if not idx or len(set(idx)) != len(idx):
        raise bad
    if any(not 0 <= i < count for i in idx):
        raise UsageError(f"runner burnin: --gpus {text}: this host has GPUs 0..{count - 1}")
    return idx


def interconnect_after(selected: list[int]) -> dict:
    """The NVLink, PCIe replay and AER counters read again after the load (runner.probe_link)."""
    try:
        return link_counters(probe.gather(selected))
    except Exception as exc:  # a GPU that fell off the bus during the load; the XID scan tells more
        return {"collected_at": None, "gpus": {}, "error": f"counters not read after the load: {exc}"}


def _load_phases(args, cfg: dict, selected: list[int], out: Path, notes: list[str], tools: dict) -> list[dict]:
    """Per GPU, then all GPUs at once (with NCCL), the standard tools, then the sustained load: the records."""
    records: list[dict] = []
    mode = args.resnet
    if mode == "auto":
        has, why = runner_has_resnet(args.python)
        mode = "runner" if has else "builtin"
        notes.append(f"resnet50: {mode} ({why})")
    builtin = mode == "builtin"
    # 1. per GPU, one after another
    for i in selected:
        records += run_workers(args.python, [([i], i, gpu_tests(cfg, builtin, args.resnet_scale))], out, "solo", False)
        if mode == "runner":
            rec = runner_resnet(args.python, [i], out, cfg, "solo", args.resnet_scale)
            if rec["detail"].get("exit_code") == 2 and args.resnet == "auto":
                # the runner refused the command line: measure with the builtin loop instead
                notes.append(f"resnet50 on GPU {i}: {rec['error']}; used the builtin loop")
                records += run_workers(
                    args.python,
                    [([i], i, [{"test": "resnet50", "seconds": cfg["resnet_s"], "scale": args.resnet_scale}])],
                    out,
                    "solo",
                    False,
                )
            else:
                records.append(rec)
    # 2. all GPUs at once
    if len(selected) > 1:
        records += run_workers(
            args.python,
            [([i], i, gpu_tests(cfg, builtin, args.resnet_scale)) for i in selected],
            out,
            "concurrent",
            True,
        )
        if mode == "runner":
            rec = runner_resnet(args.python, selected, out, cfg, "host", args.resnet_scale)
            if rec["detail"].get("exit_code") == 2 and args.resnet == "auto":
                notes.append(f"resnet50 on all GPUs: {rec['error']}; not measured")
            else:
                records.append(rec)
        nccl = run_workers(
            args.python, [(selected, None, [{"test": "nccl", "iters": cfg["nccl_iters"]}])], out, "host", False
        )
        records += nccl
    else:
        notes.append("one GPU: no all-GPU phase and no NCCL test")
    # the standard tools, where provisioning built them (runner.bwtools)
    tools["nvbandwidth"] = bwtools.run_nvbandwidth(selected, out, timeout_s=args.tool_timeout)
    tools["nccl_tests"] = (
        bwtools.run_nccl_tests(selected, out, timeout_s=args.tool_timeout)
        if len(selected) > 1
        else {"ran": False, "error": "one GPU: no all-reduce"}
    )
    # 3. sustained load
    minutes = args.minutes if args.minutes is not None else cfg["burn_minutes"]
    if args.level == "burn-in" and minutes:
        burn = run_workers(
            args.python,
            [([i], i, [{"test": "matmul", "dtype": "bf16", "seconds": minutes * 60}]) for i in selected],
            out,
            "burn",
            True,
        )
        for r in burn:
            if r.get("test") == "matmul":
                r["test"] = "burn"
                r["unit"] = "TFLOP/s"
        records += burn
    return records


def _refuse_bad_args(args, out: Path) -> None:
    """UsageError (exit 2, nothing written) for an --out that is a link or not empty, or a value out of range."""
    from runner.cli import UsageError

    if os.path.islink(out):
        raise UsageError(f"runner burnin: --out {out} is a symbolic link; the runner writes only into a real folder")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"runner burnin: --out {out} exists and is not an empty directory")
    if args.minutes is not None and not (0 < args.minutes <= MAX_BURN_MINUTES):
        raise UsageError(f"runner burnin: --minutes {args.minutes:g} is not in (0, {MAX_BURN_MINUTES}]")
    if args.interval is not None and not (0.05 <= args.interval <= 60):
        raise UsageError(f"runner burnin: --interval {args.interval:g} is not in [0.05, 60]")
    if not (0 < args.tool_timeout <= 7 * 24 * 3600):
        raise UsageError(f"runner burnin: --tool-timeout {args.tool_timeout:g} is not in (0, 604800] seconds")


def main(args) -> int:

    cfg = LEVELS[args.level]
    out = Path(args.out)
    _refuse_bad_args(args, out)
    t0 = time.time()
    start_iso = now_iso()
    probe_all = probe.gather()
    count = len(probe_all["gpus"])
    if count == 0:
        out.mkdir(parents=True, exist_ok=True)
        xid = xid_scan([])
        doc = no_gpu_document(args.level, probe_all, xid, start_iso, t0)
        (out / "telemetry.csv").write_text(",".join(telemetry.COLUMNS) + "\n")
        write_outputs(out, doc)
        print(json.dumps(doc, sort_keys=True) if args.json else human_summary(doc))
        print(f"runner burnin: {doc['reason']}", file=sys.stderr)
        return 1
    selected = resolve_gpus(args.gpus, count)
    probe_doc = probe.gather(selected)
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    notes: list[str] = []

    interval = args.interval or (0.5 if args.level == "standard" else 1.0)
    sampler = telemetry.Sampler(selected, out / "telemetry.csv", interval_s=interval)
    sampler.start()
    records: list[dict] = []
    tools: dict = {}
    try:
        idle_start = time.time()
        time.sleep(cfg["idle_s"])
        idle_window = (idle_start, time.time())
        xid_before = xid_scan(probe_doc["gpus"])
        if cfg["load"]:
            records += _load_phases(args, cfg, selected, out, notes, tools)
    finally:
        sampler.stop()
    xid_after = xid_scan(probe_doc["gpus"])
    rows = telemetry.read_csv(out / "telemetry.csv")
    records = [r for r in records if r.get("test") != "device" or not r.get("ok")]
    doc = build_document(
        args.level,
        selected,
        probe_doc,
        xid_before,
        xid_after,
        records,
        rows,
        idle_window,
        sampler,
        start_iso,
        t0,
        notes,
    )
    doc["interconnect_after"] = interconnect_after(selected)
    doc["tools"] = tools
    write_outputs(out, doc)
    print(json.dumps(doc, sort_keys=True) if args.json else human_summary(doc))
    if doc["outcome"] != "completed":
        print(f"runner burnin: {doc['reason']}", file=sys.stderr)
        return 1
    return 0
