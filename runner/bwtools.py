"""The standard bandwidth tools beside the burn-in's own figures: NVIDIA's nccl-tests
(``all_reduce_perf`` with ``-J``, its JSON results file) and nvbandwidth (``-j``, its JSON
document; its plain output is read too). Found in ``GPULAB_TOOLS_DIR`` (default
``/opt/gpulab/tools/bin``, where provisioning builds them), else on PATH; run with a time limit;
their output kept in the burn-in's directory and summed up here as figures in GB/s. Measures;
the controller judges. A tool that is not there, fails or prints something unreadable gives
``{"ran": false | true, "error": "<one line>"}`` and never stops the burn-in.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from runner import boundjson

TOOLS_DIR = Path(os.environ.get("GPULAB_TOOLS_DIR", "/opt/gpulab/tools/bin"))
MAX_OUTPUT = 16 * 1024 * 1024  # bytes of a tool's output read back

# nvbandwidth testcases the burn-in runs, and the figure each gives
NVB_TESTCASES = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")


class ToolOutputError(ValueError):
    """A tool's output is not of the form it documents; the message is one line."""


def find(name: str) -> str | None:
    """The tool's path: GPULAB_TOOLS_DIR first, then PATH."""
    own = TOOLS_DIR / name
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    return shutil.which(name)


def _num(value, where: str) -> float | None:
    """A bandwidth figure: a number, a numeric string, or None for "N/A"/"nan"."""
    if value is None or value in ("N/A", "nan"):
        return None
    if isinstance(value, bool):
        raise ToolOutputError(f"{where}: {value!r} is not a number")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ToolOutputError(f"{where}: {value!r} is not a number") from None
    return None if math.isnan(out) else out


# ------------------------------------------------------------------ nccl-tests -J


def parse_nccl_tests(text: str) -> dict:
    """Figures of an nccl-tests JSON results file (``all_reduce_perf ... -J FILE``).

    ``busbw_gbs``: the bus bandwidth at the largest message size (the figure published
    thresholds use), the better of out-of-place and in-place; ``busbw_peak_gbs`` the best of
    any size; ``avg_busbw_gbs`` the tool's own average; ``wrong`` the elements that failed its
    check (None when it did not check)."""
    try:
        doc = boundjson.loads(text)
    except ValueError as exc:
        raise ToolOutputError(f"not JSON ({exc})"[:200]) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ToolOutputError("no results list: not an nccl-tests -J file")
    rows = []
    wrong = None
    for i, r in enumerate(doc["results"]):
        if not isinstance(r, dict) or not isinstance(r.get("size"), int):
            raise ToolOutputError(f"results[{i}] has no size")
        best = None
        for place in ("out_of_place", "in_place"):
            part = r.get(place)
            if part is None:
                continue
            if not isinstance(part, dict):
                raise ToolOutputError(f"results[{i}].{place} is not an object")
            bw = _num(part.get("bus_bw"), f"results[{i}].{place}.bus_bw")
            if bw is not None:
                best = bw if best is None else max(best, bw)
            nw = _num(part.get("nwrong"), f"results[{i}].{place}.nwrong")
            if nw is not None:
                wrong = int(nw) + (wrong or 0)
        if best is not None:
            rows.append((r["size"], best))
    if not rows:
        raise ToolOutputError("no bus bandwidth in the results")
    cfg = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    avg = doc.get("average_bus_bandwidth") if isinstance(doc.get("average_bus_bandwidth"), dict) else {}
    oob = doc.get("out_of_bounds") if isinstance(doc.get("out_of_bounds"), dict) else {}
    size, at_max = max(rows)
    return {
        "file_version": doc.get("version"),
        "nccl_version": doc.get("nccl_version"),
        "ngpus": cfg.get("ngpus"),
        "max_bytes": size,
        "busbw_gbs": round(at_max, 3),
        "busbw_peak_gbs": round(max(bw for _s, bw in rows), 3),
        "avg_busbw_gbs": _num(avg.get("bandwidth"), "average_bus_bandwidth.bandwidth"),
        "wrong": wrong,
        "out_of_bounds": oob.get("count"),
    }


# ------------------------------------------------------------------ nvbandwidth


def _nvb_json(doc: dict) -> dict:
    root = doc.get("nvbandwidth")
    if not isinstance(root, dict) or not isinstance(root.get("testcases", []), list):
        raise ToolOutputError("no nvbandwidth.testcases: not nvbandwidth's JSON")
    cases = {}
    for i, t in enumerate(root.get("testcases", [])):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise ToolOutputError(f"testcases[{i}] has no name")
        matrix = t.get("bandwidth_matrix")
        if matrix is not None and not (isinstance(matrix, list) and all(isinstance(r, list) for r in matrix)):
            raise ToolOutputError(f"testcases[{i}].bandwidth_matrix is not a list of rows")
        cases[t["name"]] = {
            "status": t.get("status"),
            "matrix": [[_num(v, f"{t['name']} matrix") for v in row] for row in matrix] if matrix else None,
            "error": t.get("error"),
        }
    return {"version": root.get("version"), "driver": root.get("Driver Version"),
            "error": root.get("error"), "testcases": cases}


def _nvb_text(text: str) -> dict:
    """nvbandwidth's plain output: "Running NAME." then a description, a header of N column
    labels, rows of a label and N values ("N/A" where none), and "SUM NAME VALUE"; a testcase
    that did not run says "Waived: ..." or "Error: ..." instead."""
    cases: dict = {}
    version = None
    name = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"nvbandwidth Version:\s*(\S+)", line)
        if m:
            version = m.group(1)
        m = re.fullmatch(r"Running (\S+)\.", line)
        if m:
            name = m.group(1)
            cases[name] = {"status": "Error", "matrix": None, "error": None, "columns": None}
            continue
        if name is None or not line:
            continue
        case = cases[name]
        parts = line.split()
        if parts[0] in ("Waived:", "Error:"):
            case.update(status=parts[0].rstrip(":"), error=line)
        elif parts[0] == "SUM" and len(parts) == 3:
            case["status"] = "Passed" if case["matrix"] else case["status"]
            name = None
        elif case["columns"] is None and all(re.fullmatch(r"\d+", p) for p in parts):
            case["columns"] = len(parts)
        elif case["columns"] is not None and len(parts) == case["columns"] + 1:
            case["matrix"] = (case["matrix"] or []) + [[_num(p, f"{name} matrix") for p in parts[1:]]]
    if not cases:
        raise ToolOutputError("no 'Running <testcase>.' line: not nvbandwidth's output")
    return {"version": version, "driver": None, "error": None, "testcases": cases}


def _off_diagonal(matrix: list[list], index: int) -> list[float]:
    return [v for j, v in enumerate(matrix[index]) if j != index and v is not None] if index < len(matrix) else []


def parse_nvbandwidth(text: str) -> dict:
    """Figures of nvbandwidth's output (its ``-j`` JSON, or its plain text), per GPU index:
    ``h2d_gbs`` and ``d2h_gbs`` (copy engine, host memory <-> the GPU), ``d2d_read_min_gbs`` (the
    slowest peer the GPU reads from, copy engine: the P2P link)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            parsed = _nvb_json(boundjson.loads(stripped))
        except ValueError as exc:
            if isinstance(exc, ToolOutputError):
                raise
            raise ToolOutputError(f"not JSON ({exc})") from None
    else:
        parsed = _nvb_text(text)
    gpus: dict[str, dict] = {}
    cases = parsed["testcases"]
    for case, key in (("host_to_device_memcpy_ce", "h2d_gbs"), ("device_to_host_memcpy_ce", "d2h_gbs")):
        m = (cases.get(case) or {}).get("matrix")
        if m:  # one row (the host), one column per GPU
            for j, v in enumerate(m[0]):
                if v is not None:
                    gpus.setdefault(str(j), {})[key] = v
    m = (cases.get("device_to_device_memcpy_read_ce") or {}).get("matrix")
    if m:
        for i in range(len(m)):
            peers = _off_diagonal(m, i)
            if peers:
                gpus.setdefault(str(i), {})["d2d_read_min_gbs"] = min(peers)
    return {"version": parsed["version"], "driver": parsed["driver"], "error": parsed["error"],
            "testcases": {k: {"status": v["status"], "error": v["error"]} for k, v in cases.items()},
            "matrices": {k: v["matrix"] for k, v in cases.items() if v["matrix"]}, "gpus": gpus}


# ------------------------------------------------------------------ running them


def _run(argv: list[str], timeout_s: float, env: dict | None = None) -> tuple[int | None, str, str]:
    """(exit code or None, stdout, stderr) of a tool run in its own process group, which is
    killed whole when the time is up."""
    try:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as exc:
        return None, "", str(exc)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate()
        return None, "", f"timed out after {timeout_s:g} s"
    return p.returncode, out[:MAX_OUTPUT].decode(errors="replace"), err[-4000:].decode(errors="replace")


def _last_line(text: str, default: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else default


def run_nccl_tests(gpus: list[int], out: Path, timeout_s: float = 600, max_bytes: str = "8G") -> dict:
    """``all_reduce_perf -b 8 -e MAX -f 2 -g N -J out/nccl-tests.json`` on the selected GPUs."""
    exe = find("all_reduce_perf")
    if exe is None:
        return {"ran": False, "error": f"all_reduce_perf not found (in {TOOLS_DIR} or on PATH)"}
    path = out / "nccl-tests.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    code, stdout, stderr = _run([exe, "-b", "8", "-e", max_bytes, "-f", "2", "-g", str(len(gpus)), "-J", str(path)],
                                timeout_s, env)
    (out / "nccl-tests.log").write_text(stdout + stderr)
    if code != 0:
        return {"ran": True, "error": f"all_reduce_perf {'exit ' + str(code) if code is not None else ''}: "
                                      f"{_last_line(stderr or stdout, 'no output')}".replace(" : ", ": ")}
    version = re.search(r"^# nccl-tests version (\S+)", stdout, re.M)  # its banner (2.17 and later)
    try:
        return {"ran": True, "path": exe, "version": version.group(1) if version else None,
                **parse_nccl_tests(path.read_text(errors="replace")[:MAX_OUTPUT])}
    except (OSError, ToolOutputError) as exc:
        return {"ran": True, "error": f"nccl-tests.json: {exc}"}


def run_nvbandwidth(gpus: list[int], out: Path, timeout_s: float = 600) -> dict:
    """``nvbandwidth -j -t <the testcases>``; its JSON kept as out/nvbandwidth.json."""
    exe = find("nvbandwidth")
    if exe is None:
        return {"ran": False, "error": f"nvbandwidth not found (in {TOOLS_DIR} or on PATH)"}
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    code, stdout, stderr = _run([exe, "-j", "-t", *NVB_TESTCASES], timeout_s, env)
    (out / "nvbandwidth.json").write_text(stdout)
    if code != 0 and not stdout.strip():
        return {"ran": True, "error": f"nvbandwidth: {_last_line(stderr, 'exit ' + str(code))}"}
    try:
        return {"ran": True, "path": exe, **parse_nvbandwidth(stdout)}
    except ToolOutputError as exc:
        return {"ran": True, "error": f"nvbandwidth.json: {exc}"}
