"""The statistics of the straggler rule (docs/cli.md, "Stragglers";
dftracer/tools/ranks.py applies them): a typical lead (a trimmed mean), the
median absolute deviation, the median of the others for every rank from one
sort, a winsorized and autocorrelation-adjusted t of a mean lead, and the
tails of Student's t and of the binomial.  Pure functions, no numpy."""

from __future__ import annotations

import math
import statistics
from typing import List, Sequence, Tuple

TRIM = 0.1  # the typical lead: the mean without the top and bottom 10% of the steps


def typical_lead(values: Sequence[float]) -> float:
    """The mean without the TRIM highest and lowest values (a warm-up step, a
    hiccup), which still sees a lead that comes every other step."""
    v = sorted(values)
    k = int(len(v) * TRIM)
    return statistics.fmean(v[k:len(v) - k]) if v else 0.0


def mad(values: Sequence[float]) -> float:
    m = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - m) for v in values)


def medians_of_others(values: Sequence[float]) -> List[float]:
    """For each i, the median of values without values[i], from one sort
    (linear in the ranks after it, where recomputing each median is
    quadratic).  Needs at least 2 values."""
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)
    v = [values[i] for i in order]
    out = [0.0] * n
    m = n - 1  # values left when one is taken out
    for pos, i in enumerate(order):
        # the remaining sorted list is v without position pos
        def at(j: int) -> float:
            return v[j if j < pos else j + 1]
        out[i] = at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2
    return out


def _winsorized(values: Sequence[float]) -> List[float]:
    """values with the TRIM lowest and highest clipped to the nearest kept
    one: a hiccup counts as a large lead, not as an unbounded one."""
    v = sorted(values)
    k = int(len(v) * TRIM)
    lo, hi = v[k], v[len(v) - 1 - k]
    return [min(max(x, lo), hi) for x in values]


def lead_t(leads: Sequence[float]) -> Tuple[float, float, float]:
    """(mean, standard error, effective steps) of a rank's per-step leads,
    winsorized, the error widened for the correlation of consecutive steps
    (a machine's busy phase lasts several steps): n_eff = n (1 - r) / (1 + r),
    r the lag-1 autocorrelation when positive."""
    w = _winsorized(leads)
    n = len(w)
    mean = statistics.fmean(w)
    var = sum((x - mean) ** 2 for x in w) / (n - 1) if n > 1 else 0.0
    if var <= 0:
        return mean, 0.0, float(n)
    r = sum((w[i] - mean) * (w[i + 1] - mean) for i in range(n - 1)) / ((n - 1) * var)
    r = min(max(r, 0.0), 0.9)
    n_eff = max(2.0, n * (1 - r) / (1 + r))
    return mean, math.sqrt(var / n_eff), n_eff


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function
    (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def t_tail(t: float, dof: float) -> float:
    """P(T >= t) for Student's t with dof degrees of freedom (t >= 0)."""
    if t == math.inf:
        return 0.0
    if t <= 0:
        return 0.5
    x = dof / (dof + t * t)
    a, b = dof / 2, 0.5
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    ib = front * _betacf(a, b, x) / a if x < (a + 1) / (a + b + 2) \
        else 1.0 - front * _betacf(b, a, 1 - x) / b
    return min(0.5, max(0.0, ib / 2))


def binom_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): the chance of being the slowest in
    k of n steps or more when every rank is as likely to be."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp
             + (n - j) * lq for j in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
