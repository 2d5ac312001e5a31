"""The study's tables from runs (lab.results.logreader.Run): per benchmark x system scores
(lab.report.scoring), device ratios at equal GPU counts, scaling against GPU count
with super-linear speedups explained, performance per watt, and ``analyse`` that makes them all (seed effects and the comparison of two
sets of runs are lab.report.comparison's). Plain data in, plain data out; rendering
is lab.report.build's and lab.report.figures'.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

from lab.report import scoring
from lab.report import stats
from lab.report.comparison import compare_runs, seed_tables
from lab.core.mlperf import Rules, bench_order, default_rules
from lab.results.logreader import Run
from lab.results.runs import accelerator_kind


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

def _minutes(seconds):
    return None if seconds is None else seconds / 60.0


def system_rows(runs: list[Run], rules: Rules) -> list[dict]:
    """One record per benchmark x system: a result tree's submitter x results folder, or
    for gpulab's runs and loose logs the device x GPU count x stack (x scale)."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        groups[r.group_key].append(r)
    rows = []
    for group in groups.values():
        first = group[0]
        sc = scoring.score(group, rules)
        rule = rules.benchmarks.get(first.benchmark)
        succ = [r for r in group if r.mode == "ttt" and r.success and r.ttt_s is not None]
        mark = sc.mark
        all_t = [r.ttt_s / 60.0 for r in succ]
        epochs = [r.epochs for r in succ if r.epochs is not None]
        default_unit = rule.sample_unit if rule else "samples"
        units = defaultdict(list)
        for r in group:
            if r.samples_per_s:
                units[r.sample_unit or default_unit].append(r)
        unit = max(units, key=lambda u: (len(units[u]), u == default_unit)) if units else default_unit
        if len(units) > 1:
            mark = "; ".join(filter(None, [mark, f"throughput logged in {len(units)} units: "
                                           f"{len(units[unit])} run(s) in {unit} used"]))
        thr = [r.samples_per_s for r in units.get(unit, [])]
        power = [r.avg_power_w for r in group if r.avg_power_w]
        ppw = [r.perf_per_watt for r in units.get(unit, []) if r.perf_per_watt]
        e2t = [r.energy_to_train_wh for r in succ if r.energy_to_train_wh is not None]
        tmean = stats.mean(all_t)
        tstd = stats.stdev(all_t)
        device, gpus, stack = first.device, first.gpus, first.stack
        checked = [r for r in group if r.compliance in ("PASS", "FAIL")]
        rows.append({
            "benchmark": first.bench_label, "benchmark_name": first.benchmark, "scale": first.scale,
            "submitter": first.submitter, "system": first.system, "system_key": first.system_key,
            "submission": first.submission, "device": device, "gpus": gpus, "nodes": first.nodes,
            "framework": first.framework, "accelerator": first.accelerator, "stack": stack,
            "accelerator_kind": accelerator_kind(device, gpus),
            "round": sc.round, "scaling_factor": sc.scaling_factor,
            "batch_size": sc.batch_size, "samples_to_converge": sc.samples_to_converge,
            "energy_j": sc.energy_j,
            "runs": sc.runs, "successes": sc.successes,
            "runs_required": sc.runs_required, "converged_required": sc.converged_required,
            "scored_runs": len(sc.scored),
            "score_minutes": _minutes(sc.score_s), "score_basis": sc.basis,
            "too_few_runs": bool(sc.too_few), "mark": mark,
            "compliance": sc.compliance,
            "compliance_runs_checked": len(checked),
            "compliance_runs_failed": sum(1 for r in checked if r.compliance == "FAIL"),
            "compliance_ruleset": ", ".join(sorted({r.compliance_ruleset for r in group
                                                    if r.compliance_ruleset})) or None,
            "compliance_failures": [f"{r.run_name}: {r.compliance_note}" for r in sc.scored
                                    if r.compliance == "FAIL"],
            "compliance_waived": list(dict.fromkeys(w for r in group for w in r.compliance_waived)),
            "ttt_mean_minutes": tmean, "ttt_min_minutes": min(all_t) if all_t else None,
            "ttt_max_minutes": max(all_t) if all_t else None, "ttt_std_minutes": tstd,
            "ttt_cv_pct": (100.0 * tstd / tmean) if (tstd is not None and tmean) else None,
            "epochs_mean": stats.mean(epochs), "epochs_min": min(epochs) if epochs else None,
            "epochs_max": max(epochs) if epochs else None,
            "throughput_mean": stats.mean(thr), "throughput_std": stats.stdev(thr),
            "throughput_runs": len(thr), "sample_unit": unit,
            "power_w_mean": stats.mean(power),
            "spec_power_w": (rules.device_power.get(device) or 0) * gpus
            if (rules.device_power.get(device) and gpus) else None,
            "perf_per_watt": stats.mean(ppw), "energy_to_train_wh": stats.mean(e2t),
            "seeds": sorted({r.seed for r in group if r.seed is not None}),
            "hosts": sorted({r.host for r in group if r.host}),
        })
    _disambiguate(rows)
    order = {b: i for i, b in enumerate(bench_order(rules, [r["benchmark"] for r in rows]))}
    rows.sort(key=lambda r: (order[r["benchmark"]], r["submitter"] or "", r["device"], r["gpus"] or 0,
                             r["stack"], r["system"], r["system_key"] or ""))
    return rows


def _disambiguate(rows: list[dict]):
    """Two results folders of one name and submitter (Google's v0.5 "tpu" folders) keep
    their name and gain the submission folder (else their path) in brackets."""
    seen = defaultdict(list)
    for r in rows:
        if r["system_key"]:
            seen[(r["benchmark"], r["submitter"], r["system"])].append(r)
    for same in seen.values():
        if len({r["system_key"] for r in same}) > 1:
            for r in same:
                r["system"] = f"{r['system']} ({r['submission'] or r['system_key']})"


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
    rows = []
    for (d1, d2), matches in pairs.items():
        raw = []
        for _, s1, s2 in matches:
            if _ttt_of(s1) and _ttt_of(s2):
                raw.append(_ttt_of(s2) / _ttt_of(s1))
            if s1["throughput_mean"] and s2["throughput_mean"]:
                raw.append(s1["throughput_mean"] / s2["throughput_mean"])
        if not raw:
            continue
        fast, slow = (d1, d2) if stats.geomean(raw) >= 1 else (d2, d1)
        for (bench, gpus, stack), s1, s2 in matches:
            a, b = (s1, s2) if fast == d1 else (s2, s1)
            ttt = _ttt_of(b) / _ttt_of(a) if (_ttt_of(a) and _ttt_of(b)) else None
            thr = (a["throughput_mean"] / b["throughput_mean"]
                   if (a["throughput_mean"] and b["throughput_mean"]) else None)
            if ttt is None and thr is None:
                continue
            ea, eb = a["epochs_mean"], b["epochs_mean"]
            if ea is None or eb is None:
                same, note = None, "epochs to converge not logged for both"
            elif math.isclose(ea, eb, rel_tol=1e-6):
                same, note = True, f"same epochs to converge ({ea:g})"
            else:
                same = False
                note = (f"epochs to converge differ ({fast} {ea:g}, {slow} {eb:g}): the time-to-train "
                        "ratio includes the seed effect; compare throughput")
            rows.append({
                "benchmark": bench, "gpus": gpus, "stack": stack, "pair": f"{fast} / {slow}",
                "faster": fast, "slower": slow,
                "ttt_faster_minutes": _ttt_of(a), "ttt_slower_minutes": _ttt_of(b), "ttt_ratio": ttt,
                "throughput_faster": a["throughput_mean"], "throughput_slower": b["throughput_mean"],
                "throughput_ratio": thr, "epochs_faster": ea, "epochs_slower": eb,
                "same_epochs": same,
                "too_few_runs": a["too_few_runs"] or b["too_few_runs"], "note": note,
            })
    rows.sort(key=lambda r: (r["pair"], r["benchmark"], r["gpus"]))
    ranges = []
    by_pair_bench = defaultdict(list)
    for r in rows:
        by_pair_bench[(r["pair"], r["benchmark"])].append(r)
        by_pair_bench[(r["pair"], "all benchmarks")].append(r)
    for (pair, bench), rs in by_pair_bench.items():
        t = [r["ttt_ratio"] for r in rs if r["ttt_ratio"]]
        # The study's overall range quotes each benchmark's comparable figure:
        # time to train where epochs match, throughput where they do not.
        comparable = [r["ttt_ratio"] if r["same_epochs"] and r["ttt_ratio"] else r["throughput_ratio"]
                      for r in rs]
        comparable = [c for c in comparable if c]
        h = [r["throughput_ratio"] for r in rs if r["throughput_ratio"]]
        ranges.append({
            "pair": pair, "benchmark": bench,
            "ttt_ratio_min": min(t) if t else None, "ttt_ratio_max": max(t) if t else None,
            "throughput_ratio_min": min(h) if h else None, "throughput_ratio_max": max(h) if h else None,
            "comparable_min": min(comparable) if comparable else None,
            "comparable_max": max(comparable) if comparable else None,
            "gpu_counts": sorted({r["gpus"] for r in rs}),
        })
    order = {b: i for i, b in enumerate(bench_order(rules or default_rules(), [r["benchmark"] for r in rows]))}
    ranges.sort(key=lambda r: (r["pair"], r["benchmark"] == "all benchmarks", order.get(r["benchmark"], 0)))
    return rows, ranges


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
            row = {"benchmark": bench, "device": device, "stack": stack, "gpus": s["gpus"],
                   "accelerator_kind": s["accelerator_kind"],
                   "ttt_minutes": _ttt_of(s), "throughput": s["throughput_mean"],
                   "epochs": s["epochs_mean"], "too_few_runs": s["too_few_runs"],
                   "base_gpus": None, "ideal": None, "speedup": None, "efficiency": None,
                   "throughput_base_gpus": None, "throughput_speedup": None,
                   "throughput_efficiency": None, "epoch_ratio": None,
                   "per_epoch_speedup": None, "superlinear": False, "explanation": ""}
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
                row.update(throughput_base_gpus=base_h["gpus"], throughput_speedup=sh,
                           throughput_efficiency=sh / ideal_h)
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
        because = (f"converged in {en:g} epochs instead of {eb:g} ({eb / en:.2f}x fewer)")
        if per_epoch <= ideal * (1 + tol):
            return (f"{head}: {because}; per epoch the speedup is {per_epoch:.2f}x, within the ideal "
                    f"{ideal:g}x, so the gain comes from the seed's epochs to converge, not the hardware")
        return (f"{head}: {because}, yet per epoch the speedup is still {per_epoch:.2f}x, above the "
                f"ideal {ideal:g}x")
    return (f"{head}: not explained by epochs to converge ({eb:g} vs {en:g}); per epoch "
            f"{per_epoch:.2f}x")


def energy_rows(systems: list[dict]) -> list[dict]:
    return [{
        "benchmark": s["benchmark"], "system": s["system"], "device": s["device"], "gpus": s["gpus"],
        "power_w_mean": s["power_w_mean"], "spec_power_w": s["spec_power_w"],
        "throughput_mean": s["throughput_mean"], "sample_unit": s["sample_unit"],
        "perf_per_watt": s["perf_per_watt"], "energy_to_train_wh": s["energy_to_train_wh"],
    } for s in systems if s["power_w_mean"]]


def analyse(runs: list[Run], rules: Rules | None = None, other: list[Run] | None = None) -> Analysis:
    rules = rules or default_rules()
    systems = system_rows(runs, rules)
    ratios, ranges = device_ratios(systems, rules)
    seeds, effects = seed_tables(runs, rules)
    return Analysis(
        runs=runs, systems=systems, ratios=ratios, ratio_ranges=ranges,
        scaling=scaling(systems, rules), seeds=seeds, seed_effects=effects,
        energy=energy_rows(systems),
        compare=compare_runs(runs, other, rules) if other is not None else None)
