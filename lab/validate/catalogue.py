"""The checks of `invoke validate`, each declared once (lab/data/checks.yml): its id, unit, where its
thresholds come from, the verdicts it can give, its action's key in lab/data/actions.yml and its trend
section in lab/data/trends.yml. A record's ``check`` is the name the verdict shows (``GPU count``,
``matmul_bf16_tflops (all GPUs at once)``, ``DCGM memory``); ``entry_for`` finds the declared check it
belongs to: the exact id, else the first pattern (shell-style) in file order. ``problems`` says, one
line each, what is declared without an action for a verdict it gives, or with a trend section that does
not exist (tests/unit/validate/test_catalogue.py runs it, and fails on any check written in
lab/validate that is not declared).
"""

from __future__ import annotations

import functools
from fnmatch import fnmatchcase
from pathlib import Path

from lab.core import schema
from lab.core.errors import ConfigError

CHECKS = Path(__file__).resolve().parents[1] / "data" / "checks.yml"
FIELDS = {"unit", "thresholds", "verdicts", "action", "trend", "codes"}


@functools.lru_cache(maxsize=4)
def load(path: Path | str = CHECKS) -> dict[str, dict]:
    """{id: entry} in file order; every entry's fields checked (one ConfigError line naming it)."""
    data = schema.read_yaml(path)
    checks = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(checks, dict) or not checks:
        raise ConfigError(f"{path}: schema 1 with a non-empty 'checks' mapping expected")
    out = {}
    for cid, entry in checks.items():
        where = f"{path}: checks.{cid}"
        if not isinstance(cid, str) or not isinstance(entry, dict):
            raise ConfigError(f"{where}: an id and a mapping expected")
        extra = set(entry) - FIELDS
        if extra or "thresholds" not in entry or "verdicts" not in entry or "unit" not in entry:
            raise ConfigError(f"{where}: needs unit, thresholds and verdicts; unknown {sorted(extra)}")
        verdicts = entry["verdicts"]
        if not isinstance(verdicts, list) or not set(verdicts) <= {"fail", "warn"}:
            raise ConfigError(f"{where}: verdicts must be a list of fail and warn")
        out[cid] = {
            "id": cid,
            "action": entry.get("action") or cid,
            "trend": entry.get("trend"),
            "codes": entry.get("codes"),
            "unit": entry["unit"],
            "thresholds": str(entry["thresholds"]),
            "verdicts": list(verdicts),
        }
    return out


def entry_for(name: str, catalogue: dict | None = None) -> dict | None:
    """The declared check a record's name belongs to (exact id first, then patterns in file order)."""
    catalogue = catalogue if catalogue is not None else load()
    if name in catalogue:
        return catalogue[name]
    for cid, entry in catalogue.items():
        if any(ch in cid for ch in "*?[") and fnmatchcase(name, cid):
            return entry
    return None


def problems(catalogue: dict, actions: dict, trends: dict) -> list[str]:
    """Declared checks whose verdicts have no action entry, or whose trend section is unknown."""
    out = []
    for cid, entry in catalogue.items():
        byv = (actions.get("checks") or {}).get(entry["action"])
        for v in entry["verdicts"]:
            if not isinstance(byv, dict) or v not in byv:
                out.append(f"{cid}: no action for {v.upper()} (actions.yml checks.{entry['action']}.{v})")
        if entry["trend"] is not None and entry["trend"] not in trends:
            out.append(f"{cid}: trend section {entry['trend']!r} is not in trends.yml")
    return out
