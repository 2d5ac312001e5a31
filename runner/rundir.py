"""The run directory: the files a run leaves and how they are written.

A run directory is complete when ``status.json`` exists and ``SHA256SUMS``
verifies (runner/README.md). Everything here is plain Python: the supervisor
uses it without importing a deep-learning framework.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from pathlib import Path

# Version of the contract documented in runner/README.md (command line + files).
CONTRACT_VERSION = 1
# Version of the status.json layout.
STATUS_SCHEMA = 1
# Version of the manifest.json layout.
MANIFEST_SCHEMA = 1

MLLOG = "mllog.log"
STDOUT = "stdout.log"
TELEMETRY = "telemetry.csv"
MANIFEST = "manifest.json"
STATUS = "status.json"
SUMS = "SHA256SUMS"

OUTCOMES = ("success", "target_missed", "failed", "aborted")

TELEMETRY_COLUMNS = (
    "time_s", "gpu", "uuid", "power_w", "temp_c", "sm_clock_mhz",
    "mem_clock_mhz", "util_gpu_pct", "util_mem_pct", "mem_used_mib",
    "throttle_reasons", "pcie_gen", "pcie_width",
)


def utc_now() -> str:
    """Current UTC time as ``2026-12-02T18:00:00.000Z``."""
    return iso(_dt.datetime.now(_dt.timezone.utc).timestamp())


def iso(unix_s: float) -> str:
    t = _dt.datetime.fromtimestamp(unix_s, _dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def write_json(path: Path, obj) -> None:
    """Write JSON atomically (temporary file + rename), flushed to disk."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_telemetry_header(path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(TELEMETRY_COLUMNS) + "\n")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _listed_files(run_dir: Path) -> list[str]:
    out = []
    for p in sorted(run_dir.rglob("*")):
        if p.is_file() and p.name != SUMS and not p.name.endswith(".tmp"):
            out.append(p.relative_to(run_dir).as_posix())
    return out


def write_sums(run_dir: Path) -> None:
    """Write SHA256SUMS (``sha256sum -c`` format) for every other file."""
    run_dir = Path(run_dir)
    lines = [f"{sha256_file(run_dir / rel)}  {rel}\n" for rel in _listed_files(run_dir)]
    tmp = run_dir / (SUMS + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, run_dir / SUMS)


def verify(run_dir: Path) -> list[str]:
    """Problems that make ``run_dir`` incomplete; an empty list when it is complete."""
    run_dir = Path(run_dir)
    problems = []
    if not (run_dir / STATUS).is_file():
        problems.append(f"{run_dir}: no {STATUS}")
    sums = run_dir / SUMS
    if not sums.is_file():
        return problems + [f"{run_dir}: no {SUMS}"]
    listed = set()
    for n, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            problems.append(f"{sums}:{n}: malformed line")
            continue
        listed.add(rel)
        p = run_dir / rel
        if not p.is_file():
            problems.append(f"{sums}:{n}: {rel} is missing")
        elif sha256_file(p) != digest:
            problems.append(f"{sums}:{n}: {rel} does not match its sum")
    for rel in _listed_files(run_dir):
        if rel not in listed:
            problems.append(f"{sums}: {rel} is not listed")
    return problems


def status_document(*, runner_version: str, workload: str, benchmark: str,
                    framework: str, mode: str, scale: str, seed: int,
                    precision: str, gpus: list[int], world_size: int,
                    nnodes: int, node_rank: int, start: str, end: str,
                    exit_code: int, outcome: str, reason: str,
                    result: dict) -> dict:
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    return {
        "schema": STATUS_SCHEMA,
        "runner_version": runner_version,
        "workload": workload,
        "benchmark": benchmark,
        "framework": framework,
        "mode": mode,
        "scale": scale,
        "seed": seed,
        "precision": precision,
        "gpus": list(gpus),
        "world_size": world_size,
        "nnodes": nnodes,
        "node_rank": node_rank,
        "start": start,
        "end": end,
        "exit_code": exit_code,
        "outcome": outcome,
        "reason": reason,
        "result": result,
    }
