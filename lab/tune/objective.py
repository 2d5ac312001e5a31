"""The cost a tune trial is judged by, and when a trial is stopped early. Plain data, no I/O.

The study asks for recipes that converge in few epochs *on every seed*: the reference study found GNMT,
NCF and Transformer needing 4 to 16 epochs depending on the seed, so a recipe that is fast on one seed and
slow on another does not make time to train comparable. A trial runs one set of settings with seeds
1..K; per seed the cost is its epochs to the quality target, and a run that misses the target (it
stopped at its epoch limit, or diverged) is counted as failed: ``2 x the epoch limit``, worse than any
run that converged. The trial's cost is

    cost = median(epochs) + (max(epochs) - min(epochs))

the typical epochs plus their spread over seeds. Since the median is at least the minimum, the cost is
never below the slowest seed's epochs, which gives the early stop (``epoch_cap``): no run of a new trial
needs more epochs than the best trial's cost (rounded down) to show it can still win; a run stopped
there without its target proves the trial cannot beat the best, and the trial is pruned. Across waves of
seeds (more seeds than hosts), Optuna's WilcoxonPruner compares a trial's per-seed costs with the best
trial's on the same seeds (lab.tune.search).

A run that did not finish (host lost, crashed, timed out by the controller) says nothing of the recipe:
it is never a result; the trial is retried, then marked failed (``host_failures``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from lab.core.fields import RunState

MISS_FACTOR = 2  # a run that missed its target counts as this many times the epoch limit


@dataclass
class SeedResult:
    seed: int
    host: str
    state: str  # the sweep's run state: complete | failed | interrupted | planned | running
    reached: bool = False  # outcome success (the quality target met)
    epochs: float | None = None  # epochs to the target (or run) as the run directory says
    ttt_s: float | None = None  # time to train, seconds
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def seed_cost(r: SeedResult, limit: int) -> float:
    """Epochs to the target, or ``MISS_FACTOR x limit`` for a run that missed it."""
    if r.reached and r.epochs is not None:
        return float(r.epochs)
    return float(MISS_FACTOR * limit)


def cost(values: list[float]) -> float:
    """median + (max - min) of the per-seed costs."""
    if not values:
        raise ValueError("no seed results")
    return float(statistics.median(values) + (max(values) - min(values)))


def summary(results: list[SeedResult], limit: int) -> dict:
    """The figures a trial is recorded with: per-seed costs, median, spread, misses, the cost."""
    values = [seed_cost(r, limit) for r in sorted(results, key=lambda r: r.seed)]
    return {
        "epochs": {str(r.seed): r.epochs for r in results},
        "costs": {str(r.seed): seed_cost(r, limit) for r in results},
        "median": float(statistics.median(values)),
        "spread": float(max(values) - min(values)),
        "missed": sum(1 for r in results if not r.reached),
        "cost": cost(values),
        "limit": limit,
    }


def host_failures(results: list[SeedResult]) -> list[str]:
    """One line per seed whose run did not finish on its host (never a result of the recipe)."""
    return [
        f"seed {r.seed} on {r.host}: {r.state}: {r.reason}".rstrip(": ")
        for r in results
        if r.state != RunState.COMPLETE
    ]


def epoch_cap(best_cost: float | None, limit: int) -> int:
    """The epoch limit of a new trial's runs: the scale's ``limit``, or the best cost so far rounded down
    when lower (a run that needs more cannot belong to a trial that beats the best)."""
    if best_cost is None or not math.isfinite(best_cost):
        return limit
    return max(1, min(limit, int(math.floor(best_cost))))


def capped_out(results: list[SeedResult], cap: int, limit: int) -> list[int]:
    """Seeds that missed their target only because the cap stopped them (cap below the scale's limit)."""
    if cap >= limit:
        return []
    return [r.seed for r in results if r.state == RunState.COMPLETE and not r.reached]
