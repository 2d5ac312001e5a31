"""The action of every failing check of `invoke validate` (lab/data/actions.yml, checked against
lab/schemas/actions.schema.json): a DCGM result by the DCGM_FR_* names of its errors
(``dcgm_errors[].name``, ``dcgm_code``; the most invasive action of them), an XID check by the
XIDs it saw (likewise), any other check by its declared id (lab.validate.catalogue: its ``action``
key under ``checks``) and verdict, else the table's default. Every record gets its ``check_id``. The
verdicts carry it: each WARN and FAIL record's ``action``, and each host's ``actions`` (those
of the checks that gave the host its verdict), shown by the summary, validate.html and
validate.json.
"""

from __future__ import annotations

import functools
from pathlib import Path

from lab.core import schema
from lab.core.errors import ConfigError
from lab.validate import catalogue
from lab.validate.verdict import PASS

ACTIONS = Path(__file__).resolve().parents[1] / "data" / "actions.yml"
# most invasive first: the order an XID check with several XIDs picks its action by
ORDER = ("rma", "reseat", "reboot", "reset_gpu", "fix_config", "rerun")


@functools.lru_cache(maxsize=8)
def load_actions(path: Path | str = ACTIONS) -> dict:
    """The actions table, checked; every kind it uses is one it describes."""
    data = schema.load_yaml(path, "actions")
    data["xid"] = {str(k): v for k, v in data["xid"].items()}
    entries = [("default." + v, e) for v, e in data["default"].items()]
    entries += [(f"checks.{n}.{v}", e) for n, byv in data["checks"].items() for v, e in byv.items()]
    entries += [(f"xid.{x}", e) for x, e in data["xid"].items()] + [(f"dcgm.{c}", e) for c, e in data["dcgm"].items()]
    for where, entry in entries:
        for kind in (entry["action"], entry.get("escalate")):
            if kind is not None and kind not in data["kinds"]:
                raise ConfigError(f"{path}: {where}: action {kind!r} is not described under kinds")
    return data


def _action(table: dict, entry: dict, source: str) -> dict:
    return {
        "kind": entry["action"],
        "means": table["kinds"][entry["action"]],
        "do": entry["do"],
        "evidence": list(entry["evidence"]),
        "escalate": entry.get("escalate"),
        "from": source,
    }


def action_for(record: dict, table: dict) -> dict | None:
    """The action of one check record (None for a PASS)."""
    verdict = record.get("verdict")
    if verdict == PASS or verdict is None:
        return None
    codes = [e.get("name") for e in record.get("dcgm_errors") or [] if isinstance(e, dict)] + [record.get("dcgm_code")]
    known = [c for c in codes if isinstance(c, str) and c in table["dcgm"]]
    if known:
        code = min(known, key=lambda c: ORDER.index(table["dcgm"][c]["action"]))
        return _action(table, table["dcgm"][code], f"dcgm {code}")
    seen = record.get("measured")
    if str(record.get("check", "")).startswith("XID events") and isinstance(seen, list):
        known = [(str(x), table["xid"][str(x)]) for x in seen if str(x) in table["xid"]]
        if known:
            xid, entry = min(known, key=lambda k: ORDER.index(k[1]["action"]))
            out = _action(table, entry, f"xid {xid}")
            out["xids"] = {x: e["action"] for x, e in known}
            return out
    key = verdict.lower()
    entry = catalogue.entry_for(str(record.get("check", "")))  # the check's declared id and its action key
    by_verdict = table["checks"].get(entry["action"]) if entry else None
    if isinstance(by_verdict, dict) and key in by_verdict:
        return _action(table, by_verdict[key], f"checks {entry['action']}")
    return _action(table, table["default"][key], "default")


def attach_actions(data: dict, table: dict) -> dict:
    """Give every WARN and FAIL record of a validation its action, and each host the actions of
    the checks that made its verdict (in the order of its reasons, each step once)."""
    for host in data.get("hosts", {}).values():
        where = [(c["check"], c) for c in host.get("checks", [])]
        where += [
            (f"GPU {idx} {c['check']}", c) for idx, g in host.get("gpus", {}).items() for c in g.get("checks", [])
        ]
        actions, seen = [], set()
        for label, rec in where:
            entry = catalogue.entry_for(str(rec.get("check", "")))
            rec["check_id"] = entry["id"] if entry else None
            act = action_for(rec, table)
            if act is None:
                continue
            rec["action"] = act
            if rec["verdict"] == host.get("verdict") and (act["kind"], act["do"]) not in seen:
                seen.add((act["kind"], act["do"]))
                actions.append({"where": label, "verdict": rec["verdict"], **act})
        host["actions"] = actions
    return data
