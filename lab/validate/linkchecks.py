"""Interconnect checks of `invoke validate`: NVLink links up against the number expected, NVLink
replay, recovery and CRC errors, PCIe replays and PCIe AER errors of each GPU, judged from the
probe's counters (runner/probe_link.py) against the thresholds of the references
(``checks.interconnect`` of inventory/references/gpus.yml, each with its source).

The probe's counters run since the driver (NVLink, PCIe replay) or the kernel (AER) loaded: on
their own they tell that errors happened, not when. A burn-in reads them again after its load
(``interconnect_after``), so that errors of the load window, and their rates, are told apart
from older ones; DCGM's own limits are rates over a window too.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.validate.verdict import FAIL, PASS, WARN, check

NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")
AER_KINDS = ("correctable", "nonfatal", "fatal")


@dataclass
class LinkWindow:
    """The counters one GPU showed after the burn-in's load, and the seconds since the probe."""

    after: dict
    seconds: float


def link_window(probe: dict, burnin: dict | None, index) -> LinkWindow | None:
    """The load window of one GPU from a burn-in document, or None (no burn-in, older runner,
    counters not read after the load, or times that do not make a window)."""
    after = (burnin or {}).get("interconnect_after")
    after = after if isinstance(after, dict) else {}
    gpus = after.get("gpus") if isinstance(after.get("gpus"), dict) else {}
    mine = gpus.get(str(index))
    start, end = _seconds(probe.get("collected_at")), _seconds(after.get("collected_at"))
    if not isinstance(mine, dict) or start is None or end is None or end <= start:
        return None
    return LinkWindow(mine, end - start)


def _seconds(stamp) -> float | None:
    import datetime as _dt

    if not isinstance(stamp, str):
        return None
    try:
        return _dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _delta(before, after):
    """after - before of a counter; None when either is unknown or the counter went back (reload)."""
    if not isinstance(before, int) or not isinstance(after, int) or after < before:
        return None
    return after - before


def _inventory_links(host) -> int | None:
    """The host's gpulab_nvlink_links (an inventory Host keeps it in ``vars``; a dict says ``nvlink_links``)."""
    if host is None:
        return None
    if isinstance(host, dict):
        return host.get("nvlink_links", host.get("gpulab_nvlink_links"))
    return (getattr(host, "vars", None) or {}).get("gpulab_nvlink_links")


def _expected_links(host, mref: dict | None, model: str | None) -> tuple[int | None, str | None]:
    want = _inventory_links(host)
    if want is not None:
        return int(want), "inventory gpulab_nvlink_links"
    ref = (mref or {}).get("nvlink")
    if ref is not None:
        return int(ref["links"]), f"{model} reference: {ref['source']}"
    return None, None


def _judge(label: str, measured, exp: str):
    """``said(verdict, text)``: the one check of ``label`` that a ladder of thresholds ends in, as a list."""
    return lambda verdict, text: [check(label, verdict, measured, exp, text)]


def nvlink_link_checks(gpu: dict, host, mref: dict | None, model: str | None, gpus_on_host: int) -> list[dict]:
    """NVLink links up against the inventory's gpulab_nvlink_links, else the model's reference."""
    if "nvlink" not in gpu:
        return []  # a probe from a runner that did not read NVLink
    nv = gpu["nvlink"]
    want, src = _expected_links(host, mref, model)
    from_inventory = src == "inventory gpulab_nvlink_links"
    exp = f"{want} up ({src})" if want is not None else "all links up"
    if nv is None:
        if not want:
            return [
                check("NVLink links", PASS, 0, exp, "no NVLink on this GPU" + (", as expected" if want == 0 else ""))
            ]
        verdict = FAIL if from_inventory else WARN
        return [
            check(
                "NVLink links",
                verdict,
                0,
                exp,
                f"NVML reports no NVLink on this GPU; {want} link(s) expected"
                + ("" if from_inventory else " (a PCIe card of this model? set gpulab_nvlink_links)"),
            )
        ]
    up, present, down = nv.get("links_up") or 0, nv.get("links_present") or 0, nv.get("links_down") or []
    measured = {"up": up, "present": present, "down": down}
    said = _judge("NVLink links", measured, exp)
    unread = [x["link"] for x in nv.get("links") or [] if x.get("up") is None]
    tail = (f"; down: {', '.join(map(str, down))}" if down else "") + (
        f"; state not readable: {', '.join(map(str, unread))}" if unread else ""
    )
    if want is None:
        verdict = PASS if up == present else WARN
        return said(verdict, f"{up} of {present} links up{tail} (no expected count)")
    if up == want:
        return said(PASS, f"{up} of {present} links up")
    if up > want:
        return said(WARN, f"{up} links up, more than the {want} expected: fix the expectation")
    if not from_inventory and gpus_on_host < 2 and up == 0:
        return said(
            WARN,
            f"no link up on a host with one GPU (no NVLink peer here?); {want} expected: "
            "set gpulab_nvlink_links for this host",
        )
    return said(FAIL, f"{up} of {want} expected links up{tail}")


def nvlink_error_checks(gpu: dict, limits: dict, window: LinkWindow | None) -> list[dict]:
    """NVLink replay, recovery and CRC errors: since the driver loaded, and in the load window."""
    nv = gpu.get("nvlink")
    if not nv or not any(nv.get("errors", {}).get(k) is not None for k in NVLINK_COUNTERS):
        return []
    cfg = limits["nvlink"]
    total = {k: nv["errors"].get(k) for k in NVLINK_COUNTERS}
    rr_total = (total["replay"] or 0) + (total["recovery"] or 0)
    measured: dict = {"since_load": total}
    exp = f"no replay or recovery error under load; CRC below {cfg['window_crc_per_s_fail']:g}/s ({cfg['source']})"
    said = _judge("NVLink errors", measured, exp)
    after = (window.after.get("nvlink_errors") or {}) if window else {}
    d = {k: _delta(total[k], after.get(k)) for k in NVLINK_COUNTERS} if after else {}
    if d and all(v is not None for v in d.values()):
        measured.update(in_window=d, window_s=round(window.seconds, 1))
        rr, crc = d["replay"] + d["recovery"], d["crc_flit"] + d["crc_data"]
        rate = crc / window.seconds
        if rr >= cfg["window_replay_recovery_fail"]:
            return said(
                FAIL,
                f"{d['replay']} replay and {d['recovery']} recovery error(s) during the burn-in "
                f"({window.seconds:.0f} s)",
            )
        if rate >= cfg["window_crc_per_s_fail"]:
            return said(FAIL, f"{rate:.0f} CRC errors/s during the burn-in")
        if crc >= cfg["window_crc_warn"]:
            return said(WARN, f"{crc} CRC error(s) during the burn-in ({rate:.2g}/s, below the failure rate)")
    if rr_total >= cfg["total_replay_recovery_warn"]:
        when = (
            "before the burn-in" if "in_window" in measured else "since the driver loaded (no load window to date them)"
        )
        return said(WARN, f"{total['replay'] or 0} replay and {total['recovery'] or 0} recovery error(s) {when}")
    crc_total = (total["crc_flit"] or 0) + (total["crc_data"] or 0)
    where = " and none during the burn-in" if "in_window" in measured else ""
    return said(PASS, f"no replay or recovery error{where}; {crc_total} CRC error(s) since the driver loaded")


def pcie_replay_checks(gpu: dict, limits: dict, window: LinkWindow | None) -> list[dict]:
    """The GPU's PCIe replay counter: since the driver loaded, and in the load window."""
    count = (gpu.get("pcie") or {}).get("replay_count")
    if not isinstance(count, int):
        return []
    cfg = limits["pcie_replay"]
    exp = (
        f"< {cfg['window_fail']} in the burn-in and <= {cfg['window_per_min_warn']}/min; "
        f"< {cfg['total_warn']} since the driver loaded ({cfg['source']})"
    )
    measured: dict = {"since_load": count}
    said = _judge("PCIe replays", measured, exp)
    d = _delta(count, window.after.get("pcie_replay_count")) if window else None
    if d is not None:
        per_min = d / (window.seconds / 60.0)
        measured.update(in_window=d, window_s=round(window.seconds, 1))
        if d >= cfg["window_fail"]:
            return said(FAIL, f"{d} PCIe replays during the burn-in ({per_min:.1f}/min)")
        if per_min > cfg["window_per_min_warn"]:
            return said(WARN, f"{d} PCIe replays during the burn-in: {per_min:.1f}/min")
    if count >= cfg["total_warn"]:
        return said(WARN, f"{count} PCIe replays since the driver loaded")
    where = f", {d} during the burn-in" if d is not None else ""
    return said(PASS, f"{count} PCIe replay(s) since the driver loaded{where}")


def _aer_totals(aer: dict | None) -> dict:
    return {k: (aer.get(k) or {}).get("total", 0) for k in AER_KINDS} if aer else {}


def _aer_measured(aer: dict, window: LinkWindow | None) -> tuple[dict, dict, dict, dict]:
    """(the measured record, the device's totals, the upstream port's, the device's counts in the load window:
    empty when the window cannot tell)."""
    dev, port = _aer_totals(aer), _aer_totals(aer.get("upstream"))
    measured: dict = {"device": dev}
    if port:
        measured["upstream"] = port
    d = {}
    if window and isinstance(window.after.get("aer"), dict):
        d = {k: _delta(dev[k], window.after["aer"].get(k)) for k in AER_KINDS}
        if all(v is not None for v in d.values()):
            measured.update(in_window=d, window_s=round(window.seconds, 1))
        else:
            d = {}
    return measured, dev, port, d


def _aer_names(part: dict | None, kind: str) -> str:
    """ " (name count, ...)" of the AER error names counted in ``part`` for ``kind``, or ""."""
    counts = ((part or {}).get(kind) or {}).get("counts") or {}
    return f" ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})" if counts else ""


def aer_checks(gpu: dict, limits: dict, window: LinkWindow | None) -> list[dict]:
    """AER error counts of the GPU's PCI device and of the port above it (since boot, and in the
    load window for the device)."""
    if "aer" not in gpu:
        return []
    cfg = limits["aer"]
    exp = (
        f"no fatal; no non-fatal under load; < {cfg['total_correctable_warn']} correctable since boot ({cfg['source']})"
    )
    aer = gpu["aer"]
    if aer is None:
        why = (gpu.get("unavailable") or {}).get("aer") or "no AER counters"
        return [check("PCIe AER", WARN, None, exp, f"not judged: {why}")]
    measured, dev, port, d = _aer_measured(aer, window)
    both = {k: dev[k] + port.get(k, 0) for k in AER_KINDS}
    said = _judge("PCIe AER", measured, exp)
    if both["fatal"] >= cfg["total_fatal_fail"]:
        where = "the GPU" if dev["fatal"] else f"the port above it ({aer['upstream']['device']})"
        return said(
            FAIL,
            f"{both['fatal']} fatal PCIe error(s) on {where} since boot"
            f"{_aer_names(aer, 'fatal') or _aer_names(aer.get('upstream'), 'fatal')}",
        )
    if d and d["nonfatal"] >= cfg["window_nonfatal_fail"]:
        return said(
            FAIL,
            f"{d['nonfatal']} non-fatal uncorrectable PCIe error(s) during the burn-in{_aer_names(aer, 'nonfatal')}",
        )
    if both["nonfatal"] >= cfg["total_nonfatal_warn"]:
        return said(
            WARN, f"{both['nonfatal']} non-fatal uncorrectable PCIe error(s) since boot{_aer_names(aer, 'nonfatal')}"
        )
    if d and d["correctable"] >= cfg["window_correctable_warn"]:
        return said(
            WARN, f"{d['correctable']} corrected PCIe error(s) during the burn-in{_aer_names(aer, 'correctable')}"
        )
    if both["correctable"] >= cfg["total_correctable_warn"]:
        return said(WARN, f"{both['correctable']} corrected PCIe error(s) since boot{_aer_names(aer, 'correctable')}")
    return said(PASS, f"no uncorrectable PCIe error; {both['correctable']} corrected since boot")


def guarded(label: str, unit, *args) -> list[dict]:
    """One unit of checks over facts a host sent; facts of the wrong shape give one WARN naming
    them, never a traceback."""
    try:
        return unit(*args)
    except (TypeError, KeyError, AttributeError, ValueError, IndexError) as exc:
        return [
            check(
                label,
                WARN,
                None,
                "facts of the documented form",
                f"not judged: the host's {label} facts are malformed ({type(exc).__name__}: {exc})"[:300],
            )
        ]


def interconnect_checks(
    gpu: dict, host, refs: dict, model: str | None, window: LinkWindow | None, gpus_on_host: int
) -> list[dict]:
    """Every interconnect check of one GPU."""
    limits = refs["checks"]["interconnect"]
    mref = refs["models"].get(model) if model else None
    return (
        guarded("NVLink links", nvlink_link_checks, gpu, host, mref, model, gpus_on_host)
        + guarded("NVLink errors", nvlink_error_checks, gpu, limits, window)
        + guarded("PCIe replays", pcie_replay_checks, gpu, limits, window)
        + guarded("PCIe AER", aer_checks, gpu, limits, window)
    )
