"""The checks of a GPU under load, from the burn-in document: temperatures at idle and under load,
throttling, SM clock, power against its limit, a lowered power limit, the burn-in metrics against the
model's references, failed load tests, and the host-wide burn-in figures. Each a function from plain data
(the GPU's probe record, its burn-in entry, the references' ``checks`` section ``c`` and the model's
references ``mref``) to check records (lab.validate.verdict); lab.validate.gpuchecks lists them among the
checks of one GPU, lab.validate.fleet adds the host-wide ones.
"""

from __future__ import annotations

from lab.validate.gpurefs import model_key
from lab.validate.verdict import FAIL, HOST_METRICS, PASS, UNITS, WARN, check, fmt_value, judge_metric


def load_checks(gpu: dict, bg: dict | None, c: dict, mref: dict | None) -> list[dict]:
    """Temperatures at idle and under load; throttling, SM clock and power under load."""
    load = (bg or {}).get("load") or {}
    out = idle_temperature_checks(gpu, bg, c)
    if load.get("samples"):
        out += load_temperature_checks(gpu, load, c)
        out += throttle_checks(load, c)
        out += clock_checks(gpu, load, c)
        out += power_checks(gpu, load, c, mref)
    return out


def idle_temperature_checks(gpu: dict, bg: dict | None, c: dict) -> list[dict]:
    """The hottest idle sample of the burn-in, else the probe's temperature."""
    tcfg = c["temperature"]
    idle = (bg or {}).get("idle") or {}
    t_idle = idle.get("temp_c_max", gpu.get("temperature_c"))
    if t_idle is None:
        return []
    exp = f"< {tcfg['idle_warn_c']} C"
    if t_idle >= tcfg["idle_fail_c"]:
        return [
            check("idle temperature", FAIL, t_idle, exp, f"{t_idle} C at idle (FAIL from {tcfg['idle_fail_c']} C)", "C")
        ]
    if t_idle >= tcfg["idle_warn_c"]:
        return [check("idle temperature", WARN, t_idle, exp, f"{t_idle} C at idle", "C")]
    return [check("idle temperature", PASS, t_idle, exp, f"{t_idle} C at idle", "C")]


def load_temperature_checks(gpu: dict, load: dict, c: dict) -> list[dict]:
    """The hottest load sample against the GPU's slowdown temperature less a margin."""
    tcfg = c["temperature"]
    slow = gpu.get("temperature_slowdown_c") or tcfg["slowdown_default_c"]
    t = load.get("temp_c_max")
    if t is None:
        return []
    exp = f"< {slow - tcfg['load_margin_c']} C (slowdown {slow} C)"
    if t >= slow:
        return [
            check("load temperature", FAIL, t, exp, f"{t} C under load reaches the slowdown temperature {slow} C", "C")
        ]
    if t >= slow - tcfg["load_margin_c"]:
        return [
            check(
                "load temperature", WARN, t, exp, f"{t} C under load, within {tcfg['load_margin_c']} C of slowdown", "C"
            )
        ]
    return [check("load temperature", PASS, t, exp, f"{t} C under load", "C")]


def throttle_checks(load: dict, c: dict) -> list[dict]:
    """The share of load samples with a thermal or hardware slowdown reason active."""
    bad_names = set(c["throttle"]["bad"])
    reasons = load.get("throttle_reasons") or {}
    bad = {k: v for k, v in reasons.items() if k in bad_names}
    frac = max(bad.values()) / load["samples"] if bad else 0.0
    exp = f"none of {', '.join(sorted(bad_names))}"
    if bad and frac > c["throttle"]["fail_fraction"]:
        return [
            check(
                "throttling",
                FAIL,
                bad,
                exp,
                f"{', '.join(sorted(bad))} active in {frac:.0%} of load samples "
                f"(FAIL above {c['throttle']['fail_fraction']:.0%})",
            )
        ]
    if bad:
        return [check("throttling", WARN, bad, exp, f"{', '.join(sorted(bad))} seen in {frac:.0%} of load samples")]
    cap = reasons.get("sw_power_cap")
    note = f"; at its power cap in {cap / load['samples']:.0%} of load samples (normal under full load)" if cap else ""
    return [check("throttling", PASS, {}, exp, f"no thermal or hardware slowdown{note}")]


def clock_checks(gpu: dict, load: dict, c: dict) -> list[dict]:
    """The median SM clock under load against a fraction of the GPU's maximum."""
    smax = (gpu.get("clocks") or {}).get("sm_max_mhz")
    med = load.get("sm_clock_mhz_median")
    if not smax or med is None:
        return []
    f = c["clocks"]["load_sm_warn_fraction"]
    exp = f">= {f * smax:.0f} MHz ({f:.0%} of {smax})"
    v = WARN if med < f * smax else PASS
    return [
        check(
            "load SM clock", v, med, exp, f"median {med} MHz under load, {med / smax:.0%} of maximum {smax} MHz", "MHz"
        )
    ]


def power_checks(gpu: dict, load: dict, c: dict, mref: dict | None) -> list[dict]:
    """The most power drawn under load against the GPU's limit, and against the model's reference."""
    out: list[dict] = []
    pw = load.get("power_w_max")
    lim = (gpu.get("power") or {}).get("limit_w")
    if pw is not None and lim:
        over = c["power"]["over_limit_fraction"]
        exp = f"<= {lim * (1 + over):.0f} W (limit {lim:.0f} W)"
        if pw > lim * (1 + over):
            out.append(
                check(
                    "power vs limit",
                    FAIL,
                    pw,
                    exp,
                    f"{fmt_value(pw)} W under load exceeds the {fmt_value(lim)} W limit",
                    "W",
                )
            )
        else:
            out.append(
                check(
                    "power vs limit", PASS, pw, exp, f"{fmt_value(pw)} W max under load, limit {fmt_value(lim)} W", "W"
                )
            )
    if mref and "load_power_w" in mref["metrics"] and pw is not None:
        out.append(judge_metric("load_power_w", pw, mref["metrics"]["load_power_w"], "power under load"))
    return out


def power_limit_checks(gpu: dict) -> list[dict]:
    """A power limit lowered below the default."""
    dflt = (gpu.get("power") or {}).get("default_limit_w")
    lim = (gpu.get("power") or {}).get("limit_w")
    if dflt and lim and lim < dflt * 0.99:
        return [
            check(
                "power limit",
                WARN,
                lim,
                f"{dflt} W (default)",
                f"power limit lowered to {lim} W from the default {dflt} W",
                "W",
            )
        ]
    return []


def metric_checks(bg: dict | None, mref: dict | None) -> list[dict]:
    """The burn-in metrics against the model's references."""
    out: list[dict] = []
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


def host_metric_checks(burnin: dict, probe: dict, refs: dict) -> list[dict]:
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
        with_ref = [(m, refs["models"][m]["metrics"][metric]) for m in models if metric in refs["models"][m]["metrics"]]
        if with_ref and selected == count:
            out += [judge_metric(metric, float(value), ref) for _m, ref in with_ref]
            continue
        unit = UNITS[metric]
        if with_ref:
            why = (
                f"measured over {selected} of the host's {count} GPUs; the reference "
                f"({fmt_value(with_ref[0][1]['value'])} {unit}) is for all of them"
            )
        elif models:
            why = f"no {metric} for {', '.join(models)} in the references"
        else:
            why = f"{', '.join(names)} is not in the references"
        out.append(
            check(
                metric,
                WARN,
                float(value),
                "no reference",
                f"{fmt_value(float(value))} {unit} over {selected} GPUs, not judged: {why}",
                unit,
            )
        )
    return out


def burnin_failures(burnin: dict, index: int | None, judged: set | frozenset = frozenset()) -> list[dict]:
    """Failed load tests (crash, wrong results, timeout) of one GPU; None: the host's, those of no GPU and
    those of a GPU index not in ``judged`` (the GPUs whose own records judge theirs), whatever the outcome."""
    fails = [
        r
        for r in burnin.get("results") or []
        if not r.get("ok")
        and (r.get("gpu") == index if index is not None else r.get("gpu") is None or r.get("gpu") not in judged)
    ]
    if not fails:
        return []
    text = "; ".join(
        ("" if index is not None or r.get("gpu") is None else f"GPU {r.get('gpu')} ")
        + f"{r.get('test')}{' ' + r['dtype'] if r.get('dtype') else ''} ({r.get('phase')}): {r.get('error')}"
        for r in fails[:4]
    )
    more = f" and {len(fails) - 4} more" if len(fails) > 4 else ""
    return [check("burn-in tests", FAIL, len(fails), "0 failed", f"{text}{more}")]
