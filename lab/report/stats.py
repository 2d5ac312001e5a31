"""Small statistics for the reports: MLPerf scores, spreads, Welch's t test.

Plain Python (math only), so that a report needs no scientific stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def mean(xs) -> float | None:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def square(x: float) -> float:
    """``x * x``: inf past the float range, where ``x ** 2`` raises OverflowError (a figure of 1e200 read
    from a run's files is a float all the same)."""
    return x * x


def stdev(xs) -> float | None:
    """Sample standard deviation (n - 1); None for fewer than two values."""
    xs = list(xs)
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum(square(x - m) for x in xs) / (len(xs) - 1))


def geomean(xs) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def mlperf_score(times) -> float | None:
    """MLPerf's score of a set of run times: drop the fastest and the slowest
    run and average the rest. With fewer than three runs nothing can be dropped:
    the plain mean is returned (the caller marks such a score as provisional)."""
    ts = sorted(times)
    if not ts:
        return None
    if len(ts) >= 3:
        ts = ts[1:-1]
    return sum(ts) / len(ts)


@dataclass
class Welch:
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    t: float
    df: float
    p: float


def welch(a, b) -> Welch | None:
    """Welch's unequal-variance t test of mean(b) - mean(a), two-sided.

    None when either side has fewer than two values, or its spread or mean is past the float range. Two
    samples without any spread give p = 1 when their means are equal and p = 0 otherwise.
    """
    a, b = list(a), list(b)
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va, vb = square(stdev(a)) / len(a), square(stdev(b)) / len(b)
    se2 = va + vb
    if not math.isfinite(se2 + ma + mb):  # figures past the float range: no test can be made of them
        return None
    if se2 == 0:
        same = math.isclose(ma, mb, rel_tol=1e-12, abs_tol=0.0)
        return Welch(
            len(a),
            len(b),
            ma,
            mb,
            0.0 if same else math.copysign(math.inf, mb - ma),
            float(len(a) + len(b) - 2),
            1.0 if same else 0.0,
        )
    t = (mb - ma) / math.sqrt(se2)
    df = square(se2) / (square(va) / (len(a) - 1) + square(vb) / (len(b) - 1))
    return Welch(len(a), len(b), ma, mb, t, df, t_two_sided_p(t, df))


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return min(1.0, max(0.0, betainc(df / 2.0, 0.5, df / (df + t * t))))


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b) (continued fraction)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300

    def guard(v):
        return tiny if abs(v) < tiny else v

    c = 1.0
    d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0))
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        num = m * (b - m) * x / ((a - 1.0 + m2) * (a + m2))
        d = 1.0 / guard(1.0 + num * d)
        c = guard(1.0 + num / c)
        h *= d * c
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2))
        d = 1.0 / guard(1.0 + num * d)
        c = guard(1.0 + num / c)
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h
