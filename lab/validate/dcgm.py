"""DCGM's diagnostic in `invoke validate`: `dcgmi diag -r N -j` on each host, its
results turned into check records beside gpulab's own, in the same verdict.

The level follows validate's (``LEVELS``: quick 1, standard 2, burn-in 3;
``gpulab.validate.dcgm_levels`` or ``--dcgm-level`` change it). ``gather`` runs on a
host (lab.hosts.remote): whether ``dcgmi`` is there, its version, then the
diagnostic with a time limit per level; it returns plain data that ``checks``
judges (pure), so hand-written documents in DCGM's JSON form drive the tests.

DCGM's JSON (dcgmi's --json, read from NVIDIA/DCGM's dcgmi/Diag.cpp and
nvvs/include/NvvsJsonStrings.h): ``{"DCGM Diagnostic": {"test_categories":
[{"category", "tests": [{"name", "results": [{"entity_group", "entity_id",
"status", "warnings": [{"warning", "error_id", "error_category",
"error_severity"}], "info"}], "test_summary": {"status", ...}}]}],
"runtime_error"}, "entity_groups", "metadata": {"version", ...}}``; DCGM 3
names the root ``"DCGM GPU Diagnostic"`` and a result's GPU ``gpu_id`` (or the
GPUs it covers, ``gpu_ids``). Lines before the document (dcgmi's warnings)
are skipped. Each warning's ``error_id`` is named by lab/data/dcgm_errors.yml
(``DCGM_FR_*``). tests/samples/dcgm holds both forms as dcgmi prints them.

How dcgmi's JSON is read (what its writer does, and the verdict of each):
- Its statuses are Pass, Skip and Fail only: a warning is printed "Fail"
  (HelperDisplayDiagResult without DDR_DISPLAY_WARN). A Fail whose errors are all
  of the codes DCGM's plugins report as warnings (``warnings`` of
  dcgm_errors.yml, each with its source line) is a WARN; any other error, a FAIL.
- A plugin sets one result for every GPU of a test (SetResult), and the error
  goes to the entity it names: a GPU whose Fail carries no error of its own while
  the test's error belongs to another GPU or to no GPU is that other record's
  finding, not this GPU's (PASS, saying so): one GPU's setting fails no other GPU.
- Errors of no GPU (DCGM 4 puts them in the test's ``test_summary``: a Fabric
  Manager training error, a denylisted driver, a device-count mismatch) become
  one host record of that test with their DCGM_FR codes, so the action is the
  code's. A Fail with no error anywhere is a FAIL that says so.
- A test with results per GPU that leaves out a GPU of the host (no result names it) gives that
  GPU a WARN of that test, "not judged by DCGM": a GPU missing from the output is never a silent pass.

A GPU's result joins that GPU's checks; a result of the whole host, of another
entity or of a GPU the probe does not list joins the host's. Without dcgmi the
host gets one record "not run: DCGM not installed": WARN, FAIL where the
host's stack profile requires DCGM (``dcgm: {required: true}``). With dcgmi there but
no results from it (no host engine answers, its runtime_error, output that cannot be
read, or the diagnostic stopped at its time limit, gpulab.validate.time_limits.dcgm_s)
the host FAILs "DCGM diagnostic" with dcgmi's own last line: never a PASS.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from lab.core import fields, limits, plaindata, schema, settings, versions
from lab.core.errors import ConfigError, GpulabError, excerpt
from lab.validate.verdict import FAIL, PASS, WARN, check

DATA = Path(__file__).resolve().parent.parent / "data" / "dcgm_errors.yml"
LEVELS = settings.default("validate.dcgm_levels")  # validate level -> DCGM run level (lab.core.settings)
TIMEOUT_S = {int(k): v for k, v in settings.default("validate.time_limits.dcgm_s").items()}  # run level -> s
STATUS = {"pass": PASS, "skip": PASS, "warn": WARN, "fail": FAIL}
CHECK = "DCGM diagnostic"
ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
VERSION = re.compile(r"dcgmi\s+version:\s*([0-9][0-9A-Za-z.+-]*)")
TEXT, NAME = 500, 100  # characters kept of dcgmi's messages, and of its names (tests, categories, statuses, ids)


@functools.lru_cache(maxsize=4)
def codes(path: Path = DATA) -> dict:
    """{'codes'|'severities'|'categories': {number: DCGM name}, 'warnings': {DCGM_FR names}} of
    lab/data/dcgm_errors.yml."""
    data = schema.load_yaml(path, "dcgm-errors")
    out: dict = {k: {int(n): name for n, name in data[k].items()} for k in ("codes", "severities", "categories")}
    out["warnings"] = frozenset(data.get("warnings") or {})
    return out


def level_for(level: str, configured: dict | None = None, override: Any = None) -> int:
    """The DCGM run level of a validate level: ``override`` (--dcgm-level), else the configured mapping;
    0 runs no diagnostic."""
    given = override is not None  # --dcgm-level '': refused, never the configured level
    value = override if given else (dict(configured or {}) or LEVELS).get(level, LEVELS.get(level))
    text = str(value).strip()
    n = int(text) if limits.INTEGER_TEXT.fullmatch(text) else None  # ASCII digits: not '٣' for 3
    if n != 0 and n not in TIMEOUT_S:
        what = "--dcgm-level" if given else f"gpulab.validate.dcgm_levels.{level}"
        raise ConfigError(f"{what}: {excerpt(repr(value), 40)} is not a DCGM run level (1, 2, 3 or 4; 0: none)")
    return n


# --------------------------------------------------------------------------- on the host


def gather(remote, level: int, timeout_s: float | None = None) -> dict:
    """What DCGM says on this host: installed or not, its version, the diagnostic's output; the diagnostic
    is stopped at ``timeout_s`` (gpulab.validate.time_limits.dcgm_s; default TIMEOUT_S of its level)."""
    limit = timeout_s or TIMEOUT_S[level]
    probe = remote.run("command -v dcgmi && { dcgmi --version || true; }", check=False, timeout=60)
    if probe.code != 0 or not probe.stdout.strip():  # no dcgmi on the PATH
        return {"installed": False, "level": level}
    m = VERSION.search(probe.stdout)
    out = {
        "installed": True,
        "version": m.group(1) if m else None,
        "level": level,
        "argv": ["dcgmi", "diag", "-r", str(level), "-j"],
    }
    try:
        res = remote.run(out["argv"], check=False, timeout=limit)
    except GpulabError as exc:
        return {**out, "error": getattr(exc, "message", None) or str(exc)}
    out.update(exit_code=res.code, stdout=res.stdout[-limits.JSON_BYTES :], stderr=res.stderr[-4096:])
    if res.code == 124:
        out["error"] = f"dcgmi diag -r {level} did not finish within {limit:g} s and was stopped"
    return out


def document(text: str) -> dict:
    """The JSON document dcgmi printed, after any warning lines before it; ValueError when there is none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("{"):
            doc = plaindata.loads("\n".join(lines[i:]), finite=True, limit=limits.JSON_BYTES)
            if isinstance(doc, dict) and any(k in doc for k in ROOTS):
                return doc
            break
    raise ValueError("no DCGM diagnostic document in dcgmi's output")


# --------------------------------------------------------------------------- judging


def _not_run(reason: str, required: bool) -> dict:
    verdict = FAIL if required else WARN
    why = " (the stack profile requires DCGM)" if required else ""
    return check(CHECK, verdict, None, "DCGM diagnostic results", f"not run: {reason}{why}", source="dcgm")


def _failed(level, why) -> dict:
    """The host's FAIL when dcgmi at ``level`` gave no judgeable results (``why``)."""
    why = str(why)[:TEXT]
    return check(CHECK, FAIL, None, "DCGM diagnostic results", f"level {level}: {why}", source="dcgm", dcgm_level=level)


def _entity(result: dict) -> tuple[str, str] | None:
    """('GPU', '0') / ('NvSwitch', '3') / None (the whole host or several GPUs)."""
    if "entity_group" in result and "entity_id" in result:
        return str(result["entity_group"])[:NAME], str(result["entity_id"])[:NAME]
    if "gpu_id" in result:
        return "GPU", str(result["gpu_id"])[:NAME]
    ids = str(result.get("gpu_ids", "")).split(",")
    return ("GPU", ids[0].strip()) if len(ids) == 1 and ids[0].strip() else None


def _reports_on(result: dict) -> set[str]:
    """The GPUs a result of one GPU reports on: DCGM 4's entity of group GPU, DCGM 3's plugin result (its
    ``gpu_id`` text, or ``gpu_ids``); none for the host, another entity or a DCGM 3 basic test (its
    ``gpu_id`` a number: the GPU of its last error, not the GPUs it covered)."""
    if result.get("_summary"):
        return set()
    if "entity_group" in result and "entity_id" in result:
        return {str(result["entity_id"]).strip()} if str(result["entity_group"]) == "GPU" else set()
    if isinstance(result.get("gpu_id"), str):
        return {result["gpu_id"].strip()}
    ids = result.get("gpu_ids")
    ids = ids.split(",") if isinstance(ids, str) else ids if isinstance(ids, list) else []
    return {str(i).strip() for i in ids if str(i).strip()}


def _unreported(test: str, category: str, level, reported: set[str]) -> dict:
    """The WARN of a GPU that a test with results per GPU leaves out."""
    named = ", ".join(sorted(reported, key=lambda i: (fields.whole(i) is None, fields.whole(i) or 0, i)))
    return check(
        f"DCGM {test}",
        WARN,
        None,
        "a result for this GPU",
        f"level {level} {category}: dcgmi's output has no result for this GPU (it reports GPU {named[:200]}): "
        "not judged by DCGM",
        source="dcgm",
        dcgm_level=level,
        dcgm_test=test,
        dcgm_code=None,
        dcgm_errors=[],
    )


def _items(value) -> list[dict]:
    """The objects of a list in dcgmi's document; nothing where it holds another shape."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _named(table: dict, number) -> str | None:
    return table.get(number) if isinstance(number, int) else None


def _errors(result: dict, table: dict) -> list[dict]:
    """The errors of one result (DCGM 4: ``warnings[].warning``; DCGM 3.3's Deployment: ``warnings[].warnings``)."""
    out = []
    for w in result.get("warnings") or [] if isinstance(result.get("warnings"), list) else []:
        if not isinstance(w, dict):
            continue
        code = (
            w.get("error_id")
            if isinstance(w.get("error_id"), int) and not isinstance(w.get("error_id"), bool)
            else None
        )
        name = table["codes"].get(code, f"DCGM error {code}") if code is not None else None
        out.append(
            {
                "code": code,
                "name": name,
                "message": str(w.get("warning") or w.get("warnings") or "")[:TEXT],
                "severity": _named(table["severities"], w.get("error_severity")),
                "category": _named(table["categories"], w.get("error_category")),
            }
        )
    return out


def _record(
    test: str,
    category: str,
    result: dict,
    level: int,
    table: dict,
    entity: tuple | None,
    on_gpu: bool,
    elsewhere: str | None = None,
) -> dict:
    """One result as a check record; ``elsewhere``: where the test's errors are when not in this result."""
    status = str(result.get("status", "")).strip()[:NAME]
    verdict = STATUS.get(status.lower(), FAIL)
    errors = _errors(result, table)
    if status.lower() == "fail" and errors and all(e["name"] in table["warnings"] for e in errors):
        verdict = WARN  # what DCGM's plugin reported as a warning (dcgmi's JSON prints it "Fail")
    where = "" if entity is None or on_gpu else f" ({entity[0]} {entity[1]})"
    if errors:
        reason = "; ".join(f"{e['name']}: {e['message']}" if e["name"] else e["message"] for e in errors)
    elif verdict == FAIL and status.lower() not in STATUS:
        reason = f"status {status or 'missing'!r} is not one DCGM reports"
    elif status.lower() == "fail" and elsewhere:
        verdict = PASS
        reason = (
            f"DCGM marks the whole test Fail (one result for every GPU); its error is {elsewhere}'s, "
            "judged there, not this GPU's"
        )
    elif status.lower() == "fail":
        reason = "DCGM reports Fail with no error"
    else:
        reason = {"pass": "passed", "skip": "skipped by DCGM"}.get(status.lower(), status.lower())
        info = (
            [i[:TEXT] for i in result.get("info") or [] if isinstance(i, str)][:2]
            if isinstance(result.get("info"), list)
            else []
        )
        reason += f" ({'; '.join(info)})" if info and status.lower() == "pass" else ""
    return check(
        f"DCGM {test}{where}",
        verdict,
        status or None,
        "Pass",
        f"level {level} {category}: {reason}",
        source="dcgm",
        dcgm_level=level,
        dcgm_test=test,
        dcgm_code=next((e["name"] for e in errors if e["name"]), None),
        dcgm_errors=errors,
    )


def checks(gathered: dict | None, gpu_indices: list, expect: dict | None) -> tuple[list[dict], dict[str, list[dict]]]:
    """(host records, {GPU index: records}) from what ``gather`` found; ``expect`` is the profile's
    ``dcgm`` entry ({version, required}) or None."""
    required = bool((expect or {}).get("required"))
    if not gathered or not isinstance(gathered, dict):
        return [], {}
    if not gathered.get("installed"):
        return [_not_run("DCGM not installed", required)], {}
    level = gathered.get("level")
    host: list[dict] = []
    want = (expect or {}).get("version")
    have = gathered.get("version")
    if want:
        ok = versions.agrees(have, want)
        host.append(
            check(
                "DCGM version",
                PASS if ok else FAIL,
                have,
                str(want),
                f"DCGM {have} as the profile says" if ok else f"DCGM is {have or 'unknown'}, the profile says {want}",
                source="dcgm",
            )
        )
    if gathered.get("error"):
        return host + [_failed(level, gathered["error"])], {}
    try:
        doc = document(gathered.get("stdout") or "")
    except ValueError as exc:
        last = (gathered.get("stderr") or gathered.get("stdout") or "").strip().splitlines()
        detail = f": {last[-1][:300]}" if last else ""
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return host + [_failed(level, f"dcgmi exited {gathered.get('exit_code')}, {msg}{detail}")], {}
    return _from_document(doc, host, gpu_indices, level)


def _from_document(doc: dict, host: list[dict], gpu_indices: list, level) -> tuple[list[dict], dict[str, list[dict]]]:
    table = codes()
    root = next(doc[k] for k in ROOTS if k in doc)
    root = root if isinstance(root, dict) else {}
    known = {str(i) for i in gpu_indices}
    per_gpu: dict[str, list[dict]] = {}
    if root.get("runtime_error"):
        host.append(_failed(level, root["runtime_error"]))
    count = 0
    for cat in _items(root.get("test_categories")):
        for test in _items(cat.get("tests")):
            name, category = str(test.get("name", "?"))[:NAME], str(cat.get("category", "?"))[:NAME]
            results = _items(test.get("results"))
            summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else None
            if summary is not None and (not results or _errors(summary, table)):
                results.append({**summary, "_summary": True})  # errors of no GPU: the host's, with their codes
            owners = [r for r in results if _errors(r, table)]
            for r in results:
                entity = None if r.get("_summary") else _entity(r)
                gpu = entity[1] if entity and entity[0] == "GPU" and entity[1] in known else None
                others = [o for o in owners if o is not r]
                elsewhere = (
                    None
                    if not others
                    else ", ".join(
                        "no GPU (the host)" if o.get("_summary") or _entity(o) is None else " ".join(_entity(o))
                        for o in others
                    )
                )
                rec = _record(name, category, r, level, table, entity, gpu is not None, elsewhere)
                (per_gpu.setdefault(gpu, []) if gpu is not None else host).append(rec)
                count += 1
            reported = set().union(*(_reports_on(r) for r in results))
            for gpu in [str(i) for i in gpu_indices if str(i) not in reported] if reported else ():
                per_gpu.setdefault(gpu, []).append(_unreported(name, category, level, reported))
    if not count and not root.get("runtime_error"):
        host.append(_failed(level, "no test results in dcgmi's output"))
    return host, per_gpu
