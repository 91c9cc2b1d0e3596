"""Exact binomial intervals without scipy: the Clopper-Pearson interval through the regularized incomplete
beta function (a continued fraction, Numerical Recipes' `betacf`), inverted by bisection. Counts may be
fractional (an effective sample size, store/audit_counts.py)."""

from __future__ import annotations

import math

ALPHA = 0.05  # two-sided: each end holds 2.5%
NORMAL_Z = 1.959964  # the normal quantile of 1 - ALPHA/2


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), a, b > 0."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """The q-quantile of Beta(a, b), by bisection."""
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(hits: float, total: float, alpha: float = ALPHA) -> tuple[float, float]:
    """The Clopper-Pearson interval of a proportion (hits of total, either may be fractional): 0..1 where
    nothing was counted. With no hit in n, the high end is 1 - (alpha/2)^(1/n)."""
    if total <= 0:
        return 0.0, 1.0
    hits = min(max(hits, 0.0), total)
    low = 0.0 if hits <= 0 else beta_quantile(alpha / 2, hits, total - hits + 1)
    high = 1.0 if hits >= total else beta_quantile(1 - alpha / 2, hits + 1, total - hits)
    return low, high


def certifiable(rows: float, alpha: float = ALPHA) -> float:
    """The most precision an audit of `rows` rows (the row the unit) can certify when every one agrees:
    the Clopper-Pearson low end of rows right in rows, (alpha/2)^(1/rows)."""
    return clopper_pearson(rows, rows, alpha)[0] if rows > 0 else 0.0
