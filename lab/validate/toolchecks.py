"""The standard tools' figures in `invoke validate`: nccl-tests' all-reduce bus bandwidth and
nvbandwidth's host<->GPU and GPU<->GPU copy bandwidth (the burn-in document's ``tools``,
runner/bwtools.py) judged against the references (``nccl_tests_busbw_gbs``,
``nvbandwidth_*_gbs`` of inventory/references/gpus.yml, each with its source), and shown beside
gpulab's own figure of the same path (``beside``: one row per figure, in validate.json and
validate.html).

The rules for what the tools said (their output as tests/samples/ shows it, from each tool's source):
- a tool that finds the fault it exists to find is that check's FAIL, whatever its exit code:
  nccl-tests' data check (wrong elements; it exits 7 with every result written) is "nccl-tests data
  check", nvbandwidth's check of the copied data (its error ``h_errorFlag == 0``, the compare
  kernel's lines before its document) is "nvbandwidth data check", each with the tool's own words;
- a GPU without peer access (nvbandwidth's "N/A", or its device-to-device testcase waived on a host
  of several GPUs) FAILs "nvbandwidth P2P read (slowest peer)" where the references give its model
  a GPU-to-GPU figure (a GPU that reaches no peer is the one at fault: the peers it leaves N/A are
  not failed for it);
- a GPU that nvbandwidth's output has no figure of where the references give its model one (a column
  missing, N/A from host copies) is a WARN of that figure, "not judged", never a silent pass;
- a tool that could not run (gone where provisioning built it, timed out and killed, its own
  error, output that stops or cannot be read) is a WARN that says why, never a PASS; a tool that
  provisioning did not build here (``bwtools_tools: {}``) and that is not there gives no record.
"""

from __future__ import annotations

from lab.core import fields
from lab.validate.gpurefs import model_key
from lab.validate.linkchecks import guarded
from lab.validate.verdict import FAIL, WARN, fmt_value, check, judge_metric

# (reference metric, the tool's figure, label, gpulab's own metric of the same path)
NVB_FIGURES = (
    ("nvbandwidth_h2d_gbs", "h2d_gbs", "nvbandwidth H2D", "h2d_bandwidth_gbs"),
    ("nvbandwidth_d2h_gbs", "d2h_gbs", "nvbandwidth D2H", "d2h_bandwidth_gbs"),
    ("nvbandwidth_d2d_read_gbs", "d2d_read_min_gbs", "nvbandwidth P2P read (slowest peer)", None),
)
NCCL_METRIC = "nccl_tests_busbw_gbs"


def _tool(burnin: dict | None, name: str) -> dict | None:
    """The tool's figures, or None when it did not run or gave none (a tool that failed after
    writing its figures keeps them: its error is judged beside them)."""
    t = ((burnin or {}).get("tools") or {}).get(name)
    if not isinstance(t, dict) or not t.get("ran"):
        return None
    has = t.get("busbw_gbs") is not None if name == "nccl_tests" else bool(t.get("gpus"))
    return t if has or not t.get("error") else None


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
    return {
        metric: float(figures[key]) for metric, key, _l, _o in NVB_FIGURES if isinstance(figures.get(key), (int, float))
    }


def host_figures(burnin: dict | None, probe: dict) -> dict:
    """nccl-tests' bus bandwidth when it ran over all GPUs of the host (for baselines)."""
    nccl = _tool(burnin, "nccl_tests") or {}
    value = nccl.get("busbw_gbs")
    ok = isinstance(value, (int, float)) and nccl.get("ngpus") == probe.get("gpu_count") and not nccl.get("wrong")
    return {NCCL_METRIC: float(value)} if ok else {}


P2P_METRIC, P2P_LABEL = "nvbandwidth_d2d_read_gbs", "nvbandwidth P2P read (slowest peer)"
P2P_CASE = "device_to_device_memcpy_read_ce"


def _peers(burnin: dict | None, nvb: dict, figures: dict) -> bool:
    """Whether this GPU should have a GPU-to-GPU figure: peers on the host, and neither a waived testcase nor
    peers without access (both FAIL "nvbandwidth P2P read (slowest peer)" below)."""
    waived = ((nvb.get("testcases") or {}).get(P2P_CASE) or {}).get("status") == "Waived"
    return len((burnin or {}).get("gpus") or {}) > 1 and not waived and not figures.get("d2d_no_peer")


def gpu_tool_checks(burnin: dict | None, index, model_ref: dict | None) -> list[dict]:
    """nvbandwidth's figures of one GPU against its model's references (where they have one); a GPU
    without peer access where the references require GPU-to-GPU bandwidth FAILs."""
    nvb = _tool(burnin, "nvbandwidth")
    figures = ((nvb or {}).get("gpus") or {}).get(str(index)) or {}
    out = []
    for metric, key, label, _own in NVB_FIGURES:
        ref = ((model_ref or {}).get("metrics") or {}).get(metric)
        value = figures.get(key)
        if ref is not None and isinstance(value, (int, float)):
            out.append(judge_metric(metric, float(value), ref, label))
        elif ref is not None and nvb is not None and (key != "d2d_read_min_gbs" or _peers(burnin, nvb, figures)):
            out.append(
                check(
                    label,
                    WARN,
                    None,
                    "a figure of this GPU",
                    f"not judged: nvbandwidth's output has no {label.removeprefix('nvbandwidth ')} figure of this GPU",
                    "GB/s",
                )
            )
    ref = ((model_ref or {}).get("metrics") or {}).get(P2P_METRIC)
    ngpus = len((burnin or {}).get("gpus") or {})
    if nvb is not None and ref is not None and ngpus > 1:
        everyone = nvb.get("gpus") or {}
        peerless = {j for j in range(ngpus) if len((everyone.get(str(j)) or {}).get("d2d_no_peer") or []) >= ngpus - 1}
        mine = figures.get("d2d_no_peer") or []
        # the GPU that reaches no peer is the one at fault; its peers are not failed for it
        missing = mine if int(index) in peerless else [j for j in mine if j not in peerless]
        waived = ((nvb.get("testcases") or {}).get(P2P_CASE) or {}).get("status") == "Waived"
        if missing or waived:
            what = (
                "nvbandwidth waived its GPU-to-GPU testcase: no GPU pair of the host has peer access"
                if waived
                else f"no peer access to GPU {', '.join(map(str, missing))} (nvbandwidth: N/A)"
            )
            out.append(
                check(
                    P2P_LABEL,
                    FAIL,
                    None,
                    f">= {fmt_value(ref['value'] * (1 - (ref.get('lower') or 0)))} GB/s to every peer",
                    f"{what}: the references require GPU-to-GPU bandwidth of this model ({ref['source']})",
                    "GB/s",
                )
            )
    return out


def _said(t: dict) -> str:
    code = t.get("exit_code")
    return (
        f" (exit {code}: {t['tool_said']})"
        if code not in (0, None) and t.get("tool_said")
        else (f" (exit {code})" if code not in (0, None) else "")
    )


def _not_run(tools: dict, expected: set | None) -> list[dict]:
    """WARNs for tools that could not run or gave no figures (the rule in the module's text)."""
    out = []
    for name, label in (("nvbandwidth", "nvbandwidth"), ("nccl_tests", "nccl-tests")):
        t = tools.get(name)
        if not isinstance(t, dict):
            continue
        if not t.get("ran"):
            if t.get("expected") or (expected is not None and label in expected):
                out.append(check(label, WARN, None, "runs and reports", f"not run: {t.get('error') or 'not started'}"))
            continue
        if t.get("error") and not (t.get("corruption") and name == "nvbandwidth"):
            keeps = " (its figures are judged)" if _tool({"tools": tools}, name) is not None else ""
            out.append(check(label, WARN, None, "runs and reports", f"{label} failed: {t['error']}{keeps}"))
    return out


def host_tool_checks(burnin: dict, probe: dict, refs: dict, expected: set | None = None) -> list[dict]:
    """A tool that could not run or failed; the tools' own data checks; nccl-tests' bus bandwidth
    against the references (a reference is for all GPUs of the host); figures no reference judges.
    ``expected``: the tools the host's stack profile builds (None: not known)."""
    tools = burnin.get("tools") or {}
    names = sorted({g.get("name") or "?" for g in probe.get("gpus") or [] if "error" not in g})
    models = sorted({m for m in (model_key(n, refs) for n in names) if m})
    # each tool's section judged on its own: a malformed one is its own WARN and hides no other tool's verdict
    return (
        guarded("standard tools", _not_run, tools, expected)
        + guarded("nvbandwidth", _nvbandwidth_data_check, tools)
        + guarded("nccl-tests", _nccl_part, burnin, probe, refs, names, models)
        + guarded("nvbandwidth", _nvbandwidth_unjudged, burnin, refs, names, models)
    )


def _nccl_part(burnin: dict, probe: dict, refs: dict, names: list[str], models: list[str]) -> list[dict]:
    nccl = _tool(burnin, "nccl_tests")
    return _nccl_checks(nccl, probe, refs, names, models) if nccl is not None else []


def _nvbandwidth_unjudged(burnin: dict, refs: dict, names: list[str], models: list[str]) -> list[dict]:
    """A WARN when no reference judges nvbandwidth's figures of these GPUs."""
    nvb = _tool(burnin, "nvbandwidth")
    if nvb is None or not nvb.get("gpus"):
        return []
    missing = [m for m in models if not any(metric in refs["models"][m]["metrics"] for metric, *_ in NVB_FIGURES)]
    unknown = [n for n in names if model_key(n, refs) is None]
    if not (missing or unknown):
        return []
    return [
        check(
            "nvbandwidth",
            WARN,
            None,
            "a reference",
            f"nvbandwidth's figures not judged: no reference for {', '.join(missing + unknown)}",
        )
    ]


def _nvbandwidth_data_check(tools: dict) -> list[dict]:
    """nvbandwidth's own check of the data it copied, when it found corruption."""
    nvb_any = tools.get("nvbandwidth") if isinstance(tools.get("nvbandwidth"), dict) else {}
    if not (nvb_any.get("ran") and nvb_any.get("corruption")):
        return []
    c = nvb_any["corruption"]
    return [
        check(
            "nvbandwidth data check",
            FAIL,
            c.get("testcase"),
            "the copied data as written",
            f"nvbandwidth's check of the copied data failed in {c.get('testcase') or 'a testcase'}: "
            f"{c.get('detail') or ''}; its error: {(nvb_any.get('error') or '').strip()[:200]}"
            f"{_said(nvb_any)}: the GPUs, their memory or links corrupt data",
        )
    ]


def _nccl_checks(nccl: dict, probe: dict, refs: dict, names: list[str], models: list[str]) -> list[dict]:
    """nccl-tests' data check, its own minimum, its exit, and its bus bandwidth against the references."""
    out: list[dict] = []
    if nccl.get("wrong") or nccl.get("out_of_bounds"):
        out.append(
            check(
                "nccl-tests data check",
                FAIL,
                {"wrong": nccl.get("wrong"), "out_of_bounds": nccl.get("out_of_bounds")},
                "0 wrong elements",
                f"all_reduce_perf found {nccl.get('wrong') or 0} wrong element(s) "
                f"and {nccl.get('out_of_bounds') or 0} out-of-bounds value(s){_said(nccl)}: the GPUs or "
                "links corrupt data",
            )
        )
    elif nccl.get("min_bw_failed"):
        out.append(
            check(
                "nccl-tests busbw",
                FAIL,
                nccl.get("avg_busbw_gbs"),
                "NCCL_TESTS_MIN_BW",
                f"its average bus bandwidth {fmt_value(nccl.get('avg_busbw_gbs'))} GB/s is below the minimum "
                f"the host set (NCCL_TESTS_MIN_BW){_said(nccl)}",
                "GB/s",
            )
        )
    elif nccl.get("exit_code") not in (0, None):
        out.append(
            check(
                "nccl-tests",
                WARN,
                None,
                "exit 0",
                f"all_reduce_perf wrote all its results and found no wrong element, but{_said(nccl)}",
            )
        )
    value = nccl.get("busbw_gbs")
    with_ref = [
        refs["models"][m]["metrics"][NCCL_METRIC] for m in models if NCCL_METRIC in refs["models"][m]["metrics"]
    ]
    count = probe.get("gpu_count") or 0
    if isinstance(value, (int, float)) and with_ref and nccl.get("ngpus") == count:
        out += [judge_metric(NCCL_METRIC, float(value), ref, "nccl-tests busbw") for ref in with_ref]
    elif isinstance(value, (int, float)):
        why = (
            f"measured over {nccl.get('ngpus')} of the host's {count} GPUs"
            if with_ref
            else f"no {NCCL_METRIC} for {', '.join(models) or ', '.join(names)} in the references"
        )
        out.append(
            check(
                "nccl-tests busbw",
                WARN,
                float(value),
                "no reference",
                f"{fmt_value(float(value))} GB/s, not judged: {why}",
                "GB/s",
            )
        )
    return out


def beside(burnin: dict | None) -> list[dict]:
    """gpulab's own figures beside the standard tools' figures of the same path."""
    rows = []
    nccl = _tool(burnin, "nccl_tests")
    own = ((burnin or {}).get("host_metrics") or {}).get("nccl_allreduce_busbw_gbs")
    if nccl is not None:
        tool = "nccl-tests" + (f" {nccl['version']}" if nccl.get("version") else "") + " all_reduce_perf"
        version = nccl_version(nccl.get("nccl_version"))
        rows.append(
            {
                "figure": "all-reduce bus bandwidth",
                "gpu": None,
                "unit": "GB/s",
                "gpulab": own,
                "tool": nccl.get("busbw_gbs"),
                "by": tool + (f" (NCCL {version})" if version else ""),
            }
        )
    nvb = _tool(burnin, "nvbandwidth")
    for idx, g in sorted(((burnin or {}).get("gpus") or {}).items(), key=lambda kv: fields.whole(kv[0]) or 0):
        if nvb is None:
            break
        figures = (nvb.get("gpus") or {}).get(str(idx)) or {}
        for _metric, key, label, own_metric in NVB_FIGURES:
            mine = (g.get("solo") or {}).get(own_metric) if own_metric else None
            if mine is None and figures.get(key) is None:
                continue
            rows.append(
                {
                    "figure": label.replace("nvbandwidth ", ""),
                    "gpu": idx if fields.whole(str(idx)) is None else fields.whole(str(idx)),
                    "unit": "GB/s",
                    "gpulab": mine,
                    "tool": figures.get(key),
                    "by": "nvbandwidth" + (f" {nvb['version']}" if nvb.get("version") else ""),
                }
            )
    return rows
