"""The standard tools' figures in `invoke validate`: nccl-tests' all-reduce bus bandwidth and
nvbandwidth's host<->GPU and GPU<->GPU copy bandwidth (the burn-in document's ``tools``,
runner/bwtools.py) judged against the references (``nccl_tests_busbw_gbs``,
``nvbandwidth_*_gbs`` of inventory/references/gpus.yml, each with its source), and shown beside
gpulab's own figure of the same path (``beside``: one row per figure, in validate.json and
validate.html).
"""

from __future__ import annotations

from lab.validate.gpurefs import model_key
from lab.validate.verdict import FAIL, WARN, _fmt, check, judge_metric

# (reference metric, the tool's figure, label, gpulab's own metric of the same path)
NVB_FIGURES = (
    ("nvbandwidth_h2d_gbs", "h2d_gbs", "nvbandwidth H2D", "h2d_bandwidth_gbs"),
    ("nvbandwidth_d2h_gbs", "d2h_gbs", "nvbandwidth D2H", "d2h_bandwidth_gbs"),
    ("nvbandwidth_d2d_read_gbs", "d2d_read_min_gbs", "nvbandwidth P2P read (slowest peer)", None),
)
NCCL_METRIC = "nccl_tests_busbw_gbs"


def _tool(burnin: dict | None, name: str) -> dict | None:
    """The tool's figures, or None when it did not run or gave none."""
    t = ((burnin or {}).get("tools") or {}).get(name)
    return t if isinstance(t, dict) and t.get("ran") and not t.get("error") else None


def nccl_version(code) -> str | None:
    """NCCL's version number as NCCL_VERSION_CODE writes it (22602 -> '2.26.2'; 2708 -> '2.7.8')."""
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def gpu_figures(burnin: dict | None, index) -> dict:
    """nvbandwidth's figures of one GPU by reference metric name (for baselines)."""
    figures = ((_tool(burnin, "nvbandwidth") or {}).get("gpus") or {}).get(str(index)) or {}
    return {metric: float(figures[key]) for metric, key, _l, _o in NVB_FIGURES if isinstance(figures.get(key), (int, float))}


def host_figures(burnin: dict | None, probe: dict) -> dict:
    """nccl-tests' bus bandwidth when it ran over all GPUs of the host (for baselines)."""
    nccl = _tool(burnin, "nccl_tests") or {}
    value = nccl.get("busbw_gbs")
    ok = isinstance(value, (int, float)) and nccl.get("ngpus") == probe.get("gpu_count") and not nccl.get("wrong")
    return {NCCL_METRIC: float(value)} if ok else {}


def gpu_tool_checks(burnin: dict | None, index, model_ref: dict | None) -> list[dict]:
    """nvbandwidth's figures of one GPU against its model's references (where they have one)."""
    nvb = _tool(burnin, "nvbandwidth")
    figures = ((nvb or {}).get("gpus") or {}).get(str(index)) or {}
    out = []
    for metric, key, label, _own in NVB_FIGURES:
        ref = ((model_ref or {}).get("metrics") or {}).get(metric)
        value = figures.get(key)
        if ref is not None and isinstance(value, (int, float)):
            out.append(judge_metric(metric, float(value), ref, label))
    return out


def host_tool_checks(burnin: dict, probe: dict, refs: dict) -> list[dict]:
    """A tool that ran and failed; nccl-tests' own data check and its bus bandwidth against
    the references (a reference is for all GPUs of the host); figures no reference judges."""
    tools = burnin.get("tools") or {}
    out = []
    for name, label in (("nvbandwidth", "nvbandwidth"), ("nccl_tests", "nccl-tests")):
        t = tools.get(name)
        if isinstance(t, dict) and t.get("ran") and t.get("error"):
            out.append(check(label, WARN, None, "runs and reports", f"{label} failed: {t['error']}"))
    names = sorted({g.get("name") or "?" for g in probe.get("gpus") or [] if "error" not in g})
    models = sorted({m for m in (model_key(n, refs) for n in names) if m})
    nccl = _tool(burnin, "nccl_tests")
    if nccl is not None:
        if nccl.get("wrong") or nccl.get("out_of_bounds"):
            out.append(check("nccl-tests data check", FAIL, {"wrong": nccl.get("wrong"), "out_of_bounds": nccl.get("out_of_bounds")},
                             "0 wrong elements", f"all_reduce_perf found {nccl.get('wrong') or 0} wrong element(s) "
                             f"and {nccl.get('out_of_bounds') or 0} out-of-bounds value(s): the GPUs or links corrupt data"))
        value = nccl.get("busbw_gbs")
        with_ref = [refs["models"][m]["metrics"][NCCL_METRIC] for m in models if NCCL_METRIC in refs["models"][m]["metrics"]]
        count = probe.get("gpu_count") or 0
        if isinstance(value, (int, float)) and with_ref and nccl.get("ngpus") == count:
            out += [judge_metric(NCCL_METRIC, float(value), ref, "nccl-tests busbw") for ref in with_ref]
        elif isinstance(value, (int, float)):
            why = (f"measured over {nccl.get('ngpus')} of the host's {count} GPUs" if with_ref else
                   f"no {NCCL_METRIC} for {', '.join(models) or ', '.join(names)} in the references")
            out.append(check("nccl-tests busbw", WARN, float(value), "no reference",
                             f"{_fmt(float(value))} GB/s, not judged: {why}", "GB/s"))
    nvb = _tool(burnin, "nvbandwidth")
    if nvb is not None and nvb.get("gpus"):
        missing = [m for m in models if not any(metric in refs["models"][m]["metrics"] for metric, *_ in NVB_FIGURES)]
        unknown = [n for n in names if model_key(n, refs) is None]
        if missing or unknown:
            out.append(check("nvbandwidth", WARN, None, "a reference",
                             f"nvbandwidth's figures not judged: no reference for {', '.join(missing + unknown)}"))
    return out


def beside(burnin: dict | None) -> list[dict]:
    """gpulab's own figures beside the standard tools' figures of the same path."""
    rows = []
    nccl = _tool(burnin, "nccl_tests")
    own = ((burnin or {}).get("host_metrics") or {}).get("nccl_allreduce_busbw_gbs")
    if nccl is not None:
        tool = "nccl-tests" + (f" {nccl['version']}" if nccl.get("version") else "") + " all_reduce_perf"
        version = nccl_version(nccl.get("nccl_version"))
        rows.append({"figure": "all-reduce bus bandwidth", "gpu": None, "unit": "GB/s", "gpulab": own,
                     "tool": nccl.get("busbw_gbs"), "by": tool + (f" (NCCL {version})" if version else "")})
    nvb = _tool(burnin, "nvbandwidth")
    for idx, g in sorted(((burnin or {}).get("gpus") or {}).items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        if nvb is None:
            break
        figures = (nvb.get("gpus") or {}).get(str(idx)) or {}
        for _metric, key, label, own_metric in NVB_FIGURES:
            mine = (g.get("solo") or {}).get(own_metric) if own_metric else None
            if mine is None and figures.get(key) is None:
                continue
            rows.append({"figure": label.replace("nvbandwidth ", ""), "gpu": int(idx) if str(idx).isdigit() else idx,
                         "unit": "GB/s", "gpulab": mine, "tool": figures.get(key),
                         "by": "nvbandwidth" + (f" {nvb['version']}" if nvb.get("version") else "")})
    return rows
