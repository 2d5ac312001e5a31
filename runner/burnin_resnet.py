"""ResNet-50 images/s of ``runner burnin --resnet runner``: ``python -m runner run resnet50 --mode
throughput`` on the GPUs asked, read back from the run directory's status.json as one burn-in record."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import time
from pathlib import Path


def runner_resnet(python: str, gpus: list[int], out: Path, cfg: dict, phase: str, scale: str) -> dict:
    """``python -m runner run resnet50 --mode throughput`` on ``gpus``; one record."""
    run_dir = out / f"resnet50-{phase}-{'-'.join(map(str, gpus))}"
    # --gpus: a lone number is a count for `runner run`; one index is written "I,"
    gpu_arg = "1" if gpus == [0] else ",".join(map(str, gpus)) + ("," if len(gpus) == 1 else "")
    argv = [
        python,
        "-m",
        "runner",
        "run",
        "resnet50",
        "--mode",
        "throughput",
        "--scale",
        scale,
        "--gpus",
        gpu_arg,
        "--out",
        str(run_dir),
        "--max-minutes",
        str(cfg["resnet_max_minutes"]),
    ]
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    rec = {
        "test": "resnet50",
        "dtype": None,
        "gpu": gpus[0] if len(gpus) == 1 else None,
        "gpus": gpus,
        "unit": "images/s",
        "phase": phase,
        "start": time.time(),
        "detail": {"source": "runner run", "argv": argv[1:], "run_dir": run_dir.name},
    }
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=cfg["resnet_max_minutes"] * 60 + 300, env=env)
        rc, err = p.returncode, (p.stderr.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        rc, err = None, "runner run resnet50 did not end in time"
    rec["end"] = time.time()
    status = None
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        pass
    value = ((status or {}).get("result") or {}).get("samples_per_s")
    rec["detail"]["exit_code"] = rc
    if status:
        rec["detail"].update(
            outcome=status.get("outcome"), reason=status.get("reason"), precision=status.get("precision")
        )
        if status.get("start") and status.get("end"):
            for key in ("start", "end"):
                try:
                    rec[key] = _dt.datetime.fromisoformat(status[key].replace("Z", "+00:00")).timestamp()
                except ValueError:
                    pass
    ok = rc == 0 and isinstance(value, (int, float))
    rec.update(
        value=value if ok else None,
        ok=ok,
        error=None if ok else f"runner run resnet50 exit {rc}: {(status or {}).get('reason') or err}",
    )
    return rec
