"""The study's records: one per benchmark x system (a result tree's submitter x results folder, or for
gpulab's runs and loose logs the device x GPU count x stack, x scale): who and what, its MLPerf score
(lab.report.scoring), its compliance, and its figures (time to train, epochs, throughput, power, energy).
Plain data in, plain data out; lab.report.analysis builds the other tables from these records.
"""

from __future__ import annotations

from collections import defaultdict

from lab.core.mlperf import Rules, bench_order
from lab.report import scoring
from lab.report import stats
from lab.results.logreader import Run
from lab.results.runs import accelerator_kind


def _minutes(seconds):
    return None if seconds is None else seconds / 60.0


def system_rows(runs: list[Run], rules: Rules) -> list[dict]:
    """One record per benchmark x system: a result tree's submitter x results folder, or
    for gpulab's runs and loose logs the device x GPU count x stack (x scale)."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        groups[r.group_key].append(r)
    rows = [_system_row(group, rules) for group in groups.values()]
    _disambiguate(rows)
    order = {b: i for i, b in enumerate(bench_order(rules, [r["benchmark"] for r in rows]))}
    rows.sort(
        key=lambda r: (
            order[r["benchmark"]],
            r["submitter"] or "",
            r["device"],
            r["gpus"] or 0,
            r["stack"],
            r["system"],
            r["system_key"] or "",
        )
    )
    return rows


def _system_row(group: list[Run], rules: Rules) -> dict:
    """The record of one benchmark x system: who and what, its MLPerf score, compliance, and figures."""
    first = group[0]
    sc = scoring.score(group, rules)
    rule = rules.benchmarks.get(first.benchmark)
    unit, thr_runs, mark = _throughput_unit(group, rule.sample_unit if rule else "samples", sc.mark)
    device, gpus = first.device, first.gpus
    return {
        "benchmark": first.bench_label,
        "benchmark_name": first.benchmark,
        "scale": first.scale,
        "submitter": first.submitter,
        "system": first.system,
        "system_key": first.system_key,
        "submission": first.submission,
        "device": device,
        "gpus": gpus,
        "nodes": first.nodes,
        "framework": first.framework,
        "accelerator": first.accelerator,
        "stack": first.stack,
        "accelerator_kind": accelerator_kind(device, gpus),
        "round": sc.round,
        "scaling_factor": sc.scaling_factor,
        "batch_size": sc.batch_size,
        "samples_to_converge": sc.samples_to_converge,
        "energy_j": sc.energy_j,
        "runs": sc.runs,
        "successes": sc.successes,
        "runs_required": sc.runs_required,
        "converged_required": sc.converged_required,
        "scored_runs": len(sc.scored),
        "score_minutes": _minutes(sc.score_s),
        "score_basis": sc.basis,
        "too_few_runs": bool(sc.too_few),
        "mark": mark,
        **_compliance_fields(group, sc),
        **_figure_fields(group, thr_runs, unit, rules),
    }


def _throughput_unit(group: list[Run], default_unit: str, mark: str | None) -> tuple[str, list[Run], str | None]:
    """(the sample unit most runs logged their throughput in, those runs, the record's mark, which names the
    other units when there are several)."""
    units = defaultdict(list)
    for r in group:
        if r.samples_per_s:
            units[r.sample_unit or default_unit].append(r)
    unit = max(units, key=lambda u: (len(units[u]), u == default_unit)) if units else default_unit
    if len(units) > 1:
        mark = "; ".join(
            filter(None, [mark, f"throughput logged in {len(units)} units: {len(units[unit])} run(s) in {unit} used"])
        )
    return unit, units.get(unit, []), mark


def _compliance_fields(group: list[Run], sc) -> dict:
    """A record's compliance: the score's verdict, the runs checked and failed, rulesets, failures, waivers."""
    checked = [r for r in group if r.compliance in ("PASS", "FAIL")]
    return {
        "compliance": sc.compliance,
        "compliance_runs_checked": len(checked),
        "compliance_runs_failed": sum(1 for r in checked if r.compliance == "FAIL"),
        "compliance_ruleset": ", ".join(sorted({r.compliance_ruleset for r in group if r.compliance_ruleset})) or None,
        "compliance_failures": [f"{r.run_name}: {r.compliance_note}" for r in sc.scored if r.compliance == "FAIL"],
        "compliance_waived": list(dict.fromkeys(w for r in group for w in r.compliance_waived)),
    }


def _figure_fields(group: list[Run], thr_runs: list[Run], unit: str, rules: Rules) -> dict:
    """A record's figures: time to train and epochs of its successful runs, throughput (of ``thr_runs``, in
    ``unit``), power, performance per watt, energy to train, seeds and hosts."""
    succ = [r for r in group if r.mode == "ttt" and r.success and r.ttt_s is not None]
    all_t = [r.ttt_s / 60.0 for r in succ]
    epochs = [r.epochs for r in succ if r.epochs is not None]
    thr = [r.samples_per_s for r in thr_runs]
    power = [r.avg_power_w for r in group if r.avg_power_w]
    ppw = [r.perf_per_watt for r in thr_runs if r.perf_per_watt]
    e2t = [r.energy_to_train_wh for r in succ if r.energy_to_train_wh is not None]
    tmean = stats.mean(all_t)
    tstd = stats.stdev(all_t)
    device, gpus = group[0].device, group[0].gpus
    return {
        "ttt_mean_minutes": tmean,
        "ttt_min_minutes": min(all_t) if all_t else None,
        "ttt_max_minutes": max(all_t) if all_t else None,
        "ttt_std_minutes": tstd,
        "ttt_cv_pct": (100.0 * tstd / tmean) if (tstd is not None and tmean) else None,
        "epochs_mean": stats.mean(epochs),
        "epochs_min": min(epochs) if epochs else None,
        "epochs_max": max(epochs) if epochs else None,
        "throughput_mean": stats.mean(thr),
        "throughput_std": stats.stdev(thr),
        "throughput_runs": len(thr),
        "sample_unit": unit,
        "power_w_mean": stats.mean(power),
        "spec_power_w": (rules.device_power.get(device) or 0) * gpus
        if (rules.device_power.get(device) and gpus)
        else None,
        "perf_per_watt": stats.mean(ppw),
        "energy_to_train_wh": stats.mean(e2t),
        "seeds": sorted({r.seed for r in group if r.seed is not None}),
        "hosts": sorted({r.host for r in group if r.host}),
    }


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
