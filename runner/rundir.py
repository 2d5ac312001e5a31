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

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
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
HEALTH = "health.json"  # a failed or aborted run: the health document after it (runner.health)
XIDS = "xid.json"  # a GPU run during which the kernel log gained XID events: those events
# One line of SHA256SUMS: what `sha256sum` writes in text mode ("<sha256>  <path>",
# the runner's own) or in binary mode ("<sha256> *<path>", `sha256sum -b`). Both
# verify with `sha256sum -c` and hash the same bytes on Linux, so both are accepted.
SUMS_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")

OUTCOMES = ("success", "target_missed", "failed", "aborted")

TELEMETRY_COLUMNS = (
    "time_s",
    "gpu",
    "uuid",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "util_gpu_pct",
    "util_mem_pct",
    "mem_used_mib",
    "throttle_reasons",
    "pcie_gen",
    "pcie_width",
)


def utc_now() -> str:
    """Current UTC time as ``2026-12-02T18:00:00.000Z``."""
    return iso(_dt.datetime.now(_dt.timezone.utc).timestamp())


def iso(unix_s: float) -> str:
    t = _dt.datetime.fromtimestamp(unix_s, _dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


# ---------------------------------------------------------------- writing, never through a link
# Every file of a run directory is opened with O_NOFOLLOW (a symbolic link planted at its name is an
# error, never followed) and must be a regular file (a FIFO planted there is refused, not blocked on);
# whole files are written to a fresh temporary name (O_EXCL) and renamed into place (``new_file``: the one
# such writer; the controller's lab.core.writes uses it too, as lab.core may import this module).

RUN_FILES = (MLLOG, STDOUT, TELEMETRY, MANIFEST, STATUS, SUMS)
_OPEN = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def open_file(path: Path | str, append: bool = False, binary: bool = False, **kwargs):
    """``open(path, "w"/"a"[+"b"])`` that refuses a link or a non-regular file at ``path`` (OSError)."""
    fd = os.open(path, _OPEN | (os.O_APPEND if append else 0), 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        if not append:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    if binary:
        return os.fdopen(fd, "ab" if append else "wb", **kwargs)
    kwargs.setdefault("encoding", "utf-8")
    return os.fdopen(fd, "a" if append else "w", **kwargs)


@contextlib.contextmanager
def new_file(path: Path | str, mode: int = 0o644, sync: bool = True):
    """The one way gpulab writes a whole file (the runner here, the controller through lab.core.writes, the
    compiled-artifact store through lab.sweep.compiled): a binary file object on a fresh temporary name beside
    ``path`` (O_CREAT | O_EXCL | O_NOFOLLOW: never a name planted there, never through a link), flushed to disk
    (``sync``) and renamed over ``path`` when the block ends (a rename replaces a name, it never writes through
    a link there); on an error the temporary file is removed and ``path`` is as it was. OSError otherwise."""
    path = Path(path)
    for _ in range(16):
        tmp = path.with_name(f".{path.name[:200]}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except FileExistsError:  # a name planted there (a file, a link): take another
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return
    raise OSError(errno.EEXIST, "no free temporary name", str(path))


def write_new(path: Path | str, data: bytes, mode: int = 0o644, sync: bool = True) -> None:
    """Write ``data`` as a whole file at ``path`` through ``new_file``."""
    with new_file(path, mode, sync) as f:
        f.write(data)


def run_dir_problem(out: Path | str) -> str | None:
    """Why ``out`` cannot be a run directory: a link or a non-folder there, or a link or non-regular file
    where one of the run's files belongs; None when it can (absent, or a real folder)."""
    out = Path(out)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{out} cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return f"{out} is a symbolic link; the runner writes only into a real folder"
    if not stat.S_ISDIR(st.st_mode):
        return f"{out} exists and is not a folder"
    for name in RUN_FILES:
        try:
            st = os.lstat(out / name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{out / name} cannot be read ({exc.strerror or exc})"
        if stat.S_ISLNK(st.st_mode):
            return f"{out / name} is a symbolic link; the runner does not write through links"
        if not stat.S_ISREG(st.st_mode):
            return f"{out / name} exists and is not a regular file"
    return None


def write_json(path: Path, obj) -> None:
    """Write JSON atomically (a fresh temporary file + rename), flushed to disk; never through a link."""
    write_new(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def write_telemetry_header(path: Path) -> None:
    with open_file(path) as f:
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
        if p.is_file() and not p.is_symlink() and p.name != SUMS and not p.name.endswith(".tmp"):
            out.append(p.relative_to(run_dir).as_posix())
    return out


def write_sums(run_dir: Path) -> None:
    """Write SHA256SUMS (``sha256sum -c`` text format) for every other file."""
    run_dir = Path(run_dir)
    lines = [f"{sha256_file(run_dir / rel)}  {rel}\n" for rel in _listed_files(run_dir)]
    write_new(run_dir / SUMS, "".join(lines).encode("utf-8"))


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


def status_document(
    *,
    runner_version: str,
    workload: str,
    benchmark: str,
    framework: str,
    mode: str,
    scale: str,
    seed: int,
    precision: str,
    gpus: list[int],
    world_size: int,
    nnodes: int,
    node_rank: int,
    start: str,
    end: str,
    exit_code: int,
    outcome: str,
    reason: str,
    result: dict,
) -> dict:
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
