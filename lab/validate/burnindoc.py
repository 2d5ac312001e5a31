"""The burn-in document a host printed, read back: every input is hostile.

``read_burnin`` takes the last line ``runner burnin --json`` printed, bounded by lab.core.plaindata
(finite numbers only) and checked against lab/schemas/burnin.schema.json (the shape of the fields
lab.validate's checks read), so that a document either evaluates or is one RunError naming the host and
the field. ``malformed`` is the one FAIL record of a host whose document still held a shape the checks
could not read (a document handed to ``evaluate`` without ``read_burnin``).
"""

from __future__ import annotations

from lab.core import limits, plaindata, schema
from lab.core.errors import ConfigError, RunError
from lab.validate.verdict import FAIL, check


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
        raise RunError(f"{host}: runner burnin printed no usable JSON document ({str(exc)[:120]}; "
                       f"exit {code})") from None
    try:
        schema.check(doc, "burnin", "burn-in document")
    except ConfigError as exc:
        raise RunError(f"{host}: runner burnin printed a malformed {exc.message} (exit {code})") from None
    return doc


def malformed(exc: BaseException) -> dict:
    """The FAIL record of a host whose document the checks could not read."""
    return check("runner", FAIL, None, "a burn-in document of the documented form",
                 f"the host's burn-in document is malformed ({type(exc).__name__}: {exc})"[:300])
