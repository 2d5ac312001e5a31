"""Hardware validation: GPU health and burn-in results against references.

The core is ``evaluate`` (pure: plain data in, plain data out):

    evaluate(snapshots, inventory_hosts, references, stacks) -> Verdicts

- ``snapshots``: host name -> the host's ``runner burnin`` document (which
  holds the probe document), or a bare ``runner probe`` document, or the
  exception met while gathering it (unreachable host, runner failure).
- ``inventory_hosts``: ``lab.inventory.Host`` records or dicts with
  ``name, gpu_model, gpu_count, pcie, stack``.
- ``references``: the data of inventory/references/gpus.yml (``load_references``).
- ``stacks``: expected versions, either per host name or per stack name:
  ``{"current": {"driver": "580.105.08", "cuda": "12.8.1", "cudnn": "9.8.0.87",
  "nccl": "2.26.2", "torch": "2.7.1"}}``; a host with no entry gets a WARN.

Every check gives PASS, WARN or FAIL with the measured value, the expected
range and a reason; a GPU's verdict is its worst check, a host's the worst of
its own checks and its GPUs'. A host that could not be reached or has no
NVIDIA GPU is a FAIL with that reason.

``validate_fleet`` gathers the documents over SSH (lab.remote: install the
runner, ``python -m runner burnin --level L --json``), evaluates them and
writes ``validate.json`` and ``validate.html`` (templates/validate.html.j2);
with ``baseline=True`` it writes a references file built from the hosts
instead (``build_references``).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from lab import paths, schema, versions
from lab.mlperf import default_rules
from lab.errors import CheckFailed, ConfigError, GpulabError, HostError, RunError

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = ROOT / "inventory" / "references" / "gpus.yml"
TEMPLATES = ROOT / "templates"
SCHEMA = 1

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
_RANK = {PASS: 0, WARN: 1, FAIL: 2}
NO_GPU = "no NVIDIA GPU"

# metrics of `runner burnin`, all "higher is better"
GPU_METRICS = (
    "matmul_fp32_tflops", "matmul_tf32_tflops", "matmul_bf16_tflops", "matmul_fp16_tflops",
    "memory_bandwidth_gbs", "h2d_bandwidth_gbs", "d2h_bandwidth_gbs", "resnet50_images_per_s",
)
HOST_METRICS = ("nccl_allreduce_busbw_gbs",)
UNITS = {
    "matmul_fp32_tflops": "TFLOP/s", "matmul_tf32_tflops": "TFLOP/s", "matmul_bf16_tflops": "TFLOP/s",
    "matmul_fp16_tflops": "TFLOP/s", "memory_bandwidth_gbs": "GB/s", "h2d_bandwidth_gbs": "GB/s",
    "d2h_bandwidth_gbs": "GB/s", "resnet50_images_per_s": "images/s", "nccl_allreduce_busbw_gbs": "GB/s",
    "load_power_w": "W",
}

LEVEL_TIMEOUT_S = {"quick": 300, "standard": 3600, "burn-in": 6 * 3600}


def worst(verdicts: Iterable[str]) -> str:
    out = PASS
    for v in verdicts:
        if _RANK[v] > _RANK[out]:
            out = v
    return out


# --------------------------------------------------------------------------- data


def load_references(path: Path | str = REFERENCES) -> dict:
    """The references file, checked against lab/schemas/gpu-references.schema.json."""
    data = schema.load_yaml(path, "gpu-references")
    for name, model in data["models"].items():
        if model_label(name) != name:
            raise ConfigError(f"{path}: models.{name}: not a device name of lab/data/devices.yml "
                              f"(it calls this model {model_label(name)})")
        for metric, ref in model["metrics"].items():
            where = f"{path}: models.{name}.metrics.{metric}"
            if ref.get("scope", "host" if metric in HOST_METRICS else "gpu") != ("host" if metric in HOST_METRICS else "gpu"):
                raise ConfigError(f"{where}: scope {ref.get('scope')!r} does not fit this metric")
            for side in ("lower", "upper"):
                w, f = ref.get(f"warn_{side}"), ref.get(side)
                if w is not None and f is not None and w > f:
                    raise ConfigError(f"{where}: warn_{side} {w} is wider than {side} {f}")
    checks = data["checks"]
    if checks["temperature"]["idle_warn_c"] > checks["temperature"]["idle_fail_c"]:
        raise ConfigError(f"{path}: checks.temperature: idle_warn_c is above idle_fail_c")
    if checks["retired_pages"]["warn"] > checks["retired_pages"]["fail"]:
        raise ConfigError(f"{path}: checks.retired_pages: warn is above fail")
    checks["xid"]["names"] = {str(k): v for k, v in (checks["xid"].get("names") or {}).items()}
    return data


def model_label(name: str | None) -> str:
    """The device catalogue's name (lab/data/devices.yml, the one reports print):
    'Tesla V100-PCIE-16GB' -> 'V100-PCIe', 'NVIDIA H200' -> 'H200'; an unknown
    name is kept, minus the vendor words."""
    return default_rules().device(name or "") if (name or "").strip() else ""


def model_key(gpu_name: str | None, references: dict) -> str | None:
    """The references' model (a catalogue name) for an NVML name, or None."""
    label = model_label(gpu_name)
    for key, model in references["models"].items():
        if label in {model_label(x) for x in (key, *model.get("names", []))}:
            return key
    return None


def _host_field(host: Any, name: str, default=None):
    if isinstance(host, dict):
        return host.get(name, default)
    return getattr(host, name, default)


# --------------------------------------------------------------------------- verdict records


@dataclass
class Verdicts:
    """The outcome of a validation (plain data in ``data``)."""

    data: dict
    files: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(h["verdict"] != FAIL for h in self.data["hosts"].values())

    @property
    def hosts(self) -> dict:
        return self.data["hosts"]

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2, sort_keys=True, default=str)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.0f}"
        return f"{v:.3g}"
    return str(v)


def check(name: str, verdict: str, measured: Any, expected: str, reason: str, unit: str | None = None, **extra) -> dict:
    rec = {"check": name, "verdict": verdict, "measured": measured, "expected": expected, "unit": unit, "reason": reason}
    rec.update(extra)
    return rec


def ref_range(ref: dict) -> dict:
    """FAIL and WARN bounds of a reference metric (None: open)."""
    v = ref["value"]

    def lo(f):
        return None if f is None else v * (1 - f)

    def hi(f):
        return None if f is None else v * (1 + f)

    return {"fail_lo": lo(ref.get("lower")), "fail_hi": hi(ref.get("upper")),
            "warn_lo": lo(ref.get("warn_lower")), "warn_hi": hi(ref.get("warn_upper"))}


def _range_text(lo, hi, unit) -> str:
    u = f" {unit}" if unit else ""
    if lo is not None and hi is not None:
        return f"{_fmt(lo)}..{_fmt(hi)}{u}"
    if lo is not None:
        return f">= {_fmt(lo)}{u}"
    if hi is not None:
        return f"<= {_fmt(hi)}{u}"
    return "any"


def judge_metric(name: str, measured: float, ref: dict, label: str | None = None) -> dict:
    r = ref_range(ref)
    unit = ref["unit"]
    label = label or name
    expected = _range_text(r["fail_lo"], r["fail_hi"], unit)
    src = ref["source"]
    if r["fail_lo"] is not None and measured < r["fail_lo"]:
        return check(label, FAIL, measured, expected,
                     f"{_fmt(measured)} {unit} is below {_fmt(r['fail_lo'])} ({_pct(measured, ref['value'])} of {_fmt(ref['value'])}; {src})", unit)
    if r["fail_hi"] is not None and measured > r["fail_hi"]:
        return check(label, FAIL, measured, expected,
                     f"{_fmt(measured)} {unit} is above {_fmt(r['fail_hi'])} ({_pct(measured, ref['value'])} of {_fmt(ref['value'])}; {src})", unit)
    if r["warn_lo"] is not None and measured < r["warn_lo"]:
        return check(label, WARN, measured, expected,
                     f"{_fmt(measured)} {unit} is low: below {_fmt(r['warn_lo'])} ({_pct(measured, ref['value'])} of {_fmt(ref['value'])}; {src})", unit)
    if r["warn_hi"] is not None and measured > r["warn_hi"]:
        return check(label, WARN, measured, expected,
                     f"{_fmt(measured)} {unit} is high: above {_fmt(r['warn_hi'])} ({_pct(measured, ref['value'])} of {_fmt(ref['value'])}; {src})", unit)
    return check(label, PASS, measured, expected, f"{_pct(measured, ref['value'])} of reference {_fmt(ref['value'])} {unit} ({src})", unit)


def _pct(a, b) -> str:
    return f"{100.0 * a / b:.0f}%" if b else "-"


# --------------------------------------------------------------------------- snapshot access


def split_snapshot(doc: dict) -> tuple[dict, dict | None]:
    """(probe document, burn-in document or None) of a snapshot."""
    if doc.get("kind") == "gpulab-burnin":
        return doc.get("probe") or {}, doc
    return doc, None


def _mm(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


# --------------------------------------------------------------------------- host checks


SYSTEM_SOURCES = ("package", "header", "library")  # the system's own installation, as the runner's probe names it


def installed_version(stack: dict, comp: str) -> str | None:
    """The cuDNN or NCCL of a probe as `invoke audit` reads it: the system's first, the environment's
    wheels (``python package nvidia-cudnn-cu13``) or the framework's view only where the system has none.

    A host may have both (a CUDA image with its own cuDNN, and a PyTorch from PyPI with another);
    the profile's packages are the system's. The runner's ``cudnn``/``nccl`` fields are the
    framework's view (what a run loaded) and stay in manifests as they are.
    """
    found = [f for f in stack.get(f"{comp}_found") or [] if isinstance(f, dict) and f.get("version")]
    for kinds in (SYSTEM_SOURCES, ("python package",), ("torch",)):
        for f in found:
            if str(f.get("source", "")).startswith(kinds):
                return str(f["version"])
    return stack.get(comp)


def _stack_checks(probe: dict, expected: dict | None) -> list[dict]:
    stack = probe.get("stack") or {}
    fw = probe.get("frameworks") or {}
    out = []
    found = {
        "driver": stack.get("driver"),
        "cuda": stack.get("cuda_toolkit"),
        "cudnn": installed_version(stack, "cudnn"),
        "nccl": installed_version(stack, "nccl"),
        "torch": fw.get("torch"),
        "tensorflow": fw.get("tensorflow"),
    }
    if expected is None:
        out.append(check("stack", WARN, {k: v for k, v in found.items() if v}, "a stack profile",
                         "no expected versions for this host's stack profile: versions not checked"))
    else:
        for comp, want in expected.items():
            if want is None:
                continue
            have = found.get(comp, fw.get(comp))
            if have is None:
                out.append(check(f"stack {comp}", FAIL, None, str(want), f"{comp} {want} expected, not found on the host"))
            elif versions.agrees(have, want):
                out.append(check(f"stack {comp}", PASS, have, str(want), f"{comp} {have} as the profile says"))
            else:
                out.append(check(f"stack {comp}", FAIL, have, str(want), f"{comp} is {have}, the profile says {want}"))
    # the driver must support the toolkit
    drv, tk = _mm(stack.get("cuda_driver")), _mm(stack.get("cuda_toolkit"))
    if drv and tk:
        if drv < tk:
            out.append(check("driver supports CUDA", FAIL, stack.get("cuda_driver"), f">= {tk[0]}.{tk[1]}",
                             f"driver {stack.get('driver')} supports CUDA up to {stack.get('cuda_driver')}, "
                             f"the toolkit is {stack.get('cuda_toolkit')}"))
        else:
            out.append(check("driver supports CUDA", PASS, stack.get("cuda_driver"), f">= {tk[0]}.{tk[1]}",
                             f"driver supports CUDA {stack.get('cuda_driver')}, toolkit {stack.get('cuda_toolkit')}"))
    return out


def _count_checks(host, probe: dict, gpus: list[dict]) -> list[dict]:
    want = _host_field(host, "gpu_count", "auto") if host is not None else "auto"
    have = probe.get("gpu_count", len(gpus))
    readable = sum(1 for g in gpus if "error" not in g)
    out = []
    if want in (None, "auto"):
        out.append(check("GPU count", PASS, have, "auto", f"{have} GPU(s) found (inventory says auto)"))
    elif have < int(want):
        out.append(check("GPU count", FAIL, have, str(want), f"{have} GPU(s) found, the inventory says {want}: "
                         f"{int(want) - have} missing"))
    elif have > int(want):
        out.append(check("GPU count", FAIL, have, str(want), f"{have} GPU(s) found, the inventory says {want}"))
    else:
        out.append(check("GPU count", PASS, have, str(want), f"{have} GPU(s) as the inventory says"))
    if readable < len(gpus):
        bad = [g for g in gpus if "error" in g]
        out.append(check("GPUs readable", FAIL, readable, str(len(gpus)), "; ".join(g["error"] for g in bad)))
    return out


def _xid_name(refs: dict, xid: int) -> str:
    return refs["checks"]["xid"].get("names", {}).get(str(xid), "see NVIDIA's XID catalogue")


def _xid_checks(refs: dict, events: list[dict], source: str | None, error: str | None, label: str) -> list[dict]:
    xcfg = refs["checks"]["xid"]
    events = [e for e in events if e["xid"] not in set(xcfg.get("ignore", []))]
    if source is None and error:
        return [check(label, WARN, None, "no XID", f"kernel log not readable: {error}")]
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


def _gpu_checks(gpu: dict, bg: dict | None, host, refs: dict, model: str | None, xid: dict | None) -> list[dict]:
    """Health, load behaviour and burn-in metrics of one GPU."""
    c = refs["checks"]
    mref = refs["models"].get(model) if model else None
    out: list[dict] = []

    # model
    want_model = _host_field(host, "gpu_model", "auto") if host is not None else "auto"
    if want_model not in (None, "auto"):
        ok = model_label(gpu.get("name")) == model_label(want_model) or (
            model is not None and model_key(want_model, refs) == model)
        out.append(check("model", PASS if ok else FAIL, gpu.get("name"), want_model,
                         f"{gpu.get('name')} as the inventory says" if ok else
                         f"{gpu.get('name')} found, the inventory says {want_model}"))
    if mref is None:
        out.append(check("references", WARN, gpu.get("name"), "a model in the references",
                         f"no references for {gpu.get('name')}: only health and fleet checks apply"))

    # PCIe link
    pcie = gpu.get("pcie") or {}
    want = _host_field(host, "pcie", None) if host is not None else None
    want_src = "inventory gpulab_pcie"
    if not want and mref and mref.get("pcie_min"):
        want, want_src = mref["pcie_min"], f"{model} minimum"
    load = (bg or {}).get("load") or {}
    if want:
        width = pcie.get("width_current")
        if load.get("pcie_width_min") is not None:
            width = min(width, load["pcie_width_min"]) if width is not None else load["pcie_width_min"]
        gen_load = load.get("pcie_gen_max")
        gen_cur = pcie.get("gen_current")
        gen_max = pcie.get("gen_max")
        exp = f">= Gen{want['gen']} x{want['width']} ({want_src})"
        measured = {"gen_current": gen_cur, "gen_max": gen_max, "gen_under_load": gen_load, "width": width,
                    "width_max": pcie.get("width_max")}
        if width is None and gen_cur is None and gen_max is None and gen_load is None:
            out.append(check("PCIe link", WARN, measured, exp, "PCIe link not readable"))
        elif width is not None and width < want["width"]:
            out.append(check("PCIe link", FAIL, measured, exp,
                             f"link trained down to x{width} (expected x{want['width']}; the GPU can do "
                             f"x{pcie.get('width_max')})"))
        elif gen_load is not None and gen_load < want["gen"]:
            out.append(check("PCIe link", FAIL, measured, exp,
                             f"link runs at Gen{gen_load} under load (expected Gen{want['gen']})"))
        elif gen_max is not None and gen_max < want["gen"]:
            out.append(check("PCIe link", FAIL, measured, exp,
                             f"link can train only to Gen{gen_max} (expected Gen{want['gen']})"))
        elif gen_load is None and gen_cur is not None and gen_cur < want["gen"] and not (
                c.get("pcie", {}).get("idle_gen_ok", True) and gen_max is not None):
            out.append(check("PCIe link", WARN, measured, exp,
                             f"link at Gen{gen_cur} now and no load measurement to tell idle power saving from a fault"))
        else:
            g = gen_load or max((x for x in (gen_cur, gen_max) if x is not None), default="?")
            note = f" (Gen{gen_cur} at idle: power saving)" if gen_cur is not None and gen_load is None and gen_cur < want["gen"] else ""
            out.append(check("PCIe link", PASS, measured, exp, f"Gen{g} x{width}{note}"))

    # ECC
    ecc = gpu.get("ecc") or {}
    if ecc.get("enabled") is False and mref and mref.get("ecc_expected"):
        out.append(check("ECC mode", WARN, False, "enabled", "ECC is disabled on a model that has it"))
    uv, ua = ecc.get("uncorrected_volatile"), ecc.get("uncorrected_aggregate")
    if uv is not None or ua is not None:
        if uv:
            out.append(check("ECC uncorrected", FAIL, {"volatile": uv, "aggregate": ua}, "0",
                             f"{uv} uncorrected ECC error(s) since the driver loaded"))
        elif ua:
            out.append(check("ECC uncorrected", WARN, {"volatile": uv, "aggregate": ua}, "0",
                             f"{ua} uncorrected ECC error(s) over the GPU's life, none since the driver loaded"))
        else:
            out.append(check("ECC uncorrected", PASS, {"volatile": uv, "aggregate": ua}, "0", "no uncorrected ECC error"))

    # retired pages (pre-Ampere) and row remapping (Ampere and later)
    rp = gpu.get("retired_pages") or {}
    if any(rp.get(k) is not None for k in ("single_bit", "double_bit", "pending")):
        total = (rp.get("single_bit") or 0) + (rp.get("double_bit") or 0)
        cfg = c["retired_pages"]
        m = {"single_bit": rp.get("single_bit"), "double_bit": rp.get("double_bit"), "pending": rp.get("pending")}
        if rp.get("pending"):
            out.append(check("retired pages", FAIL, m, f"< {cfg['warn']}, none pending",
                             f"page retirement pending: reset the GPU ({total} retired)"))
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
            out.append(check("row remapping", FAIL, m, "no failure, none pending", "row remapping failed: replace the GPU"))
        elif rr.get("pending"):
            out.append(check("row remapping", FAIL, m, "no failure, none pending",
                             f"row remap pending ({rr.get('uncorrectable')} uncorrectable): reset the GPU"))
        elif rr.get("uncorrectable"):
            out.append(check("row remapping", WARN, m, "0 uncorrectable",
                             f"{rr['uncorrectable']} row(s) remapped for uncorrectable errors"))
        else:
            out.append(check("row remapping", PASS, m, "no failure, none pending",
                             f"{rr.get('correctable') or 0} correctable, 0 uncorrectable remapped rows"))

    # XID events of this GPU
    if xid is not None:
        mine = [e for e in xid.get("events", []) if e.get("gpu") == gpu.get("index")]
        out += _xid_checks(refs, mine, xid.get("source"), xid.get("error"), "XID events")

    # temperatures
    tcfg = c["temperature"]
    idle = (bg or {}).get("idle") or {}
    t_idle = idle.get("temp_c_max", gpu.get("temperature_c"))
    if t_idle is not None:
        exp = f"< {tcfg['idle_warn_c']} C"
        if t_idle >= tcfg["idle_fail_c"]:
            out.append(check("idle temperature", FAIL, t_idle, exp, f"{t_idle} C at idle (FAIL from {tcfg['idle_fail_c']} C)", "C"))
        elif t_idle >= tcfg["idle_warn_c"]:
            out.append(check("idle temperature", WARN, t_idle, exp, f"{t_idle} C at idle", "C"))
        else:
            out.append(check("idle temperature", PASS, t_idle, exp, f"{t_idle} C at idle", "C"))
    if load.get("samples"):
        slow = gpu.get("temperature_slowdown_c") or tcfg["slowdown_default_c"]
        t = load.get("temp_c_max")
        if t is not None:
            exp = f"< {slow - tcfg['load_margin_c']} C (slowdown {slow} C)"
            if t >= slow:
                out.append(check("load temperature", FAIL, t, exp, f"{t} C under load reaches the slowdown temperature {slow} C", "C"))
            elif t >= slow - tcfg["load_margin_c"]:
                out.append(check("load temperature", WARN, t, exp, f"{t} C under load, within {tcfg['load_margin_c']} C of slowdown", "C"))
            else:
                out.append(check("load temperature", PASS, t, exp, f"{t} C under load", "C"))
        # throttling
        bad_names = set(c["throttle"]["bad"])
        reasons = load.get("throttle_reasons") or {}
        bad = {k: v for k, v in reasons.items() if k in bad_names}
        frac = max(bad.values()) / load["samples"] if bad else 0.0
        exp = f"none of {', '.join(sorted(bad_names))}"
        if bad and frac > c["throttle"]["fail_fraction"]:
            out.append(check("throttling", FAIL, bad, exp,
                             f"{', '.join(sorted(bad))} active in {frac:.0%} of load samples "
                             f"(FAIL above {c['throttle']['fail_fraction']:.0%})"))
        elif bad:
            out.append(check("throttling", WARN, bad, exp, f"{', '.join(sorted(bad))} seen in {frac:.0%} of load samples"))
        else:
            cap = reasons.get("sw_power_cap")
            note = f"; at its power cap in {cap / load['samples']:.0%} of load samples (normal under full load)" if cap else ""
            out.append(check("throttling", PASS, {}, exp, f"no thermal or hardware slowdown{note}"))
        # clocks
        smax = (gpu.get("clocks") or {}).get("sm_max_mhz")
        med = load.get("sm_clock_mhz_median")
        if smax and med is not None:
            f = c["clocks"]["load_sm_warn_fraction"]
            exp = f">= {f * smax:.0f} MHz ({f:.0%} of {smax})"
            v = WARN if med < f * smax else PASS
            out.append(check("load SM clock", v, med, exp, f"median {med} MHz under load, {med / smax:.0%} of maximum {smax} MHz", "MHz"))
        # power
        pw = load.get("power_w_max")
        lim = (gpu.get("power") or {}).get("limit_w")
        if pw is not None and lim:
            over = c["power"]["over_limit_fraction"]
            exp = f"<= {lim * (1 + over):.0f} W (limit {lim:.0f} W)"
            if pw > lim * (1 + over):
                out.append(check("power vs limit", FAIL, pw, exp, f"{_fmt(pw)} W under load exceeds the {_fmt(lim)} W limit", "W"))
            else:
                out.append(check("power vs limit", PASS, pw, exp, f"{_fmt(pw)} W max under load, limit {_fmt(lim)} W", "W"))
        if mref and "load_power_w" in mref["metrics"] and pw is not None:
            out.append(judge_metric("load_power_w", pw, mref["metrics"]["load_power_w"], "power under load"))
    dflt = (gpu.get("power") or {}).get("default_limit_w")
    lim = (gpu.get("power") or {}).get("limit_w")
    if dflt and lim and lim < dflt * 0.99:
        out.append(check("power limit", WARN, lim, f"{dflt} W (default)", f"power limit lowered to {lim} W from the default {dflt} W", "W"))

    # burn-in metrics vs references
    if bg is not None and mref:
        # A reference is what one GPU does on its own. With all GPUs loaded at
        # once, sharing (PCIe switches, host memory, power) may lower it a
        # little: there only the FAIL bounds apply.
        for phase, suffix in (("solo", ""), ("concurrent", " (all GPUs at once)")):
            for metric, value in sorted((bg.get(phase) or {}).items()):
                ref = mref["metrics"].get(metric)
                if ref is None or value is None:
                    continue
                if phase == "concurrent":
                    ref = {k: v for k, v in ref.items() if k not in ("warn_lower", "warn_upper")}
                out.append(judge_metric(metric, float(value), ref, metric + suffix))
    return out


def _host_metric_checks(burnin: dict, probe: dict, refs: dict) -> list[dict]:
    """Host-wide burn-in figures (NCCL all-reduce bus bandwidth) against the references.

    A reference is for all GPUs of the host; a figure measured over fewer, or
    one whose model has no reference, is shown with "no reference" (WARN).
    """
    hm = burnin.get("host_metrics") or {}
    names = sorted({g.get("name") or "?" for g in probe["gpus"] if "error" not in g})
    models = sorted({m for m in (model_key(n, refs) for n in names) if m})
    selected = len(burnin.get("gpus_selected") or [])
    count = probe.get("gpu_count") or 0
    out = []
    for metric in HOST_METRICS:
        value = hm.get(metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        with_ref = [(m, refs["models"][m]["metrics"][metric]) for m in models
                    if metric in refs["models"][m]["metrics"]]
        if with_ref and selected == count:
            out += [judge_metric(metric, float(value), ref) for _m, ref in with_ref]
            continue
        unit = UNITS[metric]
        if with_ref:
            why = (f"measured over {selected} of the host's {count} GPUs; the reference "
                   f"({_fmt(with_ref[0][1]['value'])} {unit}) is for all of them")
        elif models:
            why = f"no {metric} for {', '.join(models)} in the references"
        else:
            why = f"{', '.join(names)} is not in the references"
        out.append(check(metric, WARN, float(value), "no reference",
                         f"{_fmt(float(value))} {unit} over {selected} GPUs, not judged: {why}", unit))
    return out


def _burnin_failures(burnin: dict, index: int | None) -> list[dict]:
    """Failed load tests (crash, wrong results, timeout) of one GPU (None: host-wide tests)."""
    fails = [r for r in burnin.get("results", []) if not r.get("ok") and r.get("gpu") == index]
    if not fails:
        return []
    text = "; ".join(f"{r.get('test')}{' ' + r['dtype'] if r.get('dtype') else ''} ({r.get('phase')}): {r.get('error')}"
                     for r in fails[:4])
    more = f" and {len(fails) - 4} more" if len(fails) > 4 else ""
    return [check("burn-in tests", FAIL, len(fails), "0 failed", f"{text}{more}")]


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


def _fleet_checks(model: str | None, bg: dict | None, medians: dict, refs: dict) -> list[dict]:
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
        exp = _range_text(lo, None, unit)
        label = f"{metric} vs fleet"
        text = f"{_pct(value, med)} of the median {_fmt(med)} of {m['n']} {model} GPUs"
        if lo is not None and value < lo:
            out.append(check(label, FAIL, value, exp, f"slow outlier: {text}", unit))
        elif wlo is not None and value < wlo:
            out.append(check(label, WARN, value, exp, f"slower than its peers: {text}", unit))
        else:
            out.append(check(label, PASS, value, exp, text, unit))
    return out


# --------------------------------------------------------------------------- evaluate


def _expected_stack(stacks: dict | None, host_name: str, host) -> dict | None:
    if not stacks:
        return None
    if host_name in stacks:
        return stacks[host_name]
    name = _host_field(host, "stack") if host is not None else None
    return stacks.get(name) if name else None


def _host_record(name: str, host, checks: list[dict], gpus: dict) -> dict:
    verdict = worst([c["verdict"] for c in checks] + [g["verdict"] for g in gpus.values()])
    reasons = [f"{c['check']}: {c['reason']}" for c in checks if c["verdict"] == verdict and verdict != PASS]
    for idx, g in gpus.items():
        reasons += [f"GPU {idx} {c['check']}: {c['reason']}" for c in g["checks"] if c["verdict"] == verdict and verdict != PASS]
    return {
        "host": name,
        "verdict": verdict,
        "reason": reasons[0] if reasons else "all checks passed",
        "reasons": reasons,
        "expected_model": _host_field(host, "gpu_model") if host is not None else None,
        "expected_count": _host_field(host, "gpu_count") if host is not None else None,
        "checks": checks,
        "gpus": gpus,
        "counts": {v: sum(1 for c in checks if c["verdict"] == v) + sum(
            1 for g in gpus.values() for c in g["checks"] if c["verdict"] == v) for v in (PASS, WARN, FAIL)},
    }


def evaluate(snapshots: dict[str, Any], inventory_hosts: Iterable[Any], references: dict,
             stacks: dict | None = None, *, level: str | None = None) -> Verdicts:
    """Verdicts for every host of ``inventory_hosts`` (and any extra host in ``snapshots``)."""
    hosts = {(_host_field(h, "name")): h for h in inventory_hosts}
    names = list(hosts) + [n for n in snapshots if n not in hosts]
    # first pass: per GPU model and burn-in entry (for the fleet medians)
    parsed: dict[str, tuple] = {}
    per_gpu: list[tuple[str | None, dict, dict | None]] = []
    for name in names:
        snap = snapshots.get(name)
        if snap is None or isinstance(snap, BaseException) or not isinstance(snap, dict):
            parsed[name] = (snap, None, None)
            continue
        probe, burnin = split_snapshot(snap)
        parsed[name] = (snap, probe, burnin)
        for g in probe.get("gpus") or []:
            if "error" in g:
                continue
            bg = ((burnin or {}).get("gpus") or {}).get(str(g.get("index")))
            per_gpu.append((model_key(g.get("name"), references), g, bg))
    medians = fleet_medians(per_gpu, references)

    out_hosts = {}
    for name in names:
        host = hosts.get(name)
        snap, probe, burnin = parsed[name]
        checks: list[dict] = []
        gpus: dict[str, dict] = {}
        if snap is None:
            checks.append(check("reachable", FAIL, None, "a probe document", "no result gathered from this host"))
        elif isinstance(snap, BaseException):
            msg = getattr(snap, "message", None) or str(snap) or type(snap).__name__
            label = "reachable" if isinstance(snap, HostError) or "unreachable" in msg else "runner"
            checks.append(check(label, FAIL, None, "a probe document", msg))
        elif probe is None or not isinstance(probe, dict) or "gpus" not in probe:
            checks.append(check("runner", FAIL, None, "a probe document", "the host's answer is not a probe or burn-in document"))
        elif not probe.get("gpus"):
            reason = probe.get("nvidia") or "no GPU reported"
            detail = reason.split(": ", 1)[1] if reason.startswith("no NVIDIA driver/GPU found: ") else reason
            checks.append(check("GPU present", FAIL, 0, f"{_host_field(host, 'gpu_count', '>= 1') if host is not None else '>= 1'} GPU(s)",
                                f"{NO_GPU}: {detail}"))
        else:
            checks += _count_checks(host, probe, probe["gpus"])
            checks += _stack_checks(probe, _expected_stack(stacks, name, host))
            xid = (burnin or {}).get("xid")
            if xid is not None:
                orphans = [e for e in xid.get("events", []) if e.get("gpu") is None]
                if orphans or xid.get("source") is None:
                    checks += _xid_checks(references, orphans, xid.get("source"), xid.get("error"), "XID events (other devices)")
            if burnin is not None:
                if burnin.get("outcome") == "failed":
                    checks += _burnin_failures(burnin, None)
                checks += _host_metric_checks(burnin, probe, references)
            for g in probe["gpus"]:
                idx = g.get("index")
                if "error" in g:
                    gpus[str(idx)] = {"index": idx, "name": None, "uuid": None, "serial": None, "pci_bus_id": None,
                                      "model": None, "verdict": FAIL,
                                      "checks": [check("readable", FAIL, None, "readable", g["error"])]}
                    continue
                model = model_key(g.get("name"), references)
                bg = ((burnin or {}).get("gpus") or {}).get(str(idx))
                gc = _gpu_checks(g, bg, host, references, model, xid)
                if burnin is not None:
                    gc += _burnin_failures(burnin, idx)
                gc += _fleet_checks(model, bg, medians, references)
                gpus[str(idx)] = {"index": idx, "name": g.get("name"), "uuid": g.get("uuid"), "serial": g.get("serial"),
                                  "pci_bus_id": g.get("pci_bus_id"), "model": model,
                                  "verdict": worst(c["verdict"] for c in gc), "checks": gc}
        rec = _host_record(name, host, checks, gpus)
        rec["level"] = (burnin or {}).get("level") if isinstance(burnin, dict) else None
        rec["collected_at"] = (probe or {}).get("collected_at") if isinstance(probe, dict) else None
        out_hosts[name] = rec

    summary = {v: sum(1 for h in out_hosts.values() if h["verdict"] == v) for v in (PASS, WARN, FAIL)}
    data = {
        "schema": SCHEMA,
        "kind": "gpulab-validate",
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "level": level,
        "verdict": worst(h["verdict"] for h in out_hosts.values()) if out_hosts else PASS,
        "summary": {"hosts": len(out_hosts), **summary},
        "hosts": out_hosts,
        "fleet": medians,
    }
    return Verdicts(data)


# --------------------------------------------------------------------------- baseline


def build_references(snapshots: dict[str, Any], references: dict, *, hosts: Iterable[str] | None = None,
                     note: str | None = None) -> dict:
    """A references document whose metrics are the medians of known-good hosts.

    Models and metrics seen in the snapshots replace those of ``references``;
    the rest is kept. Raises CheckFailed when a host is unreachable, has no GPU
    or fails a health check (a baseline is only made from good hosts).
    """
    import copy

    names = list(hosts) if hosts is not None else list(snapshots)
    bad = []
    for n in names:
        snap = snapshots.get(n)
        if not isinstance(snap, dict):
            bad.append(f"{n}: {getattr(snap, 'message', None) or snap or 'no result'}")
            continue
        probe, burnin = split_snapshot(snap)
        if not probe.get("gpus"):
            bad.append(f"{n}: {NO_GPU}")
        elif burnin is None or burnin.get("level") == "quick":
            bad.append(f"{n}: no burn-in measurements (run --level standard or burn-in)")
        elif burnin.get("outcome") != "completed":
            bad.append(f"{n}: burn-in {burnin.get('outcome')}: {burnin.get('reason')}")
    if bad:
        raise CheckFailed("baseline needs known-good hosts with burn-in results; " + "; ".join(bad))
    # health of the candidates, judged without performance references
    health_refs = copy.deepcopy(references)
    for m in health_refs["models"].values():
        m["metrics"] = {}
    health = evaluate({n: snapshots[n] for n in names}, [{"name": n} for n in names], health_refs, None)
    failing = [f"{n}: {h['reason']}" for n, h in health.hosts.items() if h["verdict"] == FAIL]
    if failing:
        raise CheckFailed("baseline refused, hosts not healthy: " + "; ".join(failing))

    values: dict[str, dict[str, list[float]]] = {}
    gpu_names: dict[str, set[str]] = {}
    for n in names:
        probe, burnin = split_snapshot(snapshots[n])
        for g in probe["gpus"]:
            if "error" in g:
                continue
            model = model_key(g.get("name"), references) or model_label(g.get("name"))
            gpu_names.setdefault(model, set()).add(g.get("name"))
            bg = (burnin.get("gpus") or {}).get(str(g["index"])) or {}
            for metric, v in (bg.get("solo") or {}).items():
                values.setdefault(model, {}).setdefault(metric, []).append(float(v))
            pw = (bg.get("load") or {}).get("power_w_max")
            if pw is not None:
                values.setdefault(model, {}).setdefault("load_power_w", []).append(float(pw))
        hm = burnin.get("host_metrics") or {}
        models = {model_key(g.get("name"), references) or model_label(g.get("name"))
                  for g in probe["gpus"] if "error" not in g}
        if len(models) == 1:
            for metric in HOST_METRICS:
                if metric in hm:
                    values.setdefault(next(iter(models)), {}).setdefault(metric, []).append(float(hm[metric]))

    out = copy.deepcopy(references)
    tol = references["baseline"]
    stamp = _dt.date.today().isoformat()
    for model, metrics in values.items():
        entry = out["models"].setdefault(model, {"names": sorted(gpu_names.get(model, [])), "metrics": {}})
        for metric, vs in sorted(metrics.items()):
            m = {
                "value": round(statistics.median(vs), 3),
                "unit": UNITS.get(metric, ""),
                "lower": tol["lower"],
                "upper": tol["upper"],
                "source": f"baseline {stamp}: median of {len(vs)} measurement(s) on {', '.join(names)}"
                          + (f" ({note})" if note else ""),
            }
            if tol.get("warn_lower") is not None:
                m["warn_lower"] = tol["warn_lower"]
            if metric in HOST_METRICS:
                m["scope"] = "host"
            entry["metrics"][metric] = m
    schema.check(out, "gpu-references", "baseline references")
    return out


def dump_references(data: dict) -> str:
    import yaml

    head = ("# GPU references made by `invoke validate --baseline` (lab/validate.py).\n"
            "# Checked against lab/schemas/gpu-references.schema.json when loaded.\n")
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)


# --------------------------------------------------------------------------- output


def render_html(verdicts: Verdicts) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = _fmt_any
    return env.get_template("validate.html.j2").render(v=verdicts.data)


def _fmt_any(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt_any(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt_any(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _fmt(value)


def summary_text(verdicts: Verdicts) -> str:
    d = verdicts.data
    lines = [f"validate: {d['verdict']} ({d['summary']['PASS']} pass, {d['summary']['WARN']} warn, "
             f"{d['summary']['FAIL']} fail of {d['summary']['hosts']} host(s))"]
    for name, h in d["hosts"].items():
        lines.append(f"{h['verdict']:4s}  {name}: {h['reason']}")
        for r in h["reasons"][1:6]:
            lines.append(f"      {r}")
        if len(h["reasons"]) > 6:
            lines.append(f"      ... {len(h['reasons']) - 6} more")
    return "\n".join(lines)


def write_outputs(verdicts: Verdicts, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    j = out_dir / "validate.json"
    h = out_dir / "validate.html"
    tmp = out_dir / ".validate.json.tmp"
    tmp.write_text(verdicts.to_json() + "\n")
    tmp.replace(j)
    h.write_text(render_html(verdicts))
    return [j, h]


# --------------------------------------------------------------------------- gathering


def burnin_argv(level: str, remote_dir: str) -> list[str]:
    return ["burnin", "--level", level, "--out", remote_dir, "--json"]


def gather_one(host, level: str, stamp: str, local_dir: Path | None = None, *, connect: Callable | None = None) -> dict:
    """Run the burn-in on one host and return its document (raises HostError/RunError)."""
    from lab import remote as rem

    connect = connect or rem.connect
    with connect(host) as r:
        inst = rem.ensure_runner(r)
        remote_dir = f"{r.expand(host.workdir.rstrip('/'))}/validate/{stamp}"
        res = r.run(inst.argv(*burnin_argv(level, remote_dir)), check=False, timeout=LEVEL_TIMEOUT_S[level])
        if res.code not in (0, 1):
            last = (res.stderr.strip() or res.stdout.strip() or f"exit {res.code}").splitlines()[-1]
            raise RunError(f"{host.name}: runner burnin exited {res.code}: {last}")
        try:
            doc = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RunError(f"{host.name}: runner burnin printed no JSON document (exit {res.code})") from None
        if local_dir is not None:
            for name in ("burnin.json", "telemetry.csv"):
                try:
                    r.get(f"{remote_dir}/{name}", local_dir / host.name / name)
                except GpulabError:
                    pass
        return doc


def stacks_for(hosts: Iterable[Any], inventory: Path | str | None = None,
               stacks_dir: Path | str | None = None) -> dict:
    """Expected versions per stack name from lab.stacks profiles; {} when unavailable.

    The profiles are those of ``stacks_dir`` (gpulab.stacks, as `invoke audit` reads them),
    else beside the inventory (inventory/stacks/) when there are any, else the checkout's.
    """
    try:
        from lab import stacks as st
    except ImportError:
        return {}
    out = {}
    sdir = Path(stacks_dir) if stacks_dir else (Path(inventory).parent / "stacks" if inventory else None)
    if sdir is None or not sdir.is_dir():
        sdir = None
    for h in hosts:
        name = _host_field(h, "stack")
        if not name or name in out:
            continue
        try:
            prof = st.load(name, sdir)
        except GpulabError:
            continue
        # a branch-only driver ('550.*') agrees with any version of that branch (lab.versions)
        out[name] = prof.expected()
    return out


def validate_fleet(hosts: list, *, level: str = "quick", baseline: bool = False, as_json: bool = False,
                   out_dir: Path | str = Path("results/validate"), references: Path | str | None = None,
                   inventory: Path | str | None = None, stacks: dict | None = None,
                   echo: Callable[[str], None] = print, gather: Callable | None = None,
                   stacks_dir: Path | str | None = None) -> Verdicts:
    """Gather every host's burn-in document, judge them, write validate.json/.html.

    With ``baseline``, write ``references-baseline.yml`` (from these hosts)
    instead of verdicts. ``gather(host, level, stamp, local_dir)`` may replace
    the SSH gathering (default ``gather_one``).
    """
    from lab import remote as rem

    if level not in LEVEL_TIMEOUT_S:
        raise ConfigError(f"--level {level!r}: choose quick, standard or burn-in")
    refs_path = Path(references) if references else REFERENCES
    refs = load_references(refs_path)
    paths.folder(out_dir, "--out")             # every input is checked before the burn-in starts
    if stacks is None and not baseline:
        stacks = stacks_for(hosts, inventory, stacks_dir)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(out_dir) / stamp
    gather = gather or gather_one
    snapshots = rem.on_hosts(hosts, lambda h: gather(h, level, stamp, out))
    if baseline:
        data = build_references(snapshots, refs, hosts=[h.name for h in hosts], note=f"level {level}")
        out.mkdir(parents=True, exist_ok=True)
        path = out / "references-baseline.yml"
        path.write_text(dump_references(data))
        echo(f"wrote {path} (from {len(hosts)} host(s); review it, then copy it over {refs_path})")
        return Verdicts({"hosts": {}, "verdict": PASS}, files=[path])
    verdicts = evaluate(snapshots, hosts, refs, stacks, level=level)
    verdicts.files = write_outputs(verdicts, out)
    echo(verdicts.to_json() if as_json else summary_text(verdicts))
    if not as_json:
        for f in verdicts.files:
            echo(f"wrote {f}")
    return verdicts
