"""The checks of `invoke validate`, each a function from plain data (a host's
probe and burn-in documents, the references) to check records (lab.validate.verdict):
XID events, per GPU health (the load behaviour and burn-in metrics of
lab.validate.loadchecks among them), and each GPU against the fleet median of
its model. lab.validate.evaluation.evaluate runs them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from lab.core.errors import line_of
from lab.validate.gpurefs import model_key, model_label
from lab.validate.linkchecks import LinkWindow, interconnect_checks
from lab.validate.loadchecks import load_checks, metric_checks, power_limit_checks
from lab.validate.verdict import FAIL, PASS, UNITS, WARN, check, fmt_value, host_field, percent, range_text


# --------------------------------------------------------------------------- snapshot access


def split_snapshot(doc: dict) -> tuple[dict, dict | None]:
    """(probe document, burn-in document or None) of a snapshot."""
    if doc.get("kind") == "gpulab-burnin":
        return doc.get("probe") or {}, doc
    return doc, None


# --------------------------------------------------------------------------- XID events (host and GPU)


def _xid_name(refs: dict, xid: int) -> str:
    return refs["checks"]["xid"].get("names", {}).get(str(xid), "see NVIDIA's XID catalogue")


# what lets the runner read the kernel log (runner.burnin_xid.read_kernel_log: journalctl -k -b, then dmesg)
KERNEL_LOG_FIX = (
    "run the runner as root or with CAP_SYSLOG, or set kernel.dmesg_restrict=0 (sysctl), or let its user "
    "read the journal (group systemd-journal or adm)"
)


def kernel_log_checks(xid: dict | None) -> list[dict]:
    """The host's "kernel log" FAIL when the XID section names no kernel log read (``source`` None): its XIDs
    were not checked, which never counts as none seen; nothing when it names one (or there is no section)."""
    if not isinstance(xid, dict) or xid.get("source") is not None:
        return []
    why = line_of(xid.get("error") or "no log named as read", 300)
    return [
        check(
            "kernel log",
            FAIL,
            None,
            "journalctl -k -b or dmesg readable",
            f"XID events not checked: the kernel log could not be read ({why}); {KERNEL_LOG_FIX}",
        )
    ]


def xid_checks(refs: dict, events: list[dict], source: str | None, error: str | None, label: str) -> list[dict]:
    """The XID events of a GPU (or of no listed GPU: ``label``); none when no kernel log was read and no event
    is known (the host's "kernel log" check, kernel_log_checks, fails for that)."""
    xcfg = refs["checks"]["xid"]
    events = [e for e in events if e["xid"] not in set(xcfg.get("ignore", []))]
    if source is None and not events:  # not checked: no verdict of its own, never a PASS
        return []
    if not events:
        return [check(label, PASS, 0, "no XID", f"no XID event since boot ({source})")]
    fails = [e for e in events if e["xid"] in set(xcfg["fail"])]
    seen = sorted({e["xid"] for e in events})
    text = ", ".join(f"XID {x} ({_xid_name(refs, x)}) x{sum(1 for e in events if e['xid'] == x)}" for x in seen)
    new = sum(1 for e in events if e.get("during_burnin"))
    extra = f"; {new} during the burn-in" if new else ""
    verdict = FAIL if fails else WARN
    return [check(label, verdict, seen, "no XID", f"{text} since boot{extra}")]


# --------------------------------------------------------------------------- GPU checks


@dataclass
class GpuFacts:
    """What the checks of one GPU read: its probe record, its burn-in entry, the host's
    inventory record, the references, the GPU's references model and the host's XID events."""

    gpu: dict
    bg: dict | None
    host: Any
    refs: dict
    model: str | None
    xid: dict | None
    window: LinkWindow | None = None
    gpus_on_host: int = 1

    @property
    def mref(self) -> dict | None:
        """The references of the GPU's model (None: the references have no such model)."""
        return self.refs["models"].get(self.model) if self.model else None


def _model_checks(g: GpuFacts) -> list[dict]:
    """The GPU model against the inventory; a WARN when the references have no such model."""
    gpu, host, model, refs, mref = g.gpu, g.host, g.model, g.refs, g.mref
    out: list[dict] = []
    want_model = host_field(host, "gpu_model", "auto") if host is not None else "auto"
    if want_model not in (None, "auto"):
        ok = model_label(gpu.get("name")) == model_label(want_model) or (
            model is not None and model_key(want_model, refs) == model
        )
        out.append(
            check(
                "model",
                PASS if ok else FAIL,
                gpu.get("name"),
                want_model,
                f"{gpu.get('name')} as the inventory says"
                if ok
                else f"{gpu.get('name')} found, the inventory says {want_model}",
            )
        )
    if mref is None:
        out.append(
            check(
                "references",
                WARN,
                gpu.get("name"),
                "a model in the references",
                f"no references for {gpu.get('name')}: only health and fleet checks apply",
            )
        )
    return out


def _pcie_checks(g: GpuFacts) -> list[dict]:
    """The PCIe link against the inventory's gpulab_pcie, else the model's minimum."""
    gpu, host, model, mref, c = g.gpu, g.host, g.model, g.mref, g.refs["checks"]
    out: list[dict] = []
    pcie = gpu.get("pcie") or {}
    want = host_field(host, "pcie", None) if host is not None else None
    want_src = "inventory gpulab_pcie"
    if not want and mref and mref.get("pcie_min"):
        want, want_src = mref["pcie_min"], f"{model} minimum"
    load = (g.bg or {}).get("load") or {}
    if want:
        width = pcie.get("width_current")
        if load.get("pcie_width_min") is not None:
            width = min(width, load["pcie_width_min"]) if width is not None else load["pcie_width_min"]
        gen_load = load.get("pcie_gen_max")
        gen_cur = pcie.get("gen_current")
        gen_max = pcie.get("gen_max")
        exp = f">= Gen{want['gen']} x{want['width']} ({want_src})"
        measured = {
            "gen_current": gen_cur,
            "gen_max": gen_max,
            "gen_under_load": gen_load,
            "width": width,
            "width_max": pcie.get("width_max"),
        }
        if width is None and gen_cur is None and gen_max is None and gen_load is None:
            verdict, text = WARN, "PCIe link not readable"
        elif width is not None and width < want["width"]:
            verdict, text = (
                FAIL,
                f"link trained down to x{width} (expected x{want['width']}; the GPU can do x{pcie.get('width_max')})",
            )
        elif gen_load is not None and gen_load < want["gen"]:
            verdict, text = FAIL, f"link runs at Gen{gen_load} under load (expected Gen{want['gen']})"
        elif gen_max is not None and gen_max < want["gen"]:
            verdict, text = FAIL, f"link can train only to Gen{gen_max} (expected Gen{want['gen']})"
        elif (
            gen_load is None
            and gen_cur is not None
            and gen_cur < want["gen"]
            and not (c.get("pcie", {}).get("idle_gen_ok", True) and gen_max is not None)
        ):
            verdict, text = (
                WARN,
                f"link at Gen{gen_cur} now and no load measurement to tell idle power saving from a fault",
            )
        else:
            gen = gen_load or max((x for x in (gen_cur, gen_max) if x is not None), default="?")
            note = (
                f" (Gen{gen_cur} at idle: power saving)"
                if gen_cur is not None and gen_load is None and gen_cur < want["gen"]
                else ""
            )
            verdict, text = PASS, f"Gen{gen} x{width}{note}"
        out.append(check("PCIe link", verdict, measured, exp, text))
    return out


def _link_checks(g: GpuFacts) -> list[dict]:
    """NVLink links and errors, PCIe replays and AER (lab.validate.linkchecks)."""
    return interconnect_checks(g.gpu, g.host, g.refs, g.model, g.window, g.gpus_on_host)


def ecc_checks(g: GpuFacts) -> list[dict]:
    """ECC mode and uncorrected ECC errors."""
    gpu, mref = g.gpu, g.mref
    out: list[dict] = []
    ecc = gpu.get("ecc") or {}
    if ecc.get("enabled") is False and mref and mref.get("ecc_expected"):
        out.append(check("ECC mode", WARN, False, "enabled", "ECC is disabled on a model that has it"))
    uv, ua = ecc.get("uncorrected_volatile"), ecc.get("uncorrected_aggregate")
    if uv is not None or ua is not None:
        if uv:
            out.append(
                check(
                    "ECC uncorrected",
                    FAIL,
                    {"volatile": uv, "aggregate": ua},
                    "0",
                    f"{uv} uncorrected ECC error(s) since the driver loaded",
                )
            )
        elif ua:
            out.append(
                check(
                    "ECC uncorrected",
                    WARN,
                    {"volatile": uv, "aggregate": ua},
                    "0",
                    f"{ua} uncorrected ECC error(s) over the GPU's life, none since the driver loaded",
                )
            )
        else:
            out.append(
                check("ECC uncorrected", PASS, {"volatile": uv, "aggregate": ua}, "0", "no uncorrected ECC error")
            )
    return out


def memory_checks(g: GpuFacts) -> list[dict]:
    """Retired pages (pre-Ampere) and row remapping (Ampere and later)."""
    gpu, c = g.gpu, g.refs["checks"]
    out: list[dict] = []
    rp = gpu.get("retired_pages") or {}
    if any(rp.get(k) is not None for k in ("single_bit", "double_bit", "pending")):
        total = (rp.get("single_bit") or 0) + (rp.get("double_bit") or 0)
        cfg = c["retired_pages"]
        m = {"single_bit": rp.get("single_bit"), "double_bit": rp.get("double_bit"), "pending": rp.get("pending")}
        if rp.get("pending"):
            out.append(
                check(
                    "retired pages",
                    FAIL,
                    m,
                    f"< {cfg['warn']}, none pending",
                    f"page retirement pending: reset the GPU ({total} retired)",
                )
            )
        elif total >= cfg["fail"]:
            out.append(check("retired pages", FAIL, m, f"< {cfg['fail']}", f"{total} retired pages: replace the GPU"))
        elif total >= cfg["warn"]:
            out.append(check("retired pages", WARN, m, f"< {cfg['warn']}", f"{total} retired page(s)"))
        else:
            out.append(check("retired pages", PASS, m, f"< {cfg['warn']}", "no retired page"))
    rr = gpu.get("row_remap") or {}
    if any(rr.get(k) is not None for k in ("correctable", "uncorrectable", "pending", "failure")):
        m = dict(rr)
        if rr.get("failure"):
            out.append(
                check("row remapping", FAIL, m, "no failure, none pending", "row remapping failed: replace the GPU")
            )
        elif rr.get("pending"):
            out.append(
                check(
                    "row remapping",
                    FAIL,
                    m,
                    "no failure, none pending",
                    f"row remap pending ({rr.get('uncorrectable')} uncorrectable): reset the GPU",
                )
            )
        elif rr.get("uncorrectable"):
            out.append(
                check(
                    "row remapping",
                    WARN,
                    m,
                    "0 uncorrectable",
                    f"{rr['uncorrectable']} row(s) remapped for uncorrectable errors",
                )
            )
        else:
            out.append(
                check(
                    "row remapping",
                    PASS,
                    m,
                    "no failure, none pending",
                    f"{rr.get('correctable') or 0} correctable, 0 uncorrectable remapped rows",
                )
            )
    return out


def gpu_xid_checks(g: GpuFacts) -> list[dict]:
    """The XID events of this GPU."""
    gpu, refs, xid = g.gpu, g.refs, g.xid
    out: list[dict] = []
    if xid is not None:
        mine = [e for e in xid.get("events", []) if e.get("gpu") == gpu.get("index")]
        out += xid_checks(refs, mine, xid.get("source"), xid.get("error"), "XID events")
    return out


def _load_checks(g: GpuFacts) -> list[dict]:
    """Temperatures, throttling, SM clock and power (lab.validate.loadchecks)."""
    return load_checks(g.gpu, g.bg, g.refs["checks"], g.mref)


def _power_limit_checks(g: GpuFacts) -> list[dict]:
    return power_limit_checks(g.gpu)


def _metric_checks(g: GpuFacts) -> list[dict]:
    return metric_checks(g.bg, g.mref)


# The checks of one GPU, in the order a verdict lists them: each a small unit from GpuFacts to check records.
GPU_CHECKS = (
    _model_checks,
    _pcie_checks,
    _link_checks,
    ecc_checks,
    memory_checks,
    gpu_xid_checks,
    _load_checks,
    _power_limit_checks,
    _metric_checks,
)


def gpu_checks(
    gpu: dict,
    bg: dict | None,
    host,
    refs: dict,
    model: str | None,
    xid: dict | None,
    window: LinkWindow | None = None,
    gpus_on_host: int = 1,
) -> list[dict]:
    """Health, load behaviour and burn-in metrics of one GPU (GPU_CHECKS)."""
    facts = GpuFacts(gpu, bg, host, refs, model, xid, window, gpus_on_host)
    return [record for unit in GPU_CHECKS for record in unit(facts)]


# --------------------------------------------------------------------------- fleet


def fleet_medians(per_gpu: list[tuple[str, dict, dict | None]], refs: dict) -> dict:
    """model -> metric -> {median, n} over every GPU's solo burn-in metrics."""
    vals: dict[str, dict[str, list[float]]] = {}
    for model, _gpu, bg in per_gpu:
        if bg is None or model is None:
            continue
        for metric, v in (bg.get("solo") or {}).items():
            if isinstance(v, (int, float)) and not math.isnan(v):
                vals.setdefault(model, {}).setdefault(metric, []).append(float(v))
    return {m: {k: {"median": statistics.median(v), "n": len(v)} for k, v in d.items()} for m, d in vals.items()}


def fleet_checks(model: str | None, bg: dict | None, medians: dict, refs: dict) -> list[dict]:
    if bg is None or model is None:
        return []
    f = refs["fleet"]
    out = []
    for metric, value in sorted((bg.get("solo") or {}).items()):
        m = medians.get(model, {}).get(metric)
        if not m or m["n"] < f["min_gpus"] or value is None:
            continue
        med = m["median"]
        unit = UNITS.get(metric)
        lo = med * (1 - f["lower"]) if f["lower"] is not None else None
        wlo = med * (1 - f["warn_lower"]) if f["warn_lower"] is not None else None
        exp = range_text(lo, None, unit)
        label = f"{metric} vs fleet"
        text = f"{percent(value, med)} of the median {fmt_value(med)} of {m['n']} {model} GPUs"
        if lo is not None and value < lo:
            out.append(check(label, FAIL, value, exp, f"slow outlier: {text}", unit))
        elif wlo is not None and value < wlo:
            out.append(check(label, WARN, value, exp, f"slower than its peers: {text}", unit))
        else:
            out.append(check(label, PASS, value, exp, text, unit))
    return out
