"""The run directory: the files a run leaves and how they are written.

A run directory is complete when ``status.json`` exists and ``SHA256SUMS``
verifies (runner/README.md). Everything here is plain Python: the supervisor
uses it without importing a deep-learning framework.

This module owns the run-directory contract: the file names, the schema
versions and the one SHA256SUMS grammar (``SUMS_LINE``). The runner writes
with it; the controller (lab.results.checksums) reads and verifies with the same
grammar, so the two sides cannot drift apart.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
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
HEALTH = "health.json"     # a failed or aborted run: the health document after it (runner.health)
XIDS = "xid.json"          # a GPU run during which the kernel log gained XID events: those events
# One line of SHA256SUMS: what `sha256sum` writes in text mode ("<sha256>  <path>",
# the runner's own) or in binary mode ("<sha256> *<path>", `sha256sum -b`). Both
# verify with `sha256sum -c` and hash the same bytes on Linux, so both are accepted.
SUMS_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")

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
    """Write SHA256SUMS (``sha256sum -c`` text format) for every other file."""
    run_dir = Path(run_dir)
    lines = [f"{sha256_file(run_dir / rel)}  {rel}\n" for rel in _listed_files(run_dir)]
    tmp = run_dir / (SUMS + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, run_dir / SUMS)


def sums_entry(line: str) -> tuple[str, str] | None:
    """(sha256 in lower case, relative path) of one SHA256SUMS line; None when
    it is malformed or names a path that leaves the run directory."""
    m = SUMS_LINE.match(line)
    if not m:
        return None
    rel = m.group(2)
    if rel.startswith("/") or ".." in Path(rel).parts or "\0" in rel:
        return None
    return m.group(1).lower(), rel


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
