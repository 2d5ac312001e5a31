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


def _missing(exe_name: str, tool: str) -> dict:
    """A tool that is not there; ``expected`` when provisioning built it here (its version marker,
    ``<tools>/<tool>.json`` of the bwtools role, is beside the bin folder): then it went missing."""
    marker = TOOLS_DIR.parent / f"{tool}.json"
    built = marker.is_file()
    return {
        "ran": False,
        "expected": built,
        "error": f"{exe_name} not found (in {TOOLS_DIR} or on PATH)"
        + (f", although {marker} says it was built" if built else ""),
    }


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
    okay = avg.get("okay")  # nccl-tests writes its booleans as the strings "true"/"false" ("unchecked": no minimum)
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
        # the footer is written last (src/util.cu writeResultFooter): without it the file stops mid-run
        "complete": "out_of_bounds" in doc,
        "min_bw_failed": okay in (False, "false"),
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
    return {
        "version": root.get("version"),
        "driver": root.get("Driver Version"),
        "error": root.get("error"),
        "testcases": cases,
    }


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


# what nvbandwidth v0.8 prints when its check of a copy's destination fails: the compare kernel's
# printf (kernels.cu memcmpKernelDevice) before the document, and ASSERT(h_errorFlag == 0)
# (memcpy.cpp memcmpPatternHelper; error_handling.h) as the document's "error"
CORRUPTION_LINE = "Invalid value when checking the pattern"
CORRUPTION_ASSERT = "h_errorFlag == 0"


def _json_start(text: str) -> int | None:
    """Offset of the line that opens nvbandwidth's JSON document ('{' at the start of a line:
    jsoncpp's toStyledString), after any lines the tool or its kernels printed before it."""
    m = re.search(r"^\{", text, re.M)
    return m.start() if m else None


def parse_nvbandwidth(text: str) -> dict:
    """Figures of nvbandwidth's output (its ``-j`` JSON, or its plain text), per GPU index:
    ``h2d_gbs`` and ``d2h_gbs`` (copy engine, host memory <-> the GPU), ``d2d_read_min_gbs`` (the
    slowest peer the GPU reads from, copy engine: the P2P link) and ``d2d_no_peer`` (the GPUs it
    has no figure for: nvbandwidth's "N/A", no peer access). ``before``: lines printed before the
    document; ``corruption``: the tool's data check failed (the testcase and its words)."""
    start = _json_start(text)
    before = [ln.strip() for ln in text[: start or 0].splitlines() if ln.strip()][:20]
    if start is not None:
        try:
            parsed = _nvb_json(boundjson.loads(text[start:]))
        except ValueError as exc:
            if isinstance(exc, ToolOutputError):
                raise
            raise ToolOutputError(f"not JSON ({exc})"[:200]) from None
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
            missing = [j for j, v in enumerate(m[i]) if j != i and v is None]
            if missing:
                gpus.setdefault(str(i), {})["d2d_no_peer"] = missing
    error = parsed["error"].strip() if isinstance(parsed["error"], str) else parsed["error"]
    corruption = None
    if any(CORRUPTION_LINE in ln for ln in before) or (isinstance(error, str) and CORRUPTION_ASSERT in error):
        running = [k for k, v in cases.items() if v["status"] == "Running"]
        corruption = {
            "testcase": running[-1] if running else None,
            "detail": "; ".join([ln for ln in before if CORRUPTION_LINE in ln or "offset" in ln][:2])
            or (error or "")[:300],
        }
    return {
        "version": parsed["version"],
        "driver": parsed["driver"],
        "error": error,
        "before": before,
        "corruption": corruption,
        "testcases": {k: {"status": v["status"], "error": v["error"]} for k, v in cases.items()},
        "matrices": {k: v["matrix"] for k, v in cases.items() if v["matrix"]},
        "gpus": gpus,
    }


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
        out, err = p.communicate()
        return None, out[:MAX_OUTPUT].decode(errors="replace"), f"timed out after {timeout_s:g} s and was killed"
    return p.returncode, out[:MAX_OUTPUT].decode(errors="replace"), err[-4000:].decode(errors="replace")


def _last_line(text: str, default: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else default


def run_nccl_tests(gpus: list[int], out: Path, timeout_s: float = 600, max_bytes: str = "8G") -> dict:
    """``all_reduce_perf -b 8 -e MAX -f 2 -g N -J out/nccl-tests.json`` on the selected GPUs."""
    exe = find("all_reduce_perf")
    if exe is None:
        return _missing("all_reduce_perf", "nccl-tests")
    path = out / "nccl-tests.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    code, stdout, stderr = _run(
        [exe, "-b", "8", "-e", max_bytes, "-f", "2", "-g", str(len(gpus)), "-J", str(path)], timeout_s, env
    )
    (out / "nccl-tests.log").write_text(stdout + stderr)
    return nccl_result(code, stdout, stderr, path, exe)


def nccl_result(code: int | None, stdout: str, stderr: str, path: Path, exe: str | None = None) -> dict:
    """What one all_reduce_perf run gave: its figures whenever its -J file is complete, even after a
    non-zero exit (nccl-tests exits 7, testNumResults, when its data check found wrong elements or
    the average bus bandwidth is below NCCL_TESTS_MIN_BW, after writing every result: src/common.cu);
    ``error`` only when no complete results are there (the tool's own last line, or the time limit)."""
    said = _last_line(stderr if code is None else (stderr or stdout), "no output")
    version = re.search(r"^# nccl-tests version (\S+)", stdout, re.M)  # its banner (2.17 and later)
    base = {"ran": True, "path": exe, "version": version.group(1) if version else None, "exit_code": code}
    try:
        figures = parse_nccl_tests(path.read_text(errors="replace")[:MAX_OUTPUT]) if path.is_file() else None
    except (OSError, ToolOutputError) as exc:
        figures, why = None, f"nccl-tests.json: {exc}"
    else:
        why = (
            None
            if figures is None
            else (
                "nccl-tests.json stops before its footer (the run did not finish)" if not figures["complete"] else None
            )
        )
    if figures is not None and why is None:
        return {**base, **figures, "tool_said": None if code == 0 else said}
    if code == 0:
        return {**base, "error": why or "nccl-tests.json was not written"}
    head = f"all_reduce_perf exit {code}" if code is not None else "all_reduce_perf"
    return {**base, "error": f"{head}: {said}" + (f" ({why})" if why else "")}


def run_nvbandwidth(gpus: list[int], out: Path, timeout_s: float = 600) -> dict:
    """``nvbandwidth -j -t <the testcases>``; its JSON kept as out/nvbandwidth.json."""
    exe = find("nvbandwidth")
    if exe is None:
        return _missing("nvbandwidth", "nvbandwidth")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    code, stdout, stderr = _run([exe, "-j", "-t", *NVB_TESTCASES], timeout_s, env)
    (out / "nvbandwidth.json").write_text(stdout)
    return nvbandwidth_result(code, stdout, stderr, exe)


def nvbandwidth_result(code: int | None, stdout: str, stderr: str, exe: str | None = None) -> dict:
    """What one nvbandwidth run gave: its figures and its own ``error`` (the document's "error":
    nvbandwidth records a failed CUDA/NVML call or check there, prints the document and exits 1:
    error_handling.h, json_output.cpp); ``corruption`` when its data check failed."""
    base = {"ran": True, "path": exe, "exit_code": code}
    if code is None:
        return {
            **base,
            "error": f"nvbandwidth {stderr.strip()}"
            + ("" if not stdout.strip() else " (its output stops mid-document)"),
        }
    if not stdout.strip():
        return {**base, "error": f"nvbandwidth: {_last_line(stderr, 'exit ' + str(code) + ', no output')}"}
    try:
        parsed = parse_nvbandwidth(stdout)
    except ToolOutputError as exc:
        return {**base, "error": f"nvbandwidth.json: {exc}"}
    if code != 0 and not parsed["error"]:
        parsed["error"] = f"exit {code}: {_last_line(stderr, 'no message')}"
    return {**base, **parsed}
