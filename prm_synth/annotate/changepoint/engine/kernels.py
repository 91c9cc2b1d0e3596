"""Compiled loops of the change-point posterior's passes and candidate sweep (posterior.py, gains.py's
`_row_log_masses`). There, numpy spent most of a probe decision on many small array operations
per probed prefix (a likelihood multiplied in, a switch to the bad stretch, a log-sum-exp, a
renormalisation, the luck summed out before a run), each a few microseconds of call overhead on arrays
of a few thousand numbers; `absorb` does all of them for a prefix in one pass over the states. The
level products themselves stay numpy matrix products: on these shapes BLAS is several times faster
than a compiled loop, and numba calls BLAS only through scipy, which the project does not need.

States are class-major, as in the posterior module: msg [class, row, luck, level] and its log scale
acc [class, row, luck]; a state stands for exp(acc) * msg and is renormalised only when a vector's sum
falls below RENORMALISE (far above the smallest normal double), so nothing underflows and no division
is spent where none is needed. Every loop takes the whole C-ordered arrays and a range of rows (a view
of some rows would be strided, and strided loops do not vectorise). The sums over level may be
reassociated (`_FAST`: vectorised, the same sums to rounding); no flag that assumes finite numbers is
set, as log weights of -inf are meaningful here. Compiled on first use and cached on disk (`cache=True`).
"""

from __future__ import annotations

import numba
import numpy as np

RENORMALISE = 1e-30
_FAST = {"reassoc", "contract"}
_TINY = 1e-250  # below this a sum of scaled weights is redone in logs (`_log_total`)


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def _log_total(y: np.ndarray, s: np.ndarray, best: float, total: float) -> float:
    """log of sum exp(y) * s over (class, luck), given total = sum exp(y - best) * s. When that sum is
    tiny (the largest y has a zero or tiny s), it is redone with log s inside the maximum, exactly."""
    if total > _TINY:
        return np.log(total) + best
    top = -np.inf
    d_, q_ = y.shape
    for d in range(d_):
        for q in range(q_):
            if s[d, q] > 0.0:
                top = max(top, y[d, q] + np.log(s[d, q]))
    if top == -np.inf:
        return top
    total = 0.0
    for d in range(d_):
        for q in range(q_):
            if s[d, q] > 0.0:
                total += np.exp(y[d, q] + np.log(s[d, q]) - top)
    return np.log(total) + top


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def _log_weighted_sum(y: np.ndarray, s: np.ndarray, best: float) -> float:
    """log of sum exp(y) * s over (class, luck), best the largest y (-inf: every y is, the sum is 0)."""
    if not np.isfinite(best):
        best = 0.0
    total = 0.0
    for d in range(y.shape[0]):
        for q in range(y.shape[1]):
            total += np.exp(y[d, q] - best) * s[d, q]
    return _log_total(y, s, best, total)


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def absorb(
    msg: np.ndarray,
    acc: np.ndarray,
    r0: int,
    r1: int,
    entry: int,
    weight_entry: int,
    weight: np.ndarray,
    top: np.ndarray,
    sig: np.ndarray,
    base: np.ndarray,
    col: np.ndarray,
    has_run: np.ndarray,
    end_col: np.ndarray,
    end_base: np.ndarray,
    ends: np.ndarray,
    out: np.ndarray,
    summed: np.ndarray,
    shift: np.ndarray,
) -> None:
    """Rows r0..r1-1 of the states at a prefix: the prefix's clean likelihood multiplied in (weight =
    exp(loglik - top) [luck, level], top [luck]), in place (a factor of at most 1; the level product
    after it renormalises, `settle`), and from the same pass:
    - out[r, col] = log sum over (class, luck) of exp(acc + base) * (msg . sig) over level: the weight
      of 'this prefix is the last clean one' (sig [class, level]: the switch to the bad stretch; base
      [class, luck]: prior and the bad stretch's likelihood);
    - where has_run: summed[r, class, level] = sum over luck of exp(acc + base - shift[r]) * msg,
      shift[r] the row's largest exponent (0 when none is finite): the luck summed out for the run of
      unprobed prefixes after this one (its bad stretch starts where this one's does);
    - where ends: out[r, n] = log sum of exp(acc + end_base) * (msg . end_col): the solution clean to
      its end (end_col: level 0 of the steps to the end, end_base: prior, verdict, the steps' scale).
    entry: which entry of the data arrays (sig .. ends) every row reads; -1: each row its own (entry r).
    weight_entry: the same for weight and top."""
    d_, rows, q_, l_ = msg.shape
    n = out.shape[1] - 1
    y = np.empty((d_, q_))
    s = np.empty((d_, q_))
    ye = np.empty((d_, q_))
    se = np.empty((d_, q_))
    for r in range(r0, r1):
        i = r if entry < 0 else entry
        wi = r if weight_entry < 0 else weight_entry
        run = has_run[i]
        end = ends[i]
        best = -np.inf
        best_end = -np.inf
        for d in range(d_):
            sg = sig[i, d]
            for q in range(q_):
                vec = msg[d, r, q]
                w = weight[wi, q]
                sw = 0.0
                for level in range(l_):
                    v = vec[level] * w[level]
                    vec[level] = v
                    sw += v * sg[level]
                a = acc[d, r, q] + top[wi, q]
                acc[d, r, q] = a
                s[d, q] = sw
                y[d, q] = a + base[i, d, q]
                best = max(best, y[d, q])
                if end:
                    sl = 0.0
                    for level in range(l_):
                        sl += msg[d, r, q, level] * end_col[i, d, level]
                    se[d, q] = sl
                    ye[d, q] = a + end_base[i, d, q]
                    best_end = max(best_end, ye[d, q])
        if not np.isfinite(best):
            best = 0.0
        total = 0.0
        if run:
            shift[r] = best
            for d in range(d_):
                for level in range(l_):
                    summed[r, d, level] = 0.0
        for d in range(d_):
            for q in range(q_):
                e = np.exp(y[d, q] - best)
                total += e * s[d, q]
                if run and e != 0.0:
                    for level in range(l_):
                        summed[r, d, level] += e * msg[d, r, q, level]
        out[r, col[i]] = _log_total(y, s, best, total)
        if end:
            out[r, n] = _log_weighted_sum(ye, se, best_end)


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def settle(msg: np.ndarray, acc: np.ndarray, r0: int, r1: int, log_scale: np.ndarray, per_row: bool) -> None:
    """After a level product, rows r0..r1-1 in place: vectors whose sum fell below RENORMALISE
    renormalised (their log scale into acc), and the kernel's own log scale [class] added
    (log_scale [entry, class]: entry 0 for every row, or entry r for row r where per_row)."""
    d_, rows, q_, l_ = msg.shape
    for d in range(d_):
        for r in range(r0, r1):
            own = log_scale[r if per_row else 0, d]
            for q in range(q_):
                total = 0.0
                for level in range(l_):
                    total += msg[d, r, q, level]
                a = acc[d, r, q] + own
                if total < RENORMALISE:
                    scale = max(total, 1e-300)
                    for level in range(l_):
                        msg[d, r, q, level] /= scale
                    a += np.log(scale)
                acc[d, r, q] = a


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def luck_summed(
    msg: np.ndarray, acc: np.ndarray, r0: int, r1: int, base: np.ndarray, summed: np.ndarray, shift: np.ndarray
) -> None:
    """Rows r0..r1-1 before a run of unprobed prefixes that no probed prefix starts (a run longer than
    the kernel tables, crossed in parts): summed and shift as `absorb` gives them, base [class, luck]."""
    d_, rows, q_, l_ = msg.shape
    for r in range(r0, r1):
        best = -np.inf
        for d in range(d_):
            for q in range(q_):
                best = max(best, acc[d, r, q] + base[d, q])
        if not np.isfinite(best):
            best = 0.0
        shift[r] = best
        for d in range(d_):
            for level in range(l_):
                summed[r, d, level] = 0.0
            for q in range(q_):
                e = np.exp(acc[d, r, q] + base[d, q] - best)
                if e != 0.0:
                    for level in range(l_):
                        summed[r, d, level] += e * msg[d, r, q, level]


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def clean_end(
    msg: np.ndarray, acc: np.ndarray, r0: int, r1: int, end_col: np.ndarray, end_base: np.ndarray, out: np.ndarray
) -> None:
    """out[r, n] for rows r0..r1-1 as `absorb` gives it where it ends, from states with no prefix of
    their own to absorb (after a run longer than the kernel tables)."""
    d_, rows, q_, l_ = msg.shape
    n = out.shape[1] - 1
    y = np.empty((d_, q_))
    s = np.empty((d_, q_))
    for r in range(r0, r1):
        best = -np.inf
        for d in range(d_):
            for q in range(q_):
                sl = 0.0
                for level in range(l_):
                    sl += msg[d, r, q, level] * end_col[d, level]
                s[d, q] = sl
                y[d, q] = acc[d, r, q] + end_base[d, q]
                best = max(best, y[d, q])
        out[r, n] = _log_weighted_sum(y, s, best)


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def clean_prefix(
    msg: np.ndarray,
    acc: np.ndarray,
    lik: np.ndarray,
    sig: np.ndarray,
    bad_after: np.ndarray,
    p: int,
    log_e: np.ndarray,
    out_msg: np.ndarray,
    out_acc: np.ndarray,
) -> None:
    """The forward pass (`_log_joint`, batch-major states msg [b, class, luck, level], acc [b, class,
    luck]) at a probed prefix p: its clean likelihood lik [b, luck, level] multiplied in (scaled by
    its maximum over level), into out_msg / out_acc (the states before it are kept: the forward
    cache holds them), and log_e[b, p, class, luck] = acc + log(msg . sig) + bad_after[b, p + 1]: the
    weight of 'prefix p is the last clean one' (sig [class, level]: the switch to the bad stretch)."""
    b_, d_, q_, l_ = msg.shape
    w = np.empty((q_, l_))
    top = np.empty(q_)
    for b in range(b_):
        for q in range(q_):
            t = -np.inf
            for level in range(l_):
                t = max(t, lik[b, q, level])
            top[q] = t
            for level in range(l_):
                w[q, level] = np.exp(lik[b, q, level] - t)
        for d in range(d_):
            for q in range(q_):
                s = 0.0
                for level in range(l_):
                    v = msg[b, d, q, level] * w[q, level]
                    out_msg[b, d, q, level] = v
                    s += v * sig[d, level]
                a = acc[b, d, q] + top[q]
                out_acc[b, d, q] = a
                log_e[b, p, d, q] = a + np.log(s) + bad_after[b, p + 1, q]


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def normalise(msg: np.ndarray, acc: np.ndarray, log_scale: np.ndarray) -> None:
    """In place, batch-major states (msg [b, class, luck, level], acc [b, class, luck]) after a level
    product: every vector scaled to sum 1 (at least 1e-300 is divided), the scale and the kernel's
    own log scale [class] into acc (the forward pass keeps its states normalised)."""
    b_, d_, q_, l_ = msg.shape
    for b in range(b_):
        for d in range(d_):
            own = log_scale[d]
            for q in range(q_):
                total = 0.0
                for level in range(l_):
                    total += msg[b, d, q, level]
                scale = max(total, 1e-300)
                inv = 1.0 / scale
                for level in range(l_):
                    msg[b, d, q, level] *= inv
                acc[b, d, q] += own + np.log(scale)


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def run_errors(
    switch: np.ndarray, acc: np.ndarray, log_scale: np.ndarray, bad_after: np.ndarray, j: int, log_e: np.ndarray
) -> None:
    """The forward pass across a run of unprobed prefixes j..j+m-1 (switch [class, b, luck, i]: the
    weight of 'prefix j + i is the last clean one' from the states before j, acc [b, class, luck]
    their log scale, log_scale [i, class] the run's kernel scales): log_e[b, j + i, class, luck]."""
    d_, b_, q_, m = switch.shape
    for b in range(b_):
        for i in range(m):
            for d in range(d_):
                own = log_scale[i, d]
                for q in range(q_):
                    log_e[b, j + i, d, q] = acc[b, d, q] + own + np.log(switch[d, b, q, i]) + bad_after[b, j + i + 1, q]


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def short_run_errors(
    summed: np.ndarray,
    shift: np.ndarray,
    table: np.ndarray,
    table_scale: np.ndarray,
    out: np.ndarray,
    a: int,
    b: int,
    s: int,
    m: int,
) -> None:
    """out[r, s + i] = log(summed[r] . table[i]) + shift[r] + table_scale[i] for rows a..b-1 and the
    first m places of a run (summed [row, class * level], table [i, class * level]): a short run's
    errors in one call (a long run's go through a BLAS product instead)."""
    width = summed.shape[1]
    for r in range(a, b):
        for i in range(m):
            t = 0.0
            for k in range(width):
                t += summed[r, k] * table[i, k]
            out[r, s + i] = np.log(t) + shift[r] + table_scale[i]
