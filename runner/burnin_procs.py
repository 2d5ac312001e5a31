"""The burn-in's worker processes (``python -m runner.burnin_worker``): one per group of GPUs, each seeing only
its GPUs (numbered as NVML numbers them), started together, waited for within the time its tests may take,
their records read back; a test a worker never reported is a failed record with the worker's last words.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path


def worker_env(gpus: list[int]) -> dict:
    """The environment of a child that sees only ``gpus`` (CUDA numbering them as NVML does) and imports this
    checkout's runner."""
    env = dict(os.environ)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA numbers GPUs as NVML does
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env.setdefault("PYTHONUNBUFFERED", "1")
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _spec_seconds(spec: dict) -> float:
    return float(spec.get("seconds", 0)) + (30 if spec["test"] in ("resnet50", "nccl") else 5)


class Worker:
    """One ``runner.burnin_worker`` child on a set of GPUs."""

    def __init__(
        self,
        python: str,
        gpus: list[int],
        tests: list[dict],
        start_at: float | None,
        log_path: Path,
        label: int | None,
        device: str = "cuda",
    ):
        self.gpus = gpus
        self.label = label
        self.timeout = 120 + sum(_spec_seconds(s) for s in tests) + max(0.0, (start_at or 0) - time.time())
        job = {"gpu": label, "tests": tests, "start_at": start_at, "device": device}
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [python, "-m", "runner.burnin_worker", json.dumps(job)],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=worker_env(gpus),
        )
        self.started = time.time()

    def wait(self) -> tuple[list[dict], str | None]:
        try:
            out, _ = self.proc.communicate(timeout=max(1.0, self.timeout - (time.time() - self.started)))
            error = None if self.proc.returncode == 0 else f"worker exited with {self.proc.returncode}"
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            error = f"worker timed out after {self.timeout:.0f} s and was killed"
        self.log.close()
        records = []
        for line in (out or "").splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass
        return records, error


def _log_tail(path: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-400:]


def run_workers(
    python: str,
    groups: list[tuple[list[int], int | None, list[dict]]],
    out: Path,
    phase: str,
    synchronized: bool,
    device: str = "cuda",
) -> list[dict]:
    """Run one worker per group (GPU list, label, tests); all at once.

    ``device="cpu"`` runs the same tests on the CPU (tests of this machinery only).
    """
    start_at = time.time() + 20 if synchronized and len(groups) > 1 else None
    workers = []
    for gpus, label, tests in groups:
        log = out / "logs" / f"{phase}-{'-'.join(map(str, gpus))}.log"
        workers.append((Worker(python, gpus, tests, start_at, log, label, device), tests, log))
    records = []
    for w, tests, log in workers:
        recs, error = w.wait()
        done = {(r.get("test"), r.get("dtype")) for r in recs}
        for r in recs:
            r["phase"] = phase
        if error:
            tail = _log_tail(log)
            reason = f"{error}: {tail}" if tail else error
            dev = next((r for r in recs if r.get("test") == "device"), None)
            if dev is not None and not dev.get("ok"):
                reason = dev.get("error") or reason
            for spec in tests:  # tests the worker never reported
                if (spec["test"], spec.get("dtype")) not in done:
                    recs.append(
                        {
                            "test": spec["test"],
                            "dtype": spec.get("dtype"),
                            "gpu": w.label,
                            "ok": False,
                            "value": None,
                            "unit": None,
                            "start": None,
                            "end": None,
                            "detail": {},
                            "error": reason,
                            "phase": phase,
                        }
                    )
        records.extend(recs)
    return records
