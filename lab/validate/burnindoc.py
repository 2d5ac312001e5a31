"""The burn-in document a host printed, read back: every input is hostile.

``read_burnin`` takes the last line ``runner burnin --json`` printed, bounded by lab.core.plaindata
(finite numbers only) and checked against lab/schemas/burnin.schema.json (the shape of the fields
lab.validate's checks read). A value the schema refuses where the schema allows "not measured" (null)
is set to null and named in the document's ``unreadable`` list, so that one hostile value costs that
value alone and the host's other figures are still judged (``unreadable_check``: one WARN that names
them); a document whose shape cannot be read even so is one RunError naming the host and the field.
``incomplete_check`` is one WARN when the answer lacks what a burn-in of the level asked for writes (a
probe alone, another level, an unknown outcome, a GPU without a figure under load): what did not run is
never a pass. ``listed_twice`` names a GPU index a document's list of GPUs gives twice (the probe's in
validate, the health document's in the gate). ``malformed`` is the one FAIL record of a host whose
document still held a shape the checks could not read (a document handed to ``evaluate`` without
``read_burnin``).
"""

from __future__ import annotations

import jsonschema

from lab.core import limits, plaindata, schema
from lab.core.errors import ConfigError, RunError
from lab.validate.verdict import FAIL, WARN, check

UNREADABLE = "unreadable"  # the document's key for the values read_burnin left out
MAX_SALVAGED = 64  # values left out before the document counts as malformed as a whole


def listed_twice(gpus: list[dict]) -> str | None:
    """What is wrong with a document's list of GPUs that names one GPU index more than once (one GPU's record
    would hide the other's, and its failures with it): "lists GPU index 0 more than once"; None when each
    index is listed once. The probe, burn-in and health documents alike (validate and the health gate)."""
    indices = [str(g.get("index")) for g in gpus]
    twice = sorted({i for i in indices if indices.count(i) > 1}, key=lambda i: (len(i), i))
    return f"lists GPU index {', '.join(twice[:5])} more than once" if twice else None


def read_burnin(stdout: str, host: str, code: int | None = None) -> dict:
    """The burn-in document, the last line the runner printed: bounded, a JSON object of the documented
    shape; RunError '<host>: runner burnin printed ...' naming the field otherwise."""
    lines = stdout.strip().splitlines()
    try:
        if not lines:
            raise ValueError("nothing printed")
        doc = plaindata.loads(lines[-1], finite=True, limit=limits.JSON_BYTES)
        if not isinstance(doc, dict):
            raise ValueError(f"a JSON {type(doc).__name__}, not an object")
    except ValueError as exc:
        raise RunError(
            f"{host}: runner burnin printed no usable JSON document ({str(exc)[:120]}; exit {code})"
        ) from None
    doc.pop(UNREADABLE, None)  # the runner never writes it: only this reader says what it left out
    left_out: list[str] = []
    validator = jsonschema.Draft202012Validator(schema.schema("burnin"))
    while True:
        try:
            schema.conform(doc, "burnin", "burn-in document")
            break
        except ConfigError as exc:
            if len(left_out) >= MAX_SALVAGED or not _null_first_refused(doc, validator):
                raise RunError(f"{host}: runner burnin printed a malformed {exc.message} (exit {code})") from None
            left_out.append(exc.message[len("burn-in document: ") :][:160])
    if left_out:
        doc[UNREADABLE] = left_out
    return doc


def _null_first_refused(doc: dict, validator) -> bool:
    """Set the value that lab.core.schema.conform reports first to null, where its own schema is a scalar's
    that allows null (a figure, a count, a text) inside an object; False where that cannot help."""
    errors = sorted(validator.iter_errors(doc), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return False
    err = errors[0]
    types = err.schema.get("type") if isinstance(err.schema, dict) else None
    if (
        len(err.absolute_path) < 2
        or not isinstance(types, list)
        or "null" not in types
        or {"object", "array"} & set(types)
    ):  # a scalar's slot only: a whole section is never left out
        return False
    *head, last = list(err.absolute_path)
    parent = doc
    for key in head:
        parent = parent[key]
    if not isinstance(parent, dict) or parent.get(last) is None:
        return False
    parent[last] = None
    return True


def unreadable_check(doc: dict) -> list[dict]:
    """One WARN naming the values of a host's burn-in document that were left out (none: nothing)."""
    left = doc.get(UNREADABLE) if isinstance(doc, dict) else None
    if not left:
        return []
    shown = "; ".join(str(x) for x in left[:5]) + (f"; and {len(left) - 5} more" if len(left) > 5 else "")
    return [
        check(
            "burn-in document",
            WARN,
            len(left),
            "every value of the documented form",
            f"{len(left)} value(s) of the burn-in document were unreadable and left out, the rest judged: {shown}"[
                :300
            ],
        )
    ]


LOADED = ("standard", "burn-in")  # the levels whose document holds every GPU's figures under load
OUTCOMES = ("completed", "failed")  # what the runner's document of a host with GPUs says


def _figures(entry) -> set[str]:
    """The names of the figures a GPU's burn-in entry measured on its own (its ``solo``)."""
    solo = entry.get("solo") if isinstance(entry, dict) else None
    return {k for k, v in solo.items() if v is not None} if isinstance(solo, dict) else set()


def incomplete_check(doc: dict | None, probe: dict, asked: str | None = None) -> list[dict]:
    """One WARN when the host's answer lacks what a burn-in of the level asked for (``asked``; None: the
    document's own level) writes: a GPU the driver counts that it does not list, no burn-in document at all,
    another level, an outcome the runner never writes, a GPU without one figure under load or without one the
    host's other GPUs have (and without a failed test of its own, which fails it); nothing otherwise. A cut or emptied document is never a pass of
    the checks that did not run."""
    listed = {g.get("index") for g in probe.get("gpus") or []}
    count = probe.get("gpu_count")
    unlisted = [str(i) for i in range(count) if i not in listed] if isinstance(count, int) else []
    problems = (
        [f"GPU {', '.join(unlisted[:8])} counted by the driver (gpu_count {count}) but not in it"] if unlisted else []
    )
    if doc is None:
        problems += ["a probe document, no burn-in"] if asked in LOADED else []
    else:
        level, outcome = doc.get("level"), doc.get("outcome")
        problems += [f"level {str(level)[:40]!r}, not the {asked} asked for"] if asked and level != asked else []
        if outcome not in OUTCOMES:
            problems.append(f"outcome {str(outcome)[:40]!r}, not one the runner writes")
        if (asked or level) in LOADED:
            entries = doc.get("gpus") or {}
            failed = {r.get("gpu") for r in doc.get("results") or [] if not r.get("ok")}
            judged = [g.get("index") for g in probe.get("gpus") or [] if "error" not in g]
            have = {str(i): _figures(entries.get(str(i))) for i in judged if i not in failed}
            every = set().union(*have.values())  # what the same tests gave the host's other GPUs
            bare = [i for i, names in have.items() if not names]
            short = [
                f"GPU {i} lacks {', '.join(sorted(every - names)[:3])}" for i, names in have.items() if names < every
            ]
            if bare:
                problems.append(f"no figure under load of GPU {', '.join(bare[:8])}{' ...' if len(bare) > 8 else ''}")
            problems += short[:3]
    if not problems:
        return []
    return [
        check(
            "burn-in document",
            WARN,
            None,
            f"a {asked or (doc or {}).get('level') or 'probe'} document of every GPU",
            f"{'; '.join(problems)}: what the burn-in did not report is not judged"[:300],
        )
    ]


def malformed(exc: BaseException) -> dict:
    """The FAIL record of a host whose document the checks could not read."""
    return check(
        "runner",
        FAIL,
        None,
        "a burn-in document of the documented form",
        f"the host's burn-in document is malformed ({type(exc).__name__}: {exc})"[:300],
    )
