"""What ``invoke history import`` reads: run directories (through lab.results) and validate.json files.

``read_sources(paths)`` returns plain records, nothing written: one
``RunRecord`` per run directory (node 0's) with the GPUs the run used (UUID
and serial from its manifest's probe), one ``ValidationRecord`` per
validate.json with every check of every host and GPU, and one line per thing
skipped. Every file is read with bounds and checked like any other input;
a folder that holds neither is bad input.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from lab.core import bounded, fields, limits, plaindata
from lab.core.paths import existing
from lab.results import checksums
from lab.results import logreader as lab_results
from lab.core.errors import ConfigError, excerpt
from lab.history import values
from lab.history.models import Run
from lab.results.rundirs import manifest_gpus
from runner.rundir import MANIFEST, STATUS

VALIDATE_FILE = "validate.json"
VALIDATE_KIND = "gpulab-validate"
VALIDATE_SCHEMAS = (1,)
MAX_WALK = 200_000  # folders visited looking for validate.json


@dataclass
class GpuRef:
    index: int
    uuid: str | None = None
    serial: str | None = None
    name: str | None = None


@dataclass
class RunRecord:
    key: str
    fields: dict
    gpus: list[GpuRef] = field(default_factory=list)


@dataclass
class CheckRecord:
    host: str
    name: str
    verdict: str
    gpu: GpuRef | None = None
    value: float | None = None
    value_text: str | None = None
    unit: str | None = None
    expected: str | None = None
    reason: str | None = None
    stack: str | None = None
    at: dt.datetime | None = None


@dataclass
class ValidationRecord:
    key: str
    source: str
    at: dt.datetime | None
    level: str | None
    verdict: str | None
    checks: list[CheckRecord] = field(default_factory=list)


@dataclass
class Sources:
    runs: list[RunRecord] = field(default_factory=list)
    validations: list[ValidationRecord] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def utc(value) -> dt.datetime | None:
    """An ISO-8601 text or unix seconds as an aware UTC datetime within lab.history.values.DATES; None if
    neither (a time that does not parse, or one out of that range, is no time)."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return values.in_range(dt.datetime.fromtimestamp(float(value), dt.timezone.utc))
        if isinstance(value, str) and value and len(value) <= 64 and value.isascii():
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            t = (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)
            return values.in_range(t)
    except (ValueError, OverflowError, OSError, TypeError):
        return None
    return None


def _text(v, n=255) -> str | None:
    """A stored text of at most ``n`` characters; a value of a JSON file that is not a text is stored as JSON
    writes it (``{"a": 1}``, ``true``), not as Python's repr (``{'a': 1}``, ``True``)."""
    if v is None:
        return None
    return (v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False))[:n]


_int = values.whole  # SQL's INTEGER (PostgreSQL's 32 bits); JSON integers may be longer (plaindata: 20 digits)


# ---------------------------------------------------------------- runs


def _run_gpus(rundir: Path, indices) -> list[GpuRef]:
    try:
        manifest = bounded.read_json(rundir / MANIFEST, root=rundir, limit=limits.JSON_BYTES)
    except (bounded.Unreadable, OSError):
        manifest = None
    probe = {g.get("index"): g for g in manifest_gpus(manifest)} if isinstance(manifest, dict) else {}
    out = []
    for i in dict.fromkeys(indices):  # an index listed twice: once
        g = probe.get(i) if isinstance(probe.get(i), dict) else {}
        out.append(
            GpuRef(
                index=i,
                uuid=_text(g.get("uuid"), 96),
                serial=_text(g.get("serial"), 64),
                name=_text(g.get("name"), 128),
            )
        )
    return out


def _run_record(run, out: Sources) -> RunRecord | None:
    rundir = Path(run.source)
    where = values.printable(rundir)
    try:
        key = checksums.run_key(rundir)
        status = bounded.read_json(rundir / STATUS, root=rundir, limit=limits.JSON_BYTES)
    except (bounded.Unreadable, OSError, ValueError) as exc:
        out.skipped.append(f"{where}: {values.printable(getattr(exc, 'reason', exc))}")
        return None
    idx = status.get("gpus") if isinstance(status, dict) else None
    indices = (
        [i for i in idx if _int(i) is not None and limits.GPU_INDEX.lo <= i <= limits.GPU_INDEX.hi]
        if isinstance(idx, list)
        else []
    )
    sweep = rundir.parent.parent.name if os.path.isfile(rundir.parent.parent / "sweep.json") else None
    fields = dict(
        source=str(rundir.resolve()),
        sweep=_text(sweep),
        host=_text(run.host),
        run_name=_text(rundir.name),
        benchmark=_text(run.benchmark, 128),
        device=_text(run.device, 128),
        gpu_count=_int(run.gpus),
        gpu_indices=",".join(str(i) for i in indices),
        stack=run.stack,
        stack_versions=run.stack_versions,
        scale=_text(run.scale, 16),
        mode=_text(run.mode, 16),
        seed=_int(run.seed),
        outcome=run.outcome,
        reason=run.reason,
        samples_per_s=values.finite(run.samples_per_s),
        sample_unit=_text(run.sample_unit, 32),
        ttt_s=values.finite(run.ttt_s),
        elapsed_s=values.finite(run.elapsed_s),
        energy_j=values.finite(run.energy_j),
        avg_power_w=values.finite(run.avg_power_w),
        at=utc(run.start_s),
    )
    gpus = _run_gpus(rundir, indices)
    try:  # a value no database column takes (a folder name that is not UTF-8, say): this run is skipped
        values.checked(Run, dict(fields), where)
        for g in gpus:
            for v in (g.uuid, g.serial, g.name):
                if v is not None:
                    values.clean_text(v, f"{where}: GPU {g.index}")
    except ConfigError as exc:
        out.skipped.append(exc.message)
        return None
    return RunRecord(key=key, fields=fields, gpus=gpus)


def _read_runs(path: Path, out: Sources, required: bool) -> None:
    try:
        found = lab_results.read_runs([path])
    except ConfigError:
        if required:
            raise
        return
    for run in found.runs:
        if run.fmt != "rundir":
            out.skipped.append(f"{run.source}: a plain MLPerf log, not a run directory: not imported")
            continue
        rec = _run_record(run, out)
        if rec:
            out.runs.append(rec)
    out.skipped.extend(f"{s.source}: {s.reason}" for s in found.skipped)


# ---------------------------------------------------------------- validate.json


def _stack_of(host: dict) -> str | None:
    parts = []
    for c in host.get("checks") if isinstance(host.get("checks"), list) else ():
        if not isinstance(c, dict):
            continue
        name, measured = c.get("check"), c.get("measured")
        if name == "stack" and isinstance(measured, dict):
            parts += [f"{k} {v}" for k, v in sorted(measured.items()) if isinstance(v, (str, int, float))]
        elif isinstance(name, str) and name.startswith("stack ") and isinstance(measured, (str, int, float)):
            parts.append(f"{name[6:]} {measured}")
    return ", ".join(parts) or None


def _check(host: str, c, gpu: GpuRef | None, stack, at) -> CheckRecord | None:
    if (
        not isinstance(c, dict)
        or not isinstance(c.get("check"), str)
        or c.get("verdict") not in ("PASS", "WARN", "FAIL")
    ):
        return None
    m = c.get("measured")
    value = values.finite(m)
    vtext = None if value is not None or m is None else (m if isinstance(m, str) else json.dumps(m, default=str))
    return CheckRecord(
        host=host,
        name=c["check"][:128],
        verdict=c["verdict"],
        gpu=gpu,
        value=value,
        value_text=_text(vtext, 4000),
        unit=_text(c.get("unit"), 32),
        expected=_text(c.get("expected"), 4000),
        reason=_text(c.get("reason"), 4000),
        stack=stack,
        at=at,
    )


def read_validation(path: Path) -> ValidationRecord:
    """One validate.json; ConfigError when it is not one this gpulab reads."""
    if not values.text_ok(str(path.resolve())):
        raise ConfigError(
            f"{values.printable(path)}: its path is not valid UTF-8 text (a folder of non-UTF-8 "
            "bytes): rename it to import it"
        )
    try:
        raw = bounded.read_bytes(path, root=path.parent, limit=limits.JSON_BYTES)
        doc = plaindata.loads(raw.decode("utf-8"))
    except bounded.Unreadable as exc:
        raise ConfigError(f"{path}: {exc.reason}") from None
    except ValueError as exc:  # also UnicodeDecodeError; depth and integer size are bounded
        raise ConfigError(f"{path}: not JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict) or doc.get("kind") != VALIDATE_KIND:
        raise ConfigError(f"{path}: not a validate.json (kind {VALIDATE_KIND!r} expected)")
    if doc.get("schema") not in VALIDATE_SCHEMAS:
        raise ConfigError(
            f"{path}: validate.json schema {doc.get('schema')!r} is not one this gpulab reads "
            f"({', '.join(map(str, VALIDATE_SCHEMAS))})"
        )
    hosts = doc.get("hosts")
    if not isinstance(hosts, dict):
        raise ConfigError(f"{path}: 'hosts' is not an object")
    at = utc(doc.get("generated_at"))
    rec = ValidationRecord(
        key=hashlib.sha256(raw).hexdigest(),
        source=str(path.resolve()),
        at=at,
        level=_text(doc.get("level"), 32),
        verdict=_text(doc.get("verdict"), 8),
    )
    for name, h in hosts.items():
        if not isinstance(h, dict):
            raise ConfigError(f"{path}: host {excerpt(ascii(name), 60)} is not an object")
        fields.host_name(name, f"{path}: host")
        host, when, stack = name, utc(h.get("collected_at")) or at, _stack_of(h)
        for c in h.get("checks") if isinstance(h.get("checks"), list) else ():
            if (r := _check(host, c, None, stack, when)) is not None:
                rec.checks.append(r)
        for key, g in (h.get("gpus") or {}).items() if isinstance(h.get("gpus"), dict) else ():
            index = g.get("index") if isinstance(g, dict) else None
            if _int(index) is None or not limits.GPU_INDEX.lo <= index <= limits.GPU_INDEX.hi:
                # its checks would be lost without a word: the file is refused, as a host that is no object is
                lo, hi = limits.GPU_INDEX.lo, limits.GPU_INDEX.hi
                what = f"index {excerpt(ascii(index), 20)} is not a whole number from {lo} to {hi}"
                raise ConfigError(
                    f"{path}: host {name}: GPU {excerpt(ascii(key), 20)}: "
                    + (what if isinstance(g, dict) else "is not an object")
                )
            ref = GpuRef(
                index=g["index"],
                uuid=_text(g.get("uuid"), 96),
                serial=_text(g.get("serial"), 64),
                name=_text(g.get("name"), 128),
            )
            for c in g.get("checks") if isinstance(g.get("checks"), list) else ():
                if (r := _check(host, c, ref, stack, when)) is not None:
                    rec.checks.append(r)
    _texts_ok(path, rec)
    return rec


def _texts_ok(path: Path, rec: ValidationRecord) -> None:
    """ConfigError naming the file where a text of it is one no database stores (not valid UTF-8, a NUL)."""
    for v in (rec.source, rec.level, rec.verdict):
        if v is not None:
            values.clean_text(v, str(path))
    for c in rec.checks:
        for v in (
            c.host,
            c.name,
            c.value_text,
            c.unit,
            c.expected,
            c.reason,
            c.stack,
            *((c.gpu.uuid, c.gpu.serial, c.gpu.name) if c.gpu else ()),
        ):
            if v is not None:
                values.clean_text(v, f"{path}: host {c.host}: {c.name[:60]}")


def _validate_files(root: Path) -> list[Path]:
    found, seen = [], 0
    for folder, dirs, files in bounded.walk(root):  # symlinked folders are not followed
        seen += 1
        if seen > MAX_WALK:
            raise ConfigError(f"{root}: more than {MAX_WALK} folders: import a smaller tree")
        if STATUS in files:
            dirs[:] = []  # a run directory: lab.results reads it
            continue
        dirs.sort()
        if VALIDATE_FILE in files:  # a link too: read_sources says it is not read
            found.append(Path(folder) / VALIDATE_FILE)
    return found


def read_sources(paths) -> Sources:
    """Every run directory and validate.json under ``paths``; ConfigError if a path holds neither."""
    out = Sources()
    for p in paths:
        p = Path(p)
        if not existing(p):
            raise ConfigError(f"{p}: no such file or directory")
        if p.is_file() and p.suffix == ".json":
            out.validations.append(read_validation(p))
            continue
        before = len(out.runs) + len(out.validations) + len(out.skipped)
        files = _validate_files(p) if p.is_dir() else []
        for f in files:
            if os.path.islink(f):  # never followed from a tree: give the file it leads to by its own path
                out.skipped.append(f"{f}: a symbolic link; not read (import the file it leads to by its path)")
                continue
            try:
                out.validations.append(read_validation(f))
            except ConfigError as exc:
                out.skipped.append(exc.message)
        _read_runs(p, out, required=not files)
        if len(out.runs) + len(out.validations) + len(out.skipped) == before:
            raise ConfigError(f"{p}: no run directories or validate.json files found")
    return out
