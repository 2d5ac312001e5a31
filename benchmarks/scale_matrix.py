"""Every workload at every test scale through the runner's CLI: train to target, then throughput.

Runs ``python -m runner run W --mode ttt --scale S`` for each workload and
each of ``--ttt-scales`` (default tiny,small), then ``--mode throughput`` for
each of ``--throughput-scales`` (default small; add full for the reference
model size), one run at a time on one GPU (``--gpus 1``; ``--device cpu``:
``--gpus 0``), all sharing one compiled-kernel cache (``--cache-dir``, the
runner's option: a later run of the same graph compiles nothing). Each run's
``status.json`` gives the figures. Output, rewritten after every run:

    {"_meta": {date, command, torch, gpu, driver, host, cache_dir, cache_was_empty, deadline_s, ...},
     "runs": [{workload, mode, scale, outcome, reason, exit_code, epochs, quality, target,
               time_to_first_step_s, time_to_train_s, samples_per_s, sample_unit, precision,
               wall_s, command, log_tail (when it did not succeed)}],
     "summary": {outcome: count}}

    python benchmarks/scale_matrix.py --out matrix.json [--workloads resnet50,ssd,...]
        [--ttt-scales tiny,small] [--throughput-scales small[,full]] [--device cuda|cpu]
        [--seed 1] [--cache-dir DIR] [--workdir DIR] [--deadline S] [--max-minutes M]
        [--measure-seconds S] [--jobs N]

``--jobs N`` runs N at a time: the outcomes are the same, the times are not
those of a run alone (``_meta.jobs`` says so). ``--deadline`` bounds the
whole matrix: a run gets ``--max-minutes`` = the time left (the runner then
aborts it and still finishes its run directory), no run starts with less than
45 s left, and the JSON names the runs not started.
Exit 0 when every run succeeded, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from benchcommon import recorded_platform, workload_names  # noqa: E402

SCALES = ("tiny", "small", "full")
MIN_START_S = 45.0  # no run starts with less time left before the deadline
GRACE_S = 60.0  # after --max-minutes: the runner's abort grace, then the run directory


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env.pop(k, None)  # the runner derives them from --cache-dir
    return env


def plan(workloads, ttt_scales, throughput_scales) -> list[tuple[str, str, str]]:
    """(workload, mode, scale): every ttt scale first (all workloads), then throughput."""
    return [(w, "ttt", s) for s in ttt_scales for w in workloads] + [
        (w, "throughput", s) for s in throughput_scales for w in workloads
    ]


def command(args, name, mode, scale, out: Path, max_minutes: float | None) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "run",
        name,
        "--mode",
        mode,
        "--scale",
        scale,
        "--gpus",
        "1" if args.device == "cuda" else "0",
        "--seed",
        str(args.seed),
        "--cache-dir",
        str(args.cache_dir),
        "--out",
        str(out),
    ]
    if mode == "throughput" and args.measure_seconds:
        cmd += ["--measure-seconds", str(args.measure_seconds)]
    if max_minutes is not None:
        cmd += ["--max-minutes", f"{max_minutes:.2f}"]
    return cmd


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-4000:]


def run_one(args, name, mode, scale, end: float | None) -> dict:
    """One ``runner run``; its figures from status.json."""
    row = {"workload": name, "mode": mode, "scale": scale}
    left = None if end is None else end - time.time()
    if left is not None and left < MIN_START_S:
        row.update(outcome="not_started", reason=f"deadline: {max(left, 0):.0f} s left")
        return row
    limit = args.max_minutes
    if left is not None:
        limit = min(limit or left / 60, max((left - GRACE_S / 2) / 60, 0.2))
    out = args.workdir / f"{name}-{mode}-{scale}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = command(args, name, mode, scale, out, limit)
    row["command"] = " ".join(["python"] + cmd[1:])
    t0 = time.time()
    timeout = None if limit is None else limit * 60 + GRACE_S
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
        row["exit_code"] = p.returncode
        said = (p.stderr.strip() or p.stdout.strip()).splitlines()
    except subprocess.TimeoutExpired:
        row["exit_code"], said = None, [f"runner run did not end within {timeout:.0f} s"]
    row["wall_s"] = round(time.time() - t0, 1)
    try:
        st = json.loads((out / "status.json").read_text())
    except (OSError, ValueError):
        row.update(
            outcome="failed",
            reason=(said or ["no status.json"])[-1][:400],
            log_tail=_tail(out / "stdout.log") or "\n".join(said[-25:]),
        )
        return row
    res = st.get("result") if isinstance(st.get("result"), dict) else {}
    row.update(outcome=st.get("outcome"), reason=st.get("reason"), precision=st.get("precision"))
    for key in (
        "epochs",
        "quality",
        "target",
        "time_to_first_step_s",
        "time_to_train_s",
        "samples_per_s",
        "sample_unit",
        "steps",
        "batch_per_process",
    ):
        if key in res:
            row[key] = res[key]
    if st.get("outcome") != "success":
        row["log_tail"] = _tail(out / "stdout.log")
    return row


def _platform(args, runs_dir: Path) -> dict:
    """torch, GPU and driver as the runner's own probe recorded them (manifest.json of a run)."""
    return recorded_platform(runs_dir, ("driver", "cuda_driver"))


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--workloads", default=None, help="comma-separated (default: every workload of the runner's catalogue)"
    )
    ap.add_argument("--ttt-scales", default=None, help="ttt runs (default: tiny,small on cuda, tiny on cpu; 'none')")
    ap.add_argument(
        "--throughput-scales", default=None, help="throughput runs (default: small on cuda, tiny on cpu; 'none')"
    )
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when a GPU is seen")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache-dir", default=None, help="compiled-kernel cache of every run (default: WORKDIR/cache)")
    ap.add_argument("--workdir", default=None, help="run directories (default: a new temporary folder)")
    ap.add_argument("--deadline", type=float, default=None, help="seconds for the whole matrix")
    ap.add_argument("--max-minutes", type=float, default=None, help="limit of each run")
    ap.add_argument("--measure-seconds", type=float, default=None, help="throughput runs' timed seconds")
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at a time (default 1; more checks outcomes sooner, but the times are then shared)",
    )
    ap.add_argument("--out", default="scale_matrix.json", help="JSON output file")
    args = ap.parse_args(argv)
    if args.device is None:
        args.device = "cuda" if shutil.which("nvidia-smi") and _gpu_seen() else "cpu"
    cuda = args.device == "cuda"
    known = workload_names()
    args.workloads = _list(args.workloads or ",".join(known), known, "--workloads")
    args.ttt_scales = _list(args.ttt_scales or ("tiny,small" if cuda else "tiny"), SCALES, "--ttt-scales")
    args.throughput_scales = _list(
        args.throughput_scales or ("small" if cuda else "tiny"), SCALES, "--throughput-scales"
    )
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be at least 1")
    if "full" in args.ttt_scales:
        raise ValueError("--ttt-scales: full trains on the prepared data sets for hours; use runner run --data")
    for opt in ("deadline", "max_minutes", "measure_seconds"):
        v = getattr(args, opt)
        if v is not None and not v > 0:
            raise ValueError(f"--{opt.replace('_', '-')} {v}: must be positive")
    return args


def _gpu_seen() -> bool:
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


def _list(text: str, known: tuple, what: str) -> list[str]:
    if text.strip().lower() == "none":
        return []
    items = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in items if w not in known]
    if bad or not items:
        raise ValueError(f"{what}: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(known)}, or none)")
    return items


def main(argv=None) -> int:
    t_start = time.time()
    try:
        args = parse(argv)
    except ValueError as exc:
        print(f"scale_matrix.py: {exc}", file=sys.stderr)
        return 2
    end = t_start + args.deadline if args.deadline else None
    args.workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpulab-matrix-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.cache_dir = Path(args.cache_dir) if args.cache_dir else args.workdir / "cache"
    was_empty = not (args.cache_dir.is_dir() and any(args.cache_dir.iterdir()))
    out = Path(args.out)
    doc = {
        "_meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", "benchmarks/scale_matrix.py"] + sys.argv[1:]),
            "device": args.device,
            "seed": args.seed,
            "cache_dir": str(args.cache_dir),
            "cache_was_empty": was_empty,
            "deadline_s": args.deadline,
            "jobs": args.jobs,
        },
        "runs": [],
    }
    runs = plan(args.workloads, args.ttt_scales, args.throughput_scales)
    done: dict[int, dict] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        name, mode, scale = runs[i]
        row = run_one(args, name, mode, scale, end)
        figures = ", ".join(
            f"{k} {row[k]}"
            for k in ("epochs", "quality", "time_to_first_step_s", "time_to_train_s", "samples_per_s")
            if row.get(k) is not None
        )
        with lock:
            done[i] = row
            doc["runs"] = [done[k] for k in sorted(done)]
            print(
                f"[matrix] {name} {mode} {scale}: {row['outcome']}"
                + (f" ({figures})" if figures else "")
                + ("" if row["outcome"] == "success" else f": {row.get('reason')}"),
                flush=True,
            )
            doc["_meta"].update(_platform(args, args.workdir))
            doc["summary"] = {
                o: sum(1 for r in doc["runs"] if r["outcome"] == o) for o in sorted({r["outcome"] for r in doc["runs"]})
            }
            doc["_meta"]["elapsed_s"] = round(time.time() - t_start, 1)
            out.write_text(json.dumps(doc, indent=1) + "\n")

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for f in [pool.submit(one, i) for i in range(len(runs))]:
            f.result()
    if not doc["runs"]:
        out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"[matrix] wrote {out}: {doc.get('summary', {})}", flush=True)
    return 0 if doc["runs"] and all(r["outcome"] == "success" for r in doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
