"""Run-to-run statistics of the study: seed effects (epochs to converge by seed
and GPU count, which benchmarks the seed dominates) and the comparison of the
same systems in two sets of runs (changes beyond run-to-run noise). Plain
data in, plain data out; the settings are lab/data/report.yml's.
"""

from __future__ import annotations

import math
from collections import defaultdict

from lab.report import stats
from lab.core.mlperf import Rules, bench_order
from lab.results.logreader import Run, system_label


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
    seeds = [
        {
            "benchmark": r.bench_label,
            "device": r.device,
            "gpus": r.gpus,
            "stack": r.stack,
            "seed": r.seed,
            "epochs": r.epochs,
            "ttt_minutes": r.ttt_s / 60.0,
            "minutes_per_epoch": r.ttt_s / 60.0 / r.epochs,
            "source": r.source,
        }
        for r in ok
    ]
    order = {b: i for i, b in enumerate(bench_order(rules, [s["benchmark"] for s in seeds]))}
    seeds.sort(
        key=lambda s: (order[s["benchmark"]], s["device"], s["gpus"] or 0, s["seed"] if s["seed"] is not None else -1)
    )
    by_bench = defaultdict(list)
    for r in ok:
        by_bench[r.bench_label].append(r)
    effects = [_seed_effect(bench, by_bench[bench], cfg) for bench in bench_order(rules, by_bench)]
    return seeds, effects


def _seed_share(rs: list[Run]) -> tuple[float, float, int]:
    """(SS of log epochs, SS of log time per epoch, systems with two runs or more), the sums of squares taken
    around each system's means and pooled over systems."""
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
    return ss_e, ss_p, multi


def _seed_effect(bench: str, rs: list[Run], cfg: dict) -> dict:
    """One benchmark's seed effect row (seed_tables)."""
    eps = [r.epochs for r in rs]
    ss_e, ss_p, multi = _seed_share(rs)
    ratio = max(eps) / min(eps)
    if multi and (ss_e + ss_p) > 0:
        share = ss_e / (ss_e + ss_p)
        dominated = share >= cfg["share_threshold"]
        basis = (
            f"within-system variation over {multi} system(s) with 2+ runs: "
            f"seed share {share:.2f} vs threshold {cfg['share_threshold']:g}"
        )
    else:
        share = None
        dominated = ratio >= cfg["epoch_ratio_threshold"]
        basis = (
            f"no system has 2 runs that differ in time to train: max/min epochs {ratio:.2f} "
            f"vs threshold {cfg['epoch_ratio_threshold']:g}"
        )
    by_dev = defaultdict(dict)
    several_stacks = len({r.stack for r in rs}) > 1
    for r in rs:
        name = f"{r.device} / {r.stack}" if several_stacks else r.device
        by_dev[name].setdefault(r.gpus, []).append(r.epochs)
    parts = []
    for dev in sorted(by_dev):
        cells = ", ".join(
            ("" if g == 0 else f"{g if g is not None else '?'}: ") + "/".join(f"{e:g}" for e in es)
            for g, es in sorted(by_dev[dev].items(), key=lambda kv: kv[0] or 0)
        )
        parts.append(f"{dev} ({cells})")
    return {
        "benchmark": bench,
        "runs": len(rs),
        "epochs_min": min(eps),
        "epochs_max": max(eps),
        "epoch_ratio": ratio,
        "seed_share": share,
        "systems_with_repeats": multi,
        "seed_dominated": dominated,
        "basis": basis,
        "epochs_by_gpus": "; ".join(parts),
    }


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
    order = {b: i for i, b in enumerate(bench_order(rules, [k[0] for k in keys]))}
    rows = []
    for key in sorted(keys, key=lambda k: (order[k[0]], k[1], k[2] or 0)):
        cur, oth = groups["this"].get(key, []), groups["other"].get(key, [])
        row = {
            "benchmark": key[0],
            "device": key[1],
            "gpus": key[2],
            "system": system_label(key[1], key[2], "unknown"),
            "stack_this": ", ".join(sorted({_stack_detail(r) for r in cur})) or None,
            "stack_other": ", ".join(sorted({_stack_detail(r) for r in oth})) or None,
        }
        if not cur or not oth:
            row["status"] = "only in this report" if cur else "only in the compared set"
            rows.append(row)
            continue
        row["status"] = "compared"
        for metric, vals, better in (
            ("ttt", lambda rs: [r.ttt_s / 60.0 for r in rs if r.mode == "ttt" and r.success and r.ttt_s], "lower"),
            ("throughput", lambda rs: [r.samples_per_s for r in rs if r.samples_per_s], "higher"),
        ):
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
            row.update(
                {
                    f"{metric}_n_other": len(a),
                    f"{metric}_n_this": len(b),
                    f"{metric}_other": ma,
                    f"{metric}_this": mb,
                    f"{metric}_change_pct": None if change is None else 100.0 * change,
                    f"{metric}_t": None if (w is None or math.isinf(w.t)) else w.t,
                    f"{metric}_df": None if w is None else w.df,
                    f"{metric}_p": None if w is None else w.p,
                    f"{metric}_flagged": flagged,
                    f"{metric}_verdict": verdict,
                }
            )
        rows.append(row)
    return rows
