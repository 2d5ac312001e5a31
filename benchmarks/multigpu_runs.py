"""One ``runner run`` of benchmarks/multigpu.py and what it left behind.

The environment of every child (NVLink multicast off), the run with its
GPULAB_RUN_TOKEN tag and deadline, the processes still carrying the tag once
the runner has exited, and the MLLOG file's run-level events counted (a
second writer would log them twice).
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
MIN_START_S = 45.0  # no run starts with less time left before the deadline
GRACE_S = 60.0  # after --max-minutes: the runner's abort grace, then the run directory
ONCE = ("init_start", "init_stop", "run_start", "run_stop", "submission_benchmark", "seed", "global_batch_size")


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env.pop(k, None)  # the runner derives them from --cache-dir
    env.update(NO_MULTICAST)
    env.update(extra or {})
    return env


def run_env(args, extra: dict | None = None) -> dict:
    env = child_env(extra)
    if args.inductor:
        env["GPULAB_INDUCTOR"] = args.inductor
    return env


def tagged_pids(token: str) -> list[int]:
    """Live processes whose environment holds GPULAB_RUN_TOKEN=token (this process excluded)."""
    want = f"GPULAB_RUN_TOKEN={token}".encode()
    pids = []
    for env_file in glob.glob("/proc/[0-9]*/environ"):
        pid = int(env_file.split("/")[2])
        if pid == os.getpid():
            continue
        try:
            if want in Path(env_file).read_bytes().split(b"\0"):
                stat = Path(f"/proc/{pid}/stat").read_text()
                if ") Z " not in stat:
                    pids.append(pid)
        except OSError:
            continue
    return sorted(pids)


def mllog_check(run_dir: Path, epochs: int | None) -> dict:
    """Events a second writer would duplicate: one of each run-level event, one epoch_start per epoch."""
    counts: dict[str, int] = {}
    bad_lines = 0
    try:
        lines = (run_dir / "mllog.log").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            key = json.loads(line.split(":::MLLOG ", 1)[1])["key"]
        except (IndexError, ValueError, KeyError, TypeError):
            bad_lines += 1
            continue
        counts[key] = counts.get(key, 0) + 1
    dup = {k: counts.get(k, 0) for k in ONCE if counts.get(k, 0) != 1}
    if epochs is not None and counts.get("epoch_start", 0) != epochs:
        dup["epoch_start"] = counts.get("epoch_start", 0)
    return {
        "events": sum(counts.values()),
        "run_start": counts.get("run_start", 0),
        "not_once": dup,
        "unparsed_lines": bad_lines,
        "ok": bool(lines) and not dup and not bad_lines,
    }


def run_one(args, name: str, mode: str, scale: str, gpus: int, end: float | None, tag: str) -> dict:
    row = {"workload": name, "mode": mode, "scale": scale, "gpus": gpus}
    left = None if end is None else end - time.time()
    if left is not None and left < MIN_START_S:
        row.update(outcome="not_started", reason=f"deadline: {max(left, 0):.0f} s left")
        return row
    out = args.out / "runs" / f"{name}-{mode}-{scale}-{tag}"
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
        "--seed",
        str(args.seed),
        "--cache-dir",
        str(args.cache_dir),
        "--out",
        str(out),
    ]
    if args.device == "cpu":
        cmd += ["--gpus", "0"] + (["--cpu-procs", str(gpus)] if gpus > 1 else [])
    else:
        cmd += ["--gpus", str(gpus)]
    if mode == "throughput" and args.measure_seconds:
        cmd += ["--measure-seconds", f"{args.measure_seconds:g}"]
    limit = None if left is None else max((left - GRACE_S / 2) / 60, 0.2)
    if args.run_minutes:
        limit = min(limit or args.run_minutes, args.run_minutes)
    if limit is not None:
        cmd += ["--max-minutes", f"{limit:.2f}"]
    row["command"] = " ".join(["python"] + cmd[1:])
    token = f"multigpu-{secrets.token_hex(6)}"
    t0 = time.time()
    try:
        p = subprocess.run(
            cmd,
            cwd=ROOT,
            env=run_env(args, {"GPULAB_RUN_TOKEN": token}),
            capture_output=True,
            text=True,
            timeout=None if limit is None else limit * 60 + GRACE_S,
        )
        row["exit_code"], said = p.returncode, (p.stderr.strip() or p.stdout.strip()).splitlines()
    except subprocess.TimeoutExpired:
        row["exit_code"], said = None, ["runner run did not end in time"]
    row["wall_s"] = round(time.time() - t0, 1)
    time.sleep(0.5)
    row["leftover_pids"] = tagged_pids(token)
    try:
        st = json.loads((out / "status.json").read_text())
    except (OSError, ValueError):
        row.update(outcome="failed", reason=(said or ["no status.json"])[-1][:400], log_tail=_tail(out / "stdout.log"))
        return row
    res = st.get("result") if isinstance(st.get("result"), dict) else {}
    row.update(
        outcome=st.get("outcome"),
        reason=st.get("reason"),
        world_size=st.get("world_size"),
        precision=st.get("precision"),
        run_dir=str(out.relative_to(args.out)),
    )
    for key in (
        "epochs",
        "quality",
        "target",
        "time_to_train_s",
        "samples_per_s",
        "sample_unit",
        "steps",
        "batch_per_process",
        "measured_s",
        "time_to_first_step_s",
    ):
        if key in res:
            row[key] = res[key]
    if st.get("outcome") != "success":
        row["log_tail"] = _tail(out / "stdout.log")
    if gpus > 1:
        log = _tail(out / "stdout.log", 2000)
        row["ranks_ended"] = [r for r in range(gpus) if f"[runner] rank {r} ended: {st.get('outcome')}" in log]
    return row


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-200000 if lines > 100 else -20000 :]
