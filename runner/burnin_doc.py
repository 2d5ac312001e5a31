"""The burn-in document (burnin.json, schema in runner/README.md): per GPU and
phase the measured figures and telemetry summaries, the host metrics, the XID
events, its outputs (burnin.json, probe.json, SHA256SUMS) and the human summary.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from pathlib import Path

from runner import __version__, rundir, telemetry

SCHEMA = 1


# test kind -> metric name in the document (and in the references)
def metric_name(test: str, dtype: str | None = None) -> str:
    return {
        "matmul": f"matmul_{dtype}_tflops",
        "membw": "memory_bandwidth_gbs",
        "h2d": "h2d_bandwidth_gbs",
        "d2h": "d2h_bandwidth_gbs",
        "resnet50": "resnet50_images_per_s",
        "nccl": "nccl_allreduce_busbw_gbs",
    }[test]


# tests that load the GPU (their windows make the "under load" telemetry)
LOAD_TESTS = {"matmul", "membw", "resnet50", "burn"}


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---------------------------------------------------------------- the document


def _windows(records: list[dict], gpu: int, phases: set[str]) -> list[tuple[float, float]]:
    out = []
    for r in records:
        if r.get("phase") not in phases or r.get("test") not in LOAD_TESTS:
            continue
        if r.get("gpu") != gpu and gpu not in (r.get("gpus") or []):
            continue
        if r.get("start") and r.get("end"):
            out.append((r["start"], r["end"]))
    return out


def _summ(rows: list[dict], gpu: int, windows: list[tuple[float, float]]):
    keep = [r for r in rows if r.get("gpu") == gpu and any(a <= (r.get("time_s") or 0) <= b for a, b in windows)]
    return telemetry.summarize(keep).get(gpu)


def build_document(
    level, selected, probe_doc, xid_before, xid_after, records, rows, idle_window, sampler, start_iso, t0, notes
) -> dict:
    before = {(e["pci"], e["xid"], e["uptime_s"], e["text"]) for e in xid_before["events"]}
    for e in xid_after["events"]:
        e["during_burnin"] = (e["pci"], e["xid"], e["uptime_s"], e["text"]) not in before
    names = {g["index"]: g for g in probe_doc["gpus"]}
    gpus = {str(i): _gpu_entry(i, names.get(i, {}), records, rows, idle_window) for i in selected}
    host = _host_metrics(records, gpus)
    failed = [r for r in records if not r.get("ok")]
    if failed:
        outcome = "failed"
        first = failed[0]
        where = f"GPU {first['gpu']}" if first.get("gpu") is not None else "host"
        reason = f"{len(failed)} test(s) failed; first: {first['test']}{' ' + first['dtype'] if first.get('dtype') else ''} on {where}: {first.get('error')}"
    else:
        outcome = "completed"
        reason = (
            f"{level}: {sum(1 for r in records if r.get('test') != 'device')} load test(s) ran"
            if records
            else f"{level}: health only"
        )
    return {
        "schema": SCHEMA,
        "kind": "gpulab-burnin",
        "runner_version": __version__,
        "host": probe_doc["host"]["hostname"],
        "level": level,
        "gpus_selected": selected,
        "start": start_iso,
        "end": now_iso(),
        "duration_s": round(time.time() - t0, 1),
        "outcome": outcome,
        "reason": reason,
        "notes": notes,
        "probe": probe_doc,
        "xid": {
            **xid_after,
            "before_load": len(xid_before["events"]),
            "new_during_burnin": sum(1 for e in xid_after["events"] if e.get("during_burnin")),
        },
        "gpus": gpus,
        "host_metrics": host,
        "results": records,
        "telemetry": {
            "file": "telemetry.csv",
            "interval_s": sampler.interval_s if sampler else None,
            "samples": sampler.samples if sampler else 0,
            "note": sampler.note if sampler else None,
            "error": sampler.error if sampler else None,
        },
    }


def _gpu_entry(i: int, g: dict, records: list[dict], rows, idle_window) -> dict:
    """One GPU's entry: its solo and concurrent figures, telemetry summaries at idle and under load, the burn."""
    solo, conc = {}, {}
    for r in records:
        if r.get("test") in ("device", "burn") or r.get("gpu") != i or r.get("value") is None or not r.get("ok"):
            continue
        target = solo if r.get("phase") == "solo" else conc if r.get("phase") == "concurrent" else None
        if target is not None:
            target[metric_name(r["test"], r.get("dtype"))] = round(float(r["value"]), 3)
    return {
        "index": i,
        "name": g.get("name"),
        "uuid": g.get("uuid"),
        "solo": solo,
        "concurrent": conc,
        "idle": _summ(rows, i, [idle_window]),
        "load": _summ(rows, i, _windows(records, i, {"solo", "concurrent", "burn"})),
        "load_concurrent": _summ(rows, i, _windows(records, i, {"concurrent", "burn"})),
        "burn": next(
            (
                {
                    "bf16_tflops_median": round(r["value"], 3),
                    "bf16_tflops_min": round(r["detail"].get("min", 0), 3),
                    "minutes": round((r["end"] - r["start"]) / 60, 2),
                }
                for r in records
                if r.get("test") == "burn" and r.get("gpu") == i and r.get("ok")
            ),
            None,
        ),
    }


def _host_metrics(records: list[dict], gpus: dict) -> dict:
    """Host-wide figures (NCCL, the all-GPU tests as ``*_all``) and the sums of the GPUs' concurrent figures
    (``*_sum``)."""
    host = {}
    for r in records:
        if r.get("ok") and r.get("value") is not None and r.get("phase") == "host":
            key = metric_name(r["test"], r.get("dtype"))
            host[key if r["test"] == "nccl" else f"{key}_all"] = round(float(r["value"]), 3)
    conc_sum = {}
    for g in gpus.values():
        for k, v in g["concurrent"].items():
            conc_sum[k] = round(conc_sum.get(k, 0.0) + v, 3)
    for k, v in conc_sum.items():
        host.setdefault(f"{k}_sum", v)
    return host


def no_gpu_document(level, probe_doc, xid, start_iso, t0) -> dict:
    reason = probe_doc.get("nvidia") or "no NVIDIA driver/GPU found"
    return {
        "schema": SCHEMA,
        "kind": "gpulab-burnin",
        "runner_version": __version__,
        "host": probe_doc["host"]["hostname"],
        "level": level,
        "gpus_selected": [],
        "start": start_iso,
        "end": now_iso(),
        "duration_s": round(time.time() - t0, 1),
        "outcome": "no_gpu",
        "reason": reason,
        "notes": [],
        "probe": probe_doc,
        "xid": xid,
        "gpus": {},
        "host_metrics": {},
        "results": [],
        "telemetry": {"file": "telemetry.csv", "interval_s": None, "samples": 0, "note": reason, "error": None},
    }


def write_outputs(out: Path, doc: dict) -> None:
    rundir.write_new(out / "probe.json", (json.dumps(doc["probe"], indent=2, sort_keys=True) + "\n").encode())
    rundir.write_new(out / "burnin.json", (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    rundir.write_sums(out)


def human_summary(doc: dict) -> str:
    lines = [f"burn-in {doc['level']} on {doc['host']}: {doc['outcome']} ({doc['reason']})"]
    for key, g in doc["gpus"].items():
        lines.append(f"GPU {key} {g.get('name')} {g.get('uuid')}")
        for phase in ("solo", "concurrent"):
            if g[phase]:
                lines.append(f"  {phase:10s} " + ", ".join(f"{k}={v:g}" for k, v in sorted(g[phase].items())))
        load = g.get("load") or {}
        if load:
            lines.append(
                f"  under load: power max {load.get('power_w_max')} W, temp max {load.get('temp_c_max')} C, "
                f"SM clock median {load.get('sm_clock_mhz_median')} MHz, throttle {sorted(load.get('throttle_reasons', {}))}"
            )
    if doc["host_metrics"]:
        lines.append("host: " + ", ".join(f"{k}={v:g}" for k, v in sorted(doc["host_metrics"].items())))
    x = doc["xid"]
    lines.append(
        f"XID events since boot: {len(x.get('events', []))} ({x.get('source') or 'kernel log unreadable: ' + str(x.get('error'))})"
    )
    return "\n".join(lines)
