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
    round: str                    # "v0.5", "v0.6" or "gpulab" (benchmarks.yml)
    score_s: float | None
    scored: list[Run]
    runs: int
    successes: int
    runs_required: int | None
    converged_required: int | None
    too_few: bool
    basis: str
    marks: list[str] = field(default_factory=list)
    compliance: str = "not checked"   # "PASS", "FAIL (n of m)", "not checked"
    compliance_failed: int = 0
    compliance_passed: int = 0

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
    ttt = sorted((r for r in group if r.mode == "ttt"), key=order_key)
    bench = group[0].benchmark
    fmts = sorted({r.fmt for r in ttt}) or [group[0].fmt]
    rnd, required, converged = rule_for(rules, bench, fmts[0])
    ok = [r for r in ttt if r.success and r.ttt_s is not None]
    marks = []
    if len(fmts) > 1:
        marks.append(f"runs of several log formats ({', '.join(fmts)}) scored by the {rnd} rules")
    if not ttt:   # throughput runs only (`invoke sweep --mode throughput`): no score to mark
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
    return Score(round=rnd, score_s=stats.mlperf_score(times), scored=scored, runs=len(ttt),
                 successes=len(ok), runs_required=required, converged_required=converged,
                 too_few=too_few, basis=basis, marks=marks, compliance=verdict,
                 compliance_failed=len(failed), compliance_passed=len(passed))
