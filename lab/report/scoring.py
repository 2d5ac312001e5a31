"""The MLPerf score of one benchmark x system: which runs count and how they combine.

Rules by round (lab/data/rounds.yml): a v0.5 or v0.6 log's runs are scored by
their round's table; gpulab's own runs (run directories, MLLOG) by
lab/data/benchmarks.yml (the v0.5 rules of the reference study).

- Runs are taken in their order: result file number (result_2 before
  result_10), then position in the file; run directories by start time.
- A benchmark with ``converged_required`` (NCF): the first that many runs that
  converged, among the first ``runs_required`` runs.
- Otherwise: the successful runs, at most ``runs_required`` of them; a set
  with fewer is marked "too few".
- Score: drop the fastest and the slowest, mean of the rest (lab.report.stats);
  fewer than three runs: their mean, marked.
- Compliance: the scored runs' compliance checker verdicts; a score resting on
  a run whose log fails the checker is marked.

A round that mlperf-logging's result_summarizer scores (rounds.yml ``failed_runs:
slowest``, v0.7 on; the round of a run is lab.results.roundtree's) is scored as it does
(``score_round``): every result file is a run; a run that fails the round's
compliance ruleset (or has no run_start/run_stop) counts among the ``drop`` slowest
runs that are dropped (unet3d: 4 at each end, otherwise 1); with more such runs
than ``drop`` there is no score, and none where no run is left to average. The
time of a run that the ruleset passes is run_start to run_stop. The mean is
multiplied by the benchmark folder's scaling.json factor. Fewer result files than
the round requires are marked, and scored as the summarizer scores them. The summarizer's
detailed columns come with it (lab.results.roundfacts reads them per file): the batch size
and samples to converge of a closed-division folder in a round with RCPs (v1.0 on), and the
energy to train where the folder has power logs, averaged over the runs the time keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lab.report import stats
from lab.core.mlperf import Rules
from lab.results.runs import Run

ROUND_OF_FORMAT = {"v0.5": "v0.5", "v0.6": "v0.6"}


@dataclass
class Score:
    round: str  # "v0.5", "v0.6" or "gpulab" (benchmarks.yml)
    score_s: float | None
    scored: list[Run]
    runs: int
    successes: int
    runs_required: int | None
    converged_required: int | None
    too_few: bool
    basis: str
    marks: list[str] = field(default_factory=list)
    compliance: str = "not checked"  # "PASS", "FAIL (n of m)", "not checked"
    compliance_failed: int = 0
    compliance_passed: int = 0
    ruleset: str | None = None  # the compliance ruleset its logs were checked with ("training 4.0.0")
    scaling_factor: float = 1.0  # scaling.json's factor, applied to score_s
    # result_summarizer's detailed columns (a round's closed division; energy where power logs are)
    batch_size: float | None = None
    samples_to_converge: float | None = None
    energy_j: float | None = None

    @property
    def mark(self) -> str:
        return "; ".join(self.marks)


def rule_for(rules: Rules, bench: str, fmt: str) -> tuple[str, int | None, int | None]:
    """(round, runs required, converged required) for runs of ``bench`` in ``fmt`` logs."""
    rnd = ROUND_OF_FORMAT.get(fmt)
    table = rules.rounds.get(rnd) if rnd else None
    if table is not None and bench in table["runs_required"]:
        return rnd, table["runs_required"][bench], table["converged_required"].get(bench)
    b = rules.benchmarks.get(bench)
    if b is None:
        return (rnd or "gpulab"), None, None
    return "gpulab", b.runs_required, b.converged_required


def order_key(r: Run) -> tuple:
    return (r.order, r.start_s if r.start_s is not None else math.inf, r.source)


def score(group: list[Run], rules: Rules) -> Score:
    """The score of the runs of one benchmark x system (all of one benchmark)."""
    rounds = {r.round for r in group if r.round}
    if len(rounds) == 1 and rules.rounds[next(iter(rounds))].get("failed_runs") == "slowest":
        return score_round(group, rules, rounds.pop())
    sc = _score(group, rules)
    sc.ruleset = next((r.compliance_ruleset for r in group if r.compliance_ruleset), None)
    if any(r.fmt == "mllog" and r.system_key and not r.round for r in group):
        sc.marks.append(
            "the round of this result tree is not known: scored by gpulab's rules "
            "(name it with --round, one of lab/data/rounds.yml)"
        )
    return sc


def _score(group: list[Run], rules: Rules) -> Score:
    ttt = sorted((r for r in group if r.mode == "ttt"), key=order_key)
    bench = group[0].benchmark
    fmts = sorted({r.fmt for r in ttt}) or [group[0].fmt]
    rnd, required, converged = rule_for(rules, bench, fmts[0])
    ok = [r for r in ttt if r.success and r.ttt_s is not None]
    marks = []
    if len(fmts) > 1:
        marks.append(f"runs of several log formats ({', '.join(fmts)}) scored by the {rnd} rules")
    if not ttt:  # throughput runs only (`invoke sweep --mode throughput`): no score to mark
        scored, too_few, required, converged = [], False, None, None
        marks.append(f"throughput only: {len(group)} run(s), no time to train")
    elif converged:
        considered = ttt[:required]
        scored = [r for r in considered if r.success and r.ttt_s is not None][:converged]
        too_few = len(scored) < converged
        if too_few:
            marks.append(f"{len(scored)} converged of {converged} needed among the first {required} runs")
    elif required:
        scored = ok[:required]
        too_few = len(ok) < required
        if too_few:
            marks.append(f"{len(ok)} successful of {required} required")
    else:
        scored, too_few = ok, False
        if ok:
            marks.append("no MLPerf run rule for this benchmark")
    times = [r.ttt_s for r in scored]
    if not times:
        basis = "no successful run"
    elif len(times) >= 3:
        basis = f"{len(times)} runs, fastest and slowest dropped"
    else:
        basis = f"mean of {len(times)} (too few to drop any)"
    failed = [r for r in scored if r.compliance == "FAIL"]
    passed = [r for r in scored if r.compliance == "PASS"]
    if failed:
        verdict = f"FAIL ({len(failed)} of {len(scored)})"
        marks.append(f"{len(failed)} of the {len(scored)} scored runs fail the compliance checker")
    elif scored and len(passed) == len(scored):
        verdict = "PASS"
    else:
        verdict = "not checked"
    return Score(
        round=rnd,
        score_s=stats.mlperf_score(times),
        scored=scored,
        runs=len(ttt),
        successes=len(ok),
        runs_required=required,
        converged_required=converged,
        too_few=too_few,
        basis=basis,
        marks=marks,
        compliance=verdict,
        compliance_failed=len(failed),
        compliance_passed=len(passed),
    )


def score_round(group: list[Run], rules: Rules, rnd: str) -> Score:
    """A benchmark x system of a round scored as mlperf-logging's result_summarizer scores it."""
    table = rules.rounds[rnd]
    bench = group[0].benchmark
    ruleset = table["ruleset"]
    drop = table.get("drop", {}).get(bench, 1)
    required = table["runs_required"].get(bench)
    files: dict[str, list[Run]] = {}
    for r in sorted(group, key=order_key):
        files.setdefault(r.source.split("#run")[0], []).append(r)
    valid, failed = [], []
    for runs in files.values():
        r = runs[0]
        ok = len(runs) == 1 and r.compliance == "PASS" and r.elapsed_s is not None
        (valid if ok else failed).append(r)
    marks = [n for n in dict.fromkeys(n for r in group for n in r.system_notes)]
    if bench not in table["benchmarks"]:
        marks.append(f"{bench} is not a benchmark of {rnd}")
    if required and len(files) < required:
        marks.append(f"{len(files)} result files of the {required} the {rnd} rules require")
    ranked = sorted(valid, key=lambda r: r.elapsed_s)
    kept = ranked[drop : len(ranked) - (drop - len(failed))] if len(failed) <= drop else []
    if len(failed) > drop:
        marks.append(f"{len(failed)} runs fail the training {ruleset} ruleset: more than the {drop} a result may drop")
    elif failed:
        marks.append(f"{len(failed)} run(s) failing the training {ruleset} ruleset dropped as the slowest")
    if not kept and len(failed) <= drop:
        marks.append(f"too few valid runs ({len(valid)}) to drop {drop} at each end")
    factor = group[0].scaling_factor
    note = group[0].scaling_note
    if note:
        marks.append(note)
    mean = stats.mean([r.elapsed_s for r in kept])
    # the summarizer takes them from its RCP checker, which has no rounds before the RCPs (v1.0)
    gbs, samples = (None, None) if table["rcp"].startswith("none") else _rcp_columns(list(files.values()), bench, drop)
    energy = _energy(valid, failed, drop, factor, marks)
    basis = (
        f"{len(files)} runs, the {drop} fastest and {drop} slowest dropped (failing runs among the slowest)"
        if drop > 1
        else f"{len(files)} runs, fastest and slowest dropped (a failing run as the slowest)"
    )
    checked = [r for r in group if r.compliance in ("PASS", "FAIL")]
    n_failed = sum(1 for r in checked if r.compliance == "FAIL")
    verdict = (
        f"FAIL ({n_failed} of {len(checked)})"
        if n_failed
        else "PASS"
        if checked and len(checked) == len(group)
        else "not checked"
    )
    return Score(
        round=rnd,
        score_s=None if mean is None else mean * factor,
        scored=kept,
        runs=len(files),
        successes=sum(1 for r in group if r.success),
        runs_required=required,
        converged_required=None,
        too_few=mean is None or bool(required and len(files) < required),
        basis=basis,
        marks=marks,
        compliance=verdict,
        compliance_failed=n_failed,
        compliance_passed=len(checked) - n_failed,
        ruleset=f"training {ruleset}",
        scaling_factor=factor,
        batch_size=gbs,
        samples_to_converge=samples,
        energy_j=energy,
    )


def _rcp_columns(files: list[list[Run]], bench: str, drop: int) -> tuple[float | None, float | None]:
    """result_summarizer's GBS and samples_to_converge of a closed-division benchmark folder
    (lab.results.roundfacts): one batch size across its files (else -1), and the mean
    convergence point with one dropped at each end, none where more runs than ``drop`` did not
    converge or a file could not be read."""
    first = [runs[0] for runs in files]
    if not first or first[0].division != "closed" or any(r.rcp_error for r in first):
        return None, None
    sizes = {r.rcp_batch_size for r in first}
    if len(sizes) > 1 or None in sizes:
        return -1.0, None
    if sum(1 for r in first if not r.rcp_converged) > drop:
        return sizes.pop(), None
    points = sorted(r.rcp_point for r in first)
    return sizes.pop(), (stats.mean(points[1:-1]) if len(points) >= 3 else None)


def _energy(valid: list[Run], failed: list[Run], drop: int, factor: float, marks: list[str]) -> float | None:
    """Energy to train (joules) as result_summarizer scores it from the power logs: each valid
    run's energy, ordered by the runs' times, the same runs dropped as for the time, x factor."""
    with_power = [r for r in valid + failed if r.power_rate is not None or r.power_note]
    if not with_power:
        return None
    bad = next((r for r in valid if r.power_rate is None), None)
    if bad is not None:
        marks.append(f"no energy: {bad.power_note or 'no power logs for ' + bad.run_name}")
        return None
    if len(failed) > drop:
        return None
    ranked = sorted(valid, key=lambda r: r.elapsed_s)
    kept = ranked[drop : len(ranked) - (drop - len(failed))]
    if not kept:
        return None
    return stats.mean([r.power_rate * r.elapsed_s * 1000 for r in kept]) * factor
