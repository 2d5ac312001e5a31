"""The study's tables from runs (lab.results.logreader.Run): per benchmark x system records
(lab.report.records, scored by lab.report.scoring), device ratios at equal GPU counts, scaling against GPU count
with super-linear speedups explained, performance per watt, and ``analyse`` that makes them all (seed effects and the comparison of two
sets of runs are lab.report.comparison's). Plain data in, plain data out; rendering
is lab.report.build's and lab.report.figures'.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

from lab.report import stats
from lab.report.comparison import compare_runs, seed_tables
from lab.report.records import system_rows
from lab.core.mlperf import Rules, bench_order, default_rules
from lab.results.logreader import Run


@dataclass
class Analysis:
    runs: list[Run]
    systems: list[dict]
    ratios: list[dict]
    ratio_ranges: list[dict]
    scaling: list[dict]
    seeds: list[dict]
    seed_effects: list[dict]
    energy: list[dict]
    compare: list[dict] | None = None


# --------------------------------------------------------------------------
# Aggregates
# --------------------------------------------------------------------------


def _ttt_of(row):
    return row["score_minutes"]


def device_ratios(systems: list[dict], rules: Rules | None = None) -> tuple[list[dict], list[dict]]:
    """Ratios of two devices per benchmark at equal GPU count and stack.

    The faster device of each pair (geometric mean of all its ratios >= 1) is
    the numerator: ttt_ratio = score(slower) / score(faster), throughput_ratio
    = throughput(faster) / throughput(slower). Both read "faster is N x slower".
    """
    at = defaultdict(dict)
    for s in systems:
        if s["gpus"]:
            at[(s["benchmark"], s["gpus"], s["stack"])][s["device"]] = s
    pairs = defaultdict(list)
    for key, devs in at.items():
        for d1, d2 in combinations(sorted(devs), 2):
            pairs[(d1, d2)].append((key, devs[d1], devs[d2]))
    rows = [row for (d1, d2), matches in pairs.items() for row in _pair_rows(d1, d2, matches)]
    rows.sort(key=lambda r: (r["pair"], r["benchmark"], r["gpus"]))
    return rows, _ratio_ranges(rows, rules)


def _pair_rows(d1: str, d2: str, matches: list[tuple]) -> list[dict]:
    """The ratio rows of two devices over their matches ((benchmark, gpus, stack), record, record), the
    faster device (geometric mean of all its ratios >= 1) first."""
    rows = []
    raw = []
    for _, s1, s2 in matches:
        if _ttt_of(s1) and _ttt_of(s2):
            raw.append(_ttt_of(s2) / _ttt_of(s1))
        if s1["throughput_mean"] and s2["throughput_mean"]:
            raw.append(s1["throughput_mean"] / s2["throughput_mean"])
    if not raw:
        return []
    fast, slow = (d1, d2) if stats.geomean(raw) >= 1 else (d2, d1)
    for (bench, gpus, stack), s1, s2 in matches:
        a, b = (s1, s2) if fast == d1 else (s2, s1)
        ttt = _ttt_of(b) / _ttt_of(a) if (_ttt_of(a) and _ttt_of(b)) else None
        thr = a["throughput_mean"] / b["throughput_mean"] if (a["throughput_mean"] and b["throughput_mean"]) else None
        if ttt is None and thr is None:
            continue
        ea, eb = a["epochs_mean"], b["epochs_mean"]
        if ea is None or eb is None:
            same, note = None, "epochs to converge not logged for both"
        elif math.isclose(ea, eb, rel_tol=1e-6):
            same, note = True, f"same epochs to converge ({ea:g})"
        else:
            same = False
            note = (
                f"epochs to converge differ ({fast} {ea:g}, {slow} {eb:g}): the time-to-train "
                "ratio includes the seed effect; compare throughput"
            )
        rows.append(
            {
                "benchmark": bench,
                "gpus": gpus,
                "stack": stack,
                "pair": f"{fast} / {slow}",
                "faster": fast,
                "slower": slow,
                "ttt_faster_minutes": _ttt_of(a),
                "ttt_slower_minutes": _ttt_of(b),
                "ttt_ratio": ttt,
                "throughput_faster": a["throughput_mean"],
                "throughput_slower": b["throughput_mean"],
                "throughput_ratio": thr,
                "epochs_faster": ea,
                "epochs_slower": eb,
                "same_epochs": same,
                "too_few_runs": a["too_few_runs"] or b["too_few_runs"],
                "note": note,
            }
        )
    return rows


def _ratio_ranges(rows: list[dict], rules: Rules | None) -> list[dict]:
    """Each device pair's range of ratios per benchmark and over all benchmarks."""
    ranges = []
    by_pair_bench = defaultdict(list)
    for r in rows:
        by_pair_bench[(r["pair"], r["benchmark"])].append(r)
        by_pair_bench[(r["pair"], "all benchmarks")].append(r)
    for (pair, bench), rs in by_pair_bench.items():
        t = [r["ttt_ratio"] for r in rs if r["ttt_ratio"]]
        # The study's overall range quotes each benchmark's comparable figure:
        # time to train where epochs match, throughput where they do not.
        comparable = [r["ttt_ratio"] if r["same_epochs"] and r["ttt_ratio"] else r["throughput_ratio"] for r in rs]
        comparable = [c for c in comparable if c]
        h = [r["throughput_ratio"] for r in rs if r["throughput_ratio"]]
        ranges.append(
            {
                "pair": pair,
                "benchmark": bench,
                "ttt_ratio_min": min(t) if t else None,
                "ttt_ratio_max": max(t) if t else None,
                "throughput_ratio_min": min(h) if h else None,
                "throughput_ratio_max": max(h) if h else None,
                "comparable_min": min(comparable) if comparable else None,
                "comparable_max": max(comparable) if comparable else None,
                "gpu_counts": sorted({r["gpus"] for r in rs}),
            }
        )
    order = {b: i for i, b in enumerate(bench_order(rules or default_rules(), [r["benchmark"] for r in rows]))}
    ranges.sort(key=lambda r: (r["pair"], r["benchmark"] == "all benchmarks", order.get(r["benchmark"], 0)))
    return ranges


def scaling(systems: list[dict], rules: Rules) -> list[dict]:
    """Speedup and efficiency against the smallest GPU count of each device."""
    tol = rules.settings["scaling"]["superlinear_tolerance"]
    lines = defaultdict(list)
    for s in systems:
        if s["gpus"]:
            lines[(s["benchmark"], s["device"], s["stack"])].append(s)
    rows = []
    for (bench, device, stack), ss in lines.items():
        ss.sort(key=lambda s: s["gpus"])
        base_t = next((s for s in ss if _ttt_of(s)), None)
        base_h = next((s for s in ss if s["throughput_mean"]), None)
        if len(ss) < 2:
            continue
        for s in ss:
            row = {
                "benchmark": bench,
                "device": device,
                "stack": stack,
                "gpus": s["gpus"],
                "accelerator_kind": s["accelerator_kind"],
                "ttt_minutes": _ttt_of(s),
                "throughput": s["throughput_mean"],
                "epochs": s["epochs_mean"],
                "too_few_runs": s["too_few_runs"],
                "base_gpus": None,
                "ideal": None,
                "speedup": None,
                "efficiency": None,
                "throughput_base_gpus": None,
                "throughput_speedup": None,
                "throughput_efficiency": None,
                "epoch_ratio": None,
                "per_epoch_speedup": None,
                "superlinear": False,
                "explanation": "",
            }
            if base_t and _ttt_of(s) and s["gpus"] >= base_t["gpus"]:
                ideal = s["gpus"] / base_t["gpus"]
                sp = _ttt_of(base_t) / _ttt_of(s)
                row.update(base_gpus=base_t["gpus"], ideal=ideal, speedup=sp, efficiency=sp / ideal)
                eb, en = base_t["epochs_mean"], s["epochs_mean"]
                if eb and en:
                    row["epoch_ratio"] = eb / en
                    row["per_epoch_speedup"] = sp / (eb / en)
                if s["gpus"] > base_t["gpus"] and sp > ideal * (1 + tol):
                    row["superlinear"] = True
                    row["explanation"] = _explain_superlinear(sp, ideal, tol, base_t["gpus"], eb, en)
            if base_h and s["throughput_mean"] and s["gpus"] >= base_h["gpus"]:
                ideal_h = s["gpus"] / base_h["gpus"]
                sh = s["throughput_mean"] / base_h["throughput_mean"]
                row.update(
                    throughput_base_gpus=base_h["gpus"], throughput_speedup=sh, throughput_efficiency=sh / ideal_h
                )
            rows.append(row)
    order = {b: i for i, b in enumerate(bench_order(rules, [r["benchmark"] for r in rows]))}
    rows.sort(key=lambda r: (order[r["benchmark"]], r["device"], r["stack"], r["gpus"]))
    return rows


def _explain_superlinear(sp, ideal, tol, base_gpus, eb, en) -> str:
    head = f"{sp:.2f}x on {ideal:g}x the GPUs of {base_gpus}"
    if not (eb and en):
        return f"{head}: epochs to converge not logged, so it cannot be explained"
    per_epoch = sp * en / eb
    if en < eb:
        because = f"converged in {en:g} epochs instead of {eb:g} ({eb / en:.2f}x fewer)"
        if per_epoch <= ideal * (1 + tol):
            return (
                f"{head}: {because}; per epoch the speedup is {per_epoch:.2f}x, within the ideal "
                f"{ideal:g}x, so the gain comes from the seed's epochs to converge, not the hardware"
            )
        return f"{head}: {because}, yet per epoch the speedup is still {per_epoch:.2f}x, above the ideal {ideal:g}x"
    return f"{head}: not explained by epochs to converge ({eb:g} vs {en:g}); per epoch {per_epoch:.2f}x"


def energy_rows(systems: list[dict]) -> list[dict]:
    return [
        {
            "benchmark": s["benchmark"],
            "system": s["system"],
            "device": s["device"],
            "gpus": s["gpus"],
            "power_w_mean": s["power_w_mean"],
            "spec_power_w": s["spec_power_w"],
            "throughput_mean": s["throughput_mean"],
            "sample_unit": s["sample_unit"],
            "perf_per_watt": s["perf_per_watt"],
            "energy_to_train_wh": s["energy_to_train_wh"],
        }
        for s in systems
        if s["power_w_mean"]
    ]


def analyse(runs: list[Run], rules: Rules | None = None, other: list[Run] | None = None) -> Analysis:
    rules = rules or default_rules()
    systems = system_rows(runs, rules)
    ratios, ranges = device_ratios(systems, rules)
    seeds, effects = seed_tables(runs, rules)
    return Analysis(
        runs=runs,
        systems=systems,
        ratios=ratios,
        ratio_ranges=ranges,
        scaling=scaling(systems, rules),
        seeds=seeds,
        seed_effects=effects,
        energy=energy_rows(systems),
        compare=compare_runs(runs, other, rules) if other is not None else None,
    )
