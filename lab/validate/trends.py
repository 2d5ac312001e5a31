"""Trend checks of `invoke validate`: each GPU against its own past (lab/data/trends.yml).

The past is plain data handed in by the entry point that reads the history
database (lab.history.past; lab.validate never opens it):

    {"gpus": {uuid: {key: [{"value": 812.5, "at": "2026-12-01T10:00:00Z", "verdict": "PASS"}, ...]}},
     "error": None}

one list per GPU UUID and key, newest first, one point per earlier validate;
``sources(table)`` names the check records of validate.json each key is read
from (the figure's own check and its trend record). The keys: each figure of
``figures.checks`` (the burn-in's solo figures), ``idle temperature`` and
``ECC corrected`` (the lifetime corrected count).

A figure falling more than a set share below the median of the GPU's last N
passing points, a corrected ECC count grown since the GPU's last check, an
idle temperature risen above its own median: WARN or FAIL, the record holding
the figure, the median (or last count) and the number of past points. With
fewer past points than a check needs, a PASS record that says "not judged: N
past points, needs M" (``judged: false``), never a FAIL. Every record carries
the measured value, so the next validate has one more point.
"""

from __future__ import annotations

import functools
import statistics
from pathlib import Path

from lab.core import limits, schema
from lab.validate.verdict import FAIL, PASS, UNITS, WARN, fmt_value, check

TRENDS = Path(__file__).resolve().parents[1] / "data" / "trends.yml"
IDLE, ECC = "idle temperature", "ECC corrected"
SUFFIX = " trend"


@functools.lru_cache(maxsize=8)
def load_trends(path: Path | str = TRENDS) -> dict:
    """The thresholds, checked (lab/schemas/trends.schema.json); a WARN bound above its FAIL bound is refused."""
    from lab.core.errors import ConfigError

    data = schema.load_yaml(path, "trends")
    for part, warn, fail in (
        ("figures", "warn_drop", "fail_drop"),
        ("ecc_corrected", "warn_growth", "fail_growth"),
        ("idle_temperature", "warn_rise_c", "fail_rise_c"),
    ):
        if data[part][warn] > data[part][fail]:
            raise ConfigError(f"{path}: {part}: {warn} {data[part][warn]} is above {fail} {data[part][fail]}")
    return data


def sources(table: dict) -> dict[str, list[str]]:
    """key -> the names of the check records its past points are read from (plain data for lab.history.past)."""
    out = {m: [m, m + SUFFIX] for m in table["figures"]["checks"]}
    out[IDLE] = [IDLE, IDLE + SUFFIX]
    out[ECC] = [ECC + SUFFIX]
    return out


def depth(table: dict) -> int:
    """How many past points per GPU and key the checks may read (the widest window)."""
    return max(table["figures"]["window"], table["idle_temperature"]["window"], table["ecc_corrected"]["min_points"])


_number = limits.measurement  # a finite float of a past record, else None


def points(past: dict | None, uuid: str | None, key: str) -> list[dict]:
    """The GPU's past points of ``key`` with a usable value, newest first."""
    if not isinstance(past, dict) or not uuid:
        return []
    gpus = past.get("gpus")
    series = gpus.get(uuid, {}).get(key) if isinstance(gpus, dict) and isinstance(gpus.get(uuid), dict) else None
    out = []
    for p in series if isinstance(series, list) else ():
        v = _number(p.get("value")) if isinstance(p, dict) else None
        if v is not None:
            out.append({"value": v, "verdict": p.get("verdict"), "at": p.get("at")})
    return out


def _not_judged(name: str, measured, unit, have: int, need: int, why: str | None = None) -> dict:
    reason = why or f"not judged: {have} past point(s), needs {need}"
    return check(name, PASS, measured, f"{need}+ past points", reason, unit, judged=False, past_points=have, needs=need)


def _falling(metric: str, value: float, pts: list[dict], cfg: dict) -> dict:
    name, unit = metric + SUFFIX, UNITS.get(metric)
    good = [p["value"] for p in pts if p["verdict"] == PASS][: cfg["window"]]
    if len(good) < cfg["min_points"]:
        return _not_judged(name, value, unit, len(good), cfg["min_points"])
    med = statistics.median(good)
    lo_warn, lo_fail = med * (1 - cfg["warn_drop"]), med * (1 - cfg["fail_drop"])
    share = (value / med) if med else float("nan")
    text = (
        f"{fmt_value(value)} {unit or ''} is {share:.0%} of its own median {fmt_value(med)} of {len(good)} passing "
        f"point(s)"
    ).replace("  ", " ")
    verdict = FAIL if value < lo_fail else WARN if value < lo_warn else PASS
    if verdict != PASS:
        drop = cfg["fail_drop"] if verdict == FAIL else cfg["warn_drop"]
        text += f" ({verdict} below {1 - drop:.0%})"
    return check(
        name,
        verdict,
        value,
        f">= {fmt_value(lo_warn)} {unit or ''}".rstrip(),
        text,
        unit,
        judged=True,
        median=med,
        past_points=len(good),
    )


def _idle(value: float, pts: list[dict], cfg: dict) -> dict:
    name = IDLE + SUFFIX
    good = [p["value"] for p in pts if p["verdict"] == PASS][: cfg["window"]]
    if len(good) < cfg["min_points"]:
        return _not_judged(name, value, "C", len(good), cfg["min_points"])
    med = statistics.median(good)
    rise = value - med
    verdict = FAIL if rise >= cfg["fail_rise_c"] else WARN if rise >= cfg["warn_rise_c"] else PASS
    return check(
        name,
        verdict,
        value,
        f"< {fmt_value(med + cfg['warn_rise_c'])} C",
        f"{fmt_value(value)} C at idle, {rise:+.1f} C from its own median {fmt_value(med)} C of {len(good)} "
        f"passing point(s)",
        "C",
        judged=True,
        median=med,
        past_points=len(good),
    )


def _ecc(count: float, pts: list[dict], cfg: dict) -> dict:
    name = ECC + SUFFIX
    if len(pts) < cfg["min_points"]:
        return _not_judged(name, count, "errors", len(pts), cfg["min_points"])
    last = pts[0]["value"]
    grew = count - last
    when = f" ({pts[0]['at']})" if pts[0].get("at") else ""
    if grew < 0:
        return check(
            name,
            PASS,
            count,
            f"< +{cfg['warn_growth']}",
            f"{fmt_value(count)} corrected ECC error(s), "
            f"{fmt_value(last)} at the last check{when}: the counter was cleared",
            "errors",
            judged=True,
            last=last,
            past_points=len(pts),
        )
    verdict = FAIL if grew >= cfg["fail_growth"] else WARN if grew >= cfg["warn_growth"] else PASS
    return check(
        name,
        verdict,
        count,
        f"< +{cfg['warn_growth']} since the last check",
        f"{fmt_value(count)} corrected ECC error(s) over the GPU's life, {grew:+.0f} since the last check{when}",
        "errors",
        judged=True,
        last=last,
        past_points=len(pts),
    )


def gpu_trends(gpu: dict, bg: dict | None, past: dict | None, table: dict) -> list[dict]:
    """The trend records of one GPU (its probe record ``gpu``, its burn-in entry ``bg``); [] without a past
    (``past`` None: no history database was asked)."""
    if past is None:
        return []
    uuid = gpu.get("uuid") if isinstance(gpu.get("uuid"), str) else None
    why = None
    if isinstance(past, dict) and past.get("error"):
        why = f"not judged: the history could not be read: {str(past['error'])[:200]}"
    elif not uuid:
        why = "not judged: the GPU reports no UUID to find its past by"
    out = []
    figures = table["figures"]
    solo = (bg or {}).get("solo") or {}
    for metric in figures["checks"]:
        value = _number(solo.get(metric))
        if value is None:
            continue
        if why:
            out.append(_not_judged(metric + SUFFIX, value, UNITS.get(metric), 0, figures["min_points"], why))
        else:
            out.append(_falling(metric, value, points(past, uuid, metric), figures))
    idle = ((bg or {}).get("idle") or {}).get("temp_c_max", gpu.get("temperature_c"))
    if (t := _number(idle)) is not None:
        cfg = table["idle_temperature"]
        out.append(
            _not_judged(IDLE + SUFFIX, t, "C", 0, cfg["min_points"], why)
            if why
            else _idle(t, points(past, uuid, IDLE), cfg)
        )
    ecc = gpu.get("ecc") or {}
    if (n := _number(ecc.get("corrected_aggregate"))) is not None:
        cfg = table["ecc_corrected"]
        out.append(
            _not_judged(ECC + SUFFIX, n, "errors", 0, cfg["min_points"], why)
            if why
            else _ecc(n, points(past, uuid, ECC), cfg)
        )
    return out


def uuids(snapshots: dict, split) -> list[str]:
    """The GPU UUIDs of gathered snapshots (``split``: lab.validate.gpuchecks.split_snapshot)."""
    out = []
    for snap in snapshots.values():
        if not isinstance(snap, dict):
            continue
        probe, _ = split(snap)
        for g in probe.get("gpus") or [] if isinstance(probe, dict) else []:
            u = g.get("uuid") if isinstance(g, dict) else None
            if isinstance(u, str) and u and u not in out:
                out.append(u)
    return out
