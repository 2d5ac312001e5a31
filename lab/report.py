"""Reports that redo the reference study from logs.

``build_report(paths, out_dir)`` reads every run under ``paths`` (lab.results),
computes the study's tables and writes them:

- per benchmark x system (device, GPU count, stack): the MLPerf score, run
  counts, spread, and a mark where there are too few runs;
- device ratios at equal GPU counts (time to train and throughput);
- scaling against GPU count, super-linear speedups flagged and explained by
  the epochs to converge behind them;
- seed effects: epochs to converge by seed and GPU count, and which benchmarks'
  time to train the seed dominates;
- performance per watt where telemetry exists;
- with ``compare``: the same systems in another set of runs, changes beyond
  run-to-run noise flagged.

Outputs in ``out_dir``: report.html (self-contained: figures embedded as
base64 PNG, no external assets), report.md, summary.json, tables/*.csv,
figures/*.png. Thresholds and MLPerf rules are data (lab/data/*.yml).
"""

from __future__ import annotations

import base64
import csv
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import combinations
from pathlib import Path

import jinja2

from lab import scoring, stats
from lab.errors import ConfigError
from lab.mlperf import Rules, default_rules
from lab.results import Collection, Run, collect, system_label

FORMATS = ("html", "md", "json", "csv")
TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "templates"
SUMMARY_SCHEMA = 1


@dataclass
class ReportResult:
    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    summary: list[dict] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What a command line prints: the files, the counts, every skipped input."""
        runs = sum(r["runs"] for r in self.summary)
        few = sum(1 for r in self.summary if r["too_few_runs"])
        out = [f"wrote {p}" for p in self.files if p.suffix in (".html", ".md", ".json")]
        out.append(f"{len(self.summary)} benchmark x system record(s) from {runs} run(s)"
                   + (f", {few} with too few runs" if few else "")
                   + f"; {len(self.skipped)} input(s) skipped" + (":" if self.skipped else ""))
        out += [f"  skipped {src}: {why}" for src, why in self.skipped]
        return out


def default_out_dir(paths) -> Path:
    """``<first input folder>/report`` (a file's folder for a file)."""
    first = Path(list(paths)[0])
    return (first if first.is_dir() else first.parent) / "report"


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

def _bench_order(rules: Rules, labels) -> list[str]:
    order = {name: i for i, name in enumerate(rules.benchmarks)}

    def key(label):
        base = label.split(" [")[0]
        return (order.get(base, len(order)), base, label)
    return sorted(set(labels), key=key)


def _minutes(seconds):
    return None if seconds is None else seconds / 60.0


def system_rows(runs: list[Run], rules: Rules) -> list[dict]:
    """One record per benchmark x system: a result tree's submitter x results folder, or
    for gpulab's runs and loose logs the device x GPU count x stack (x scale)."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        groups[r.group_key].append(r)
    rows = []
    for key, group in groups.items():
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
            "round": sc.round,
            "runs": sc.runs, "successes": sc.successes,
            "runs_required": sc.runs_required, "converged_required": sc.converged_required,
            "scored_runs": len(sc.scored),
            "score_minutes": _minutes(sc.score_s), "score_basis": sc.basis,
            "too_few_runs": bool(sc.too_few), "mark": mark,
            "compliance": sc.compliance,
            "compliance_runs_checked": len(checked),
            "compliance_runs_failed": sum(1 for r in checked if r.compliance == "FAIL"),
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
    order = {b: i for i, b in enumerate(_bench_order(rules, [r["benchmark"] for r in rows]))}
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
    order = {b: i for i, b in enumerate(_bench_order(rules or default_rules(), [r["benchmark"] for r in rows]))}
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
    order = {b: i for i, b in enumerate(_bench_order(rules, [r["benchmark"] for r in rows]))}
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


def seed_tables(runs: list[Run], rules: Rules) -> tuple[list[dict], list[dict]]:
    """Epochs to converge by seed and GPU count; which benchmarks the seed dominates.

    Statistic (lab/data/report.yml, seed): time to train = epochs x time per
    epoch, so log(TTT) = log(epochs) + log(time per epoch). Within each system
    (same benchmark, device, GPU count, stack) with two successful runs or
    more, the seed share is SS(log epochs) / (SS(log epochs) + SS(log time per
    epoch)), the sums of squares taken around each system's means and pooled
    over systems. Seed-dominated: share >= share_threshold. Where no system has
    two runs, the benchmark is seed-dominated when max/min epochs to converge
    over all its runs reaches epoch_ratio_threshold (so also where repeated
    runs exist but took exactly the same time: they carry no information).
    """
    cfg = rules.settings["seed"]
    ok = [r for r in runs if r.mode == "ttt" and r.success and r.ttt_s and r.epochs]
    seeds = [{
        "benchmark": r.bench_label, "device": r.device, "gpus": r.gpus, "stack": r.stack,
        "seed": r.seed, "epochs": r.epochs, "ttt_minutes": r.ttt_s / 60.0,
        "minutes_per_epoch": r.ttt_s / 60.0 / r.epochs, "source": r.source,
    } for r in ok]
    order = {b: i for i, b in enumerate(_bench_order(rules, [s["benchmark"] for s in seeds]))}
    seeds.sort(key=lambda s: (order[s["benchmark"]], s["device"], s["gpus"] or 0,
                              s["seed"] if s["seed"] is not None else -1))
    effects = []
    by_bench = defaultdict(list)
    for r in ok:
        by_bench[r.bench_label].append(r)
    for bench in _bench_order(rules, by_bench):
        rs = by_bench[bench]
        eps = [r.epochs for r in rs]
        systems = defaultdict(list)
        for r in rs:
            systems[(r.device, r.gpus, r.stack)].append(r)
        ss_e = ss_p = 0.0
        multi = 0
        for group in systems.values():
            if len(group) < 2:
                continue
            multi += 1
            le = [math.log(r.epochs) for r in group]
            lp = [math.log(r.ttt_s / r.epochs) for r in group]
            me, mp = sum(le) / len(le), sum(lp) / len(lp)
            ss_e += sum((x - me) ** 2 for x in le)
            ss_p += sum((x - mp) ** 2 for x in lp)
        ratio = max(eps) / min(eps)
        if multi and (ss_e + ss_p) > 0:
            share = ss_e / (ss_e + ss_p)
            dominated = share >= cfg["share_threshold"]
            basis = (f"within-system variation over {multi} system(s) with 2+ runs: "
                     f"seed share {share:.2f} vs threshold {cfg['share_threshold']:g}")
        else:
            share = None
            dominated = ratio >= cfg["epoch_ratio_threshold"]
            basis = (f"no system has 2 runs that differ in time to train: max/min epochs {ratio:.2f} "
                     f"vs threshold {cfg['epoch_ratio_threshold']:g}")
        by_dev = defaultdict(dict)
        several_stacks = len({r.stack for r in rs}) > 1
        for r in rs:
            name = f"{r.device} / {r.stack}" if several_stacks else r.device
            by_dev[name].setdefault(r.gpus, []).append(r.epochs)
        parts = []
        for dev in sorted(by_dev):
            cells = ", ".join(f"{g if g is not None else '?'}: " + "/".join(f"{e:g}" for e in es)
                              for g, es in sorted(by_dev[dev].items(), key=lambda kv: kv[0] or 0))
            parts.append(f"{dev} ({cells})")
        effects.append({
            "benchmark": bench, "runs": len(rs), "epochs_min": min(eps), "epochs_max": max(eps),
            "epoch_ratio": ratio, "seed_share": share, "systems_with_repeats": multi,
            "seed_dominated": dominated, "basis": basis,
            "epochs_by_gpus": "; ".join(parts),
        })
    return seeds, effects


def energy_rows(systems: list[dict]) -> list[dict]:
    return [{
        "benchmark": s["benchmark"], "system": s["system"], "device": s["device"], "gpus": s["gpus"],
        "power_w_mean": s["power_w_mean"], "spec_power_w": s["spec_power_w"],
        "throughput_mean": s["throughput_mean"], "sample_unit": s["sample_unit"],
        "perf_per_watt": s["perf_per_watt"], "energy_to_train_wh": s["energy_to_train_wh"],
    } for s in systems if s["power_w_mean"]]


def _stack_detail(r: Run) -> str:
    if r.stack_versions and r.stack_versions != r.stack:
        return f"{r.stack} ({r.stack_versions})"
    return r.stack


def compare_runs(current: list[Run], other: list[Run], rules: Rules) -> list[dict]:
    """The same benchmark, device and GPU count in two sets of runs.

    Test (lab/data/report.yml, compare): Welch's two-sided t test on the
    successful runs' times to train (and separately on throughput); a change
    is flagged when p < alpha and the relative change of the mean is at least
    min_relative_change. Fewer than two runs on a side: not testable.
    change = (this - other) / other.
    """
    cfg = rules.settings["compare"]
    groups = {"this": defaultdict(list), "other": defaultdict(list)}
    for side, runs in (("this", current), ("other", other)):
        for r in runs:
            groups[side][(r.bench_label, r.device, r.gpus)].append(r)
    keys = set(groups["this"]) | set(groups["other"])
    order = {b: i for i, b in enumerate(_bench_order(rules, [k[0] for k in keys]))}
    rows = []
    for key in sorted(keys, key=lambda k: (order[k[0]], k[1], k[2] or 0)):
        cur, oth = groups["this"].get(key, []), groups["other"].get(key, [])
        row = {"benchmark": key[0], "device": key[1], "gpus": key[2],
               "system": system_label(key[1], key[2], "unknown"),
               "stack_this": ", ".join(sorted({_stack_detail(r) for r in cur})) or None,
               "stack_other": ", ".join(sorted({_stack_detail(r) for r in oth})) or None}
        if not cur or not oth:
            row["status"] = "only in this report" if cur else "only in the compared set"
            rows.append(row)
            continue
        row["status"] = "compared"
        for metric, vals, better in (
                ("ttt", lambda rs: [r.ttt_s / 60.0 for r in rs if r.mode == "ttt" and r.success and r.ttt_s],
                 "lower"),
                ("throughput", lambda rs: [r.samples_per_s for r in rs if r.samples_per_s], "higher")):
            a, b = vals(oth), vals(cur)
            ma, mb = stats.mean(a), stats.mean(b)
            change = (mb - ma) / ma if (ma and mb is not None) else None
            w = stats.welch(a, b)
            if not a and not b:
                verdict, flagged = "no data", False
            elif w is None:
                verdict, flagged = "too few runs to test (2 per side needed)", False
            else:
                flagged = w.p < cfg["alpha"] and change is not None and abs(change) >= cfg["min_relative_change"]
                if not flagged:
                    verdict = "within run-to-run noise"
                else:
                    improved = (change < 0) if better == "lower" else (change > 0)
                    verdict = "better" if improved else "worse"
            row.update({
                f"{metric}_n_other": len(a), f"{metric}_n_this": len(b),
                f"{metric}_other": ma, f"{metric}_this": mb, f"{metric}_change_pct":
                    None if change is None else 100.0 * change,
                f"{metric}_t": None if (w is None or math.isinf(w.t)) else w.t,
                f"{metric}_df": None if w is None else w.df,
                f"{metric}_p": None if w is None else w.p,
                f"{metric}_flagged": flagged, f"{metric}_verdict": verdict,
            })
        rows.append(row)
    return rows


def key_findings(an: Analysis) -> list[str]:
    """The study's findings, as sentences computed from the tables."""
    out = []
    for r in an.ratio_ranges:
        if r["benchmark"] != "all benchmarks":
            continue
        fast, slow = r["pair"].split(" / ")
        n = len({x["benchmark"] for x in an.ratios if x["pair"] == r["pair"]})
        out.append(f"{fast} is {fmt_range(r['comparable_min'], r['comparable_max'])} {slow} over {n} "
                   "benchmark(s) at equal GPU counts (time to train where epochs to converge match, "
                   "throughput where they differ).")
    for r in an.ratio_ranges:
        if r["benchmark"] == "all benchmarks":
            continue
        out.append(f"{r['benchmark']}: {r['pair']} time to train {fmt_range(r['ttt_ratio_min'], r['ttt_ratio_max'])}, "
                   f"throughput {fmt_range(r['throughput_ratio_min'], r['throughput_ratio_max'])}.")
    lines = defaultdict(list)
    for r in an.scaling:
        if r["superlinear"]:
            lines[(r["benchmark"], r["device"], r["stack"])].append(r)
    for (bench, device, _), rs in lines.items():
        counts = ", ".join(str(r["gpus"]) for r in rs)
        speedups = ", ".join(f"{r['speedup']:.2f}x" for r in rs)
        text = f"{bench} on {device}: super-linear speedup at {counts} GPUs ({speedups} over {rs[0]['base_gpus']})"
        if all(r["epoch_ratio"] for r in rs):
            base_ep = rs[0]["epochs"] * rs[0]["epoch_ratio"]
            per_epoch = ", ".join(f"{r['per_epoch_speedup']:.2f}x" for r in rs)
            explained = all("not the hardware" in r["explanation"] for r in rs)
            text += (f"; epochs to converge {base_ep:g} -> " + ", ".join(f"{r['epochs']:g}" for r in rs)
                     + f"; per epoch {per_epoch}")
            text += (": the seed's epochs to converge, not the hardware" if explained
                     else ": not fully explained by epochs to converge")
        else:
            text += "; epochs to converge not logged"
        out.append(text + ".")
    dom = [e["benchmark"] for e in an.seed_effects if e["seed_dominated"]]
    rest = [e["benchmark"] for e in an.seed_effects if not e["seed_dominated"]]
    if dom:
        out.append(f"Time to train dominated by the seed (epochs to converge): {', '.join(dom)}.")
    if rest:
        out.append(f"Not seed-dominated: {', '.join(rest)}.")
    thr_only = [s for s in an.systems if not s["runs"] and s["throughput_runs"]]
    if thr_only:
        out.append(f"{len(thr_only)} of {len(an.systems)} benchmark x system records come from throughput runs "
                   "only: throughput (Figure 2, the device ratios), no time to train.")
    few = sum(1 for s in an.systems if s["too_few_runs"])
    if few:
        out.append(f"{few} of {len(an.systems)} benchmark x system scores rest on too few runs (marked).")
    if an.compare is not None:
        flagged = [c for c in an.compare if c.get("ttt_flagged") or c.get("throughput_flagged")]
        out.append(f"Compared with the other set: {len(flagged)} of "
                   f"{sum(1 for c in an.compare if c['status'] == 'compared')} matched systems changed "
                   "beyond run-to-run noise.")
    return out


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


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

SUMMARY_KEYS = ("benchmark", "submitter", "system", "device", "gpus", "nodes", "framework", "stack",
                "runs", "successes", "runs_required", "scored_runs", "score_minutes", "too_few_runs",
                "compliance", "mark")


def _clean(v):
    """JSON-safe: no NaN or infinity."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def fmt_num(x, digits: int = 3) -> str:
    """About ``digits`` significant digits, never in exponent form; — for missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    ax = abs(x)
    if ax == 0:
        return "0"
    if float(x).is_integer() and ax < 1e15:
        return f"{int(x):,}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(ax))))
    return f"{x:,.{decimals}f}"


def fmt_minutes(x) -> str:
    """Minutes to 0.01, as MLPerf's results tables print them; — for missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:,.2f}"


def fmt_ratio(x) -> str:
    return "—" if x is None else f"{x:.2f}x"


def fmt_range(lo, hi) -> str:
    if lo is None:
        return "—"
    return f"{lo:.2f}x" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}x"


def fmt_pct(x) -> str:
    return "—" if x is None else f"{x:+.1f}%"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=lambda name: bool(name) and name.endswith(".html.j2"),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True)
    env.filters.update(num=fmt_num, minutes=fmt_minutes, ratio=fmt_ratio, pct=fmt_pct, rng=fmt_range,
                       md=lambda s: str(s).replace("|", "\\|").replace("\n", " "))
    return env


CSV_TABLES = {
    "scores.csv": "systems", "runs.csv": "runs", "ratios.csv": "ratios",
    "ratio_ranges.csv": "ratio_ranges", "scaling.csv": "scaling", "seeds.csv": "seeds",
    "seed_effects.csv": "seed_effects", "energy.csv": "energy", "compare.csv": "compare",
    "skipped.csv": "skipped",
}


def _write_csv(path: Path, rows: list[dict]):
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols or ["empty"])
        w.writeheader()
        for r in rows:
            w.writerow({k: ("; ".join(map(str, v)) if isinstance(v, list) else v) for k, v in r.items()})


def _title(systems: list[dict], rules: Rules) -> str:
    """The rounds the records are scored by: published rounds by name, gpulab's runs by its ruleset."""
    names = sorted({f"MLPerf Training {s['round']} results" if s["round"] in rules.rounds else rules.ruleset
                    for s in systems})
    return ", ".join(names) or rules.ruleset


def build_report(paths, out_dir, formats=FORMATS, compare=None, *, rules: Rules | None = None) -> ReportResult:
    """Read the runs under ``paths`` and write the report to ``out_dir``."""
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError(f"report format {', '.join(bad) or '(none)'}: choose from {', '.join(FORMATS)}")
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    if not paths:
        raise ConfigError("report: no input path given")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir}: exists and is not a folder")
    rules = rules or default_rules()
    coll = collect(paths, rules)
    other = collect([Path(compare)], rules) if compare is not None else None
    an = analyse(coll.runs, rules, other.runs if other else None)
    result = ReportResult(skipped=[(s.source, s.reason) for s in coll.skipped])
    result.summary = [_clean({k: s[k] for k in (*SUMMARY_KEYS, *[k for k in s if k not in SUMMARY_KEYS])})
                      for s in an.systems]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{out_dir}: cannot create the report folder ({exc.strerror or exc})") from None
    tables = {
        "systems": an.systems, "runs": [r.row() for r in an.runs], "ratios": an.ratios,
        "ratio_ranges": an.ratio_ranges, "scaling": an.scaling, "seeds": an.seeds,
        "seed_effects": an.seed_effects, "energy": an.energy, "compare": an.compare or [],
        "skipped": [{"source": s, "reason": r} for s, r in result.skipped],
    }
    if other is not None:
        tables["skipped"] += [{"source": s.source, "reason": f"(compared set) {s.reason}"}
                              for s in other.skipped]
        result.skipped = [(s["source"], s["reason"]) for s in tables["skipped"]]
    meta = {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "inputs": coll.inputs, "compare": str(compare) if compare is not None else None,
        "title": _title(an.systems, rules),
        "ruleset": rules.ruleset, "settings": rules.settings,
        "benchmarks": {n: {"title": b.title, "metric": b.metric, "target": b.target,
                           "runs_required": b.runs_required,
                           "converged_required": b.converged_required, "sample_unit": b.sample_unit}
                       for n, b in rules.benchmarks.items()},
        "n_runs": len(an.runs), "n_success": sum(1 for r in an.runs if r.success),
        "n_skipped": len(tables["skipped"]),
    }
    if "json" in formats:
        doc = _clean({"schema": SUMMARY_SCHEMA, **{k: meta[k] for k in (
            "generated", "inputs", "compare", "ruleset", "n_runs", "n_success", "n_skipped")},
            "records": result.summary, "ratios": an.ratios, "ratio_ranges": an.ratio_ranges,
            "scaling": an.scaling, "seed_effects": an.seed_effects, "energy": an.energy,
            "compare": an.compare, "skipped": tables["skipped"]})
        path = out_dir / "summary.json"
        path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        result.files.append(path)
    if "csv" in formats:
        tdir = out_dir / "tables"
        tdir.mkdir(exist_ok=True)
        for name, key in CSV_TABLES.items():
            if key == "compare" and an.compare is None:
                continue
            path = tdir / name
            _write_csv(path, [_clean(r) for r in tables[key]])
            result.files.append(path)
    if "html" in formats or "md" in formats:
        from lab import figures
        fdir = out_dir / "figures"
        fdir.mkdir(exist_ok=True)
        for old in fdir.glob("fig*.png"):
            old.unlink()
        figs = figures.draw_all(an, rules, fdir)
        result.files.extend(f["path"] for f in figs)
        env = _env()
        ctx = {"meta": meta, "an": an, "tables": tables, "figures": figs,
               "findings": key_findings(an)}
        if "html" in formats:
            for f in figs:
                f["data_uri"] = "data:image/png;base64," + base64.b64encode(f["path"].read_bytes()).decode()
            path = out_dir / "report.html"
            path.write_text(env.get_template("report.html.j2").render(**ctx), encoding="utf-8")
            result.files.append(path)
        if "md" in formats:
            path = out_dir / "report.md"
            path.write_text(env.get_template("report.md.j2").render(**ctx), encoding="utf-8")
            result.files.append(path)
    return result


def load_collection(paths, rules: Rules | None = None) -> Collection:
    """The runs and skipped entries under ``paths`` (for callers that only list)."""
    return collect([Path(p) for p in paths], rules or default_rules())
