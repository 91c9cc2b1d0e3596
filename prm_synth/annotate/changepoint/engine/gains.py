"""What a probe is worth: the expected bits of first-error uncertainty `b` more rollouts at a prefix
remove, per rollout (`probe_gains`), for every candidate of a decision in one sweep.

Every outcome of every candidate is the posterior after it, computed without a pass per outcome: an
outcome changes one prefix, so the rows of errors before it are the base posterior's reweighted and the
rest is carried forward from the base pass's state there, every outcome of every candidate in one sweep
whose rows meet only at probed prefixes (`_row_log_masses`). These are the same sums as building each
outcome's posterior from scratch (tests/annotate/test_changepoint_posterior.py), at a cost that grows less than
linearly with the length (benchmarks/labeler_cost.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prm_synth.annotate.changepoint.engine import kernels
from prm_synth.annotate.changepoint.engine.model import (
    C_GRID,
    CLEAN_T,
    END_AFTER_RUN,
    END_AFTER_STEP,
    LOG_SCALE,
    MAX_STEPS,
    P_GRID,
    POWERS,
    Q_GRID,
    SIGMA,
    CountTables,
    Priors,
    block_starts,
    clean_weights,
    log_combs,
    run_reach_flat,
    run_reach_flat_stepped,
    step_then_run,
)
from prm_synth.annotate.changepoint.engine.posterior import Posterior, first_error_entropy, masses_to_p_good


def _row_log_masses(post: Posterior, js: np.ndarray, correct: np.ndarray, graded: np.ndarray) -> np.ndarray:
    """[row, e]: log P(first error e, data) (class and luck summed out) under the posterior's priors,
    for the posterior's evidence with prefix js[r]'s counts replaced by (correct[r], graded[r]).

    Exact, without a pass per row: rows e < j differ from the posterior's joint only by prefix j's
    bad-stretch likelihood; rows e >= j are carried forward from the posterior's state before j
    (which prefix j does not touch), all rows in one sweep that each joins at its own j. Only the
    error's place is kept, so inside a run of unprobed prefixes the luck is summed out before the
    product with the `run_reach` table (18 times less work than the full joint)."""
    ev, priors, terms = post.evidence, post.priors, post.terms
    n, rows = ev.n, len(js)
    tables = CountTables.of(priors.k)
    # rows in the order of their prefixes (probe_gains asks in that order already)
    order = None if (js[1:] >= js[:-1]).all() else np.argsort(js, kind="stable")
    if order is not None:
        js, correct, graded = js[order], correct[order], graded[order]
    out = np.full((rows, n + 1), -np.inf)
    d_, q_, l_ = len(P_GRID), len(Q_GRID), len(C_GRID)
    with np.errstate(divide="ignore", under="ignore"):
        # e < j: the posterior's own rows, prefix j's bad-stretch likelihood swapped
        delta = tables.loglik(False, correct, graded - correct) - terms.bad[0, js]  # [row, q]
        top = delta.max(axis=1)
        before = np.log(np.exp(delta - top[:, None]) @ post.joint.T) + (top + post.log_evidence)[:, None]
        np.copyto(out, before, where=np.arange(n + 1)[None, :] < js[:, None])
        # e >= j, in three stages: (A) every row at its own j together: the state before j, the row's
        # own counts there, the error at j; (B) each candidate's rows across the unprobed prefixes
        # after j to the next probed one (or the end); (C) one sweep over the probed prefixes, rows
        # joining at the first one after their j. The whole batch meets only at the probed prefixes.
        new_weight, new_top = clean_weights(priors.k, correct, graded, js)
        col_top = terms.clean[0].max(axis=2)  # [col, q]
        col_weight = np.exp(terms.clean[0] - col_top[:, :, None])
    prior = priors.log_prior()  # [d, q]
    bad_after = terms.bad_after[0]
    cols = terms.cols
    arrive = np.append(cols, n)[np.searchsorted(cols, js, side="right")]  # the first probed prefix after j
    msg = np.empty((d_, rows, q_, l_))
    acc = np.empty((d_, rows, q_))
    firsts = block_starts(js)
    groups = [(int(js[a]), a, b) for a, b in zip(firsts, [*firsts[1:], rows], strict=True)]
    for j, a, b in groups:
        state, state_acc = post.cache.at(j)
        msg[:, a:b] = state[:, None]
        acc[:, a:b] = state_acc[:, None]
    sweep = _Sweep(n, prior, bad_after, terms.v_clean, np.empty((rows, d_, l_)), np.empty(rows))
    run = arrive - js - 1  # the unprobed prefixes after j, up to the next probed one or the end
    first = np.minimum(run, MAX_STEPS)
    kernels.absorb(
        msg,
        acc,
        0,
        rows,
        -1,
        -1,
        new_weight,
        new_top,
        SIGMA[np.minimum(n - js - 1, MAX_STEPS - 1)],
        prior[None] + bad_after[js + 1][:, None, :],
        js,
        run > 0,
        END_AFTER_STEP[first],
        prior[None] + terms.v_clean + LOG_SCALE[first][:, :, None],
        (arrive == n) & (run <= MAX_STEPS),
        out,
        sweep.summed,
        sweep.shift,
    )
    waiting = _cross_runs(msg, acc, out, sweep, groups, run, first, arrive, n)
    _sweep_probed(waiting, msg, acc, out, sweep, cols, arrive, n, prior, terms.v_clean, bad_after, col_weight, col_top)
    if order is None:
        return out
    result = np.empty_like(out)
    result[order] = out
    return result


def _cross_runs(
    msg: np.ndarray,
    acc: np.ndarray,
    out: np.ndarray,
    sweep: _Sweep,
    groups: list[tuple[int, int, int]],
    run: np.ndarray,
    first: np.ndarray,
    arrive: np.ndarray,
    n: int,
) -> np.ndarray:
    """(B) of `_row_log_masses`: each candidate's rows across the unprobed prefixes after its j to the
    next probed one (or the end); returns the states where the rows join the sweep over probed prefixes."""
    waiting = np.empty_like(msg)  # the states where each candidate's rows join the sweep
    d_, rows, q_, l_ = msg.shape
    if (run <= MAX_STEPS).all() and rows == len(groups) * (groups[0][2] - groups[0][1]):
        # candidates of as many rows each (probe_gains): their runs' errors each from its own table,
        # then each candidate's level product with its own kernel straight into its rows of `waiting`,
        # and one renormalisation of them all. (Stacking the kernels for one batched product cost more
        # than it saved: the set of run lengths differs nearly every decision at 40 steps; the products
        # per class are the same, so are the results.)
        for j, a, b in groups:
            if first[a]:
                sweep.errors(out, a, b, j + 1, int(first[a]), run_reach_flat_stepped(n - j - 2))
        flat_msg, flat_waiting = msg.reshape(d_, rows * q_, l_), waiting.reshape(d_, rows * q_, l_)
        for _, a, b in groups:
            m = int(first[a])
            kernel = step_then_run(m) if m else CLEAN_T
            np.matmul(flat_msg[:, a * q_ : b * q_], kernel, out=flat_waiting[:, a * q_ : b * q_])
        kernels.settle(waiting, acc, 0, rows, LOG_SCALE[first], True)
    else:
        for j, a, b in groups:
            sweep.cross(msg, waiting, acc, out, a, b, j + 1, int(arrive[a]))
    return waiting


def _sweep_probed(
    waiting: np.ndarray,
    msg: np.ndarray,
    acc: np.ndarray,
    out: np.ndarray,
    sweep: _Sweep,
    cols: np.ndarray,
    arrive: np.ndarray,
    n: int,
    prior: np.ndarray,
    v_clean: np.ndarray,
    bad_after: np.ndarray,
    col_weight: np.ndarray,
    col_top: np.ndarray,
) -> None:
    """(C) of `_row_log_masses`: one sweep over the probed prefixes, each candidate's rows joining at the
    first one after their j (`arrive`); `msg` is the spare buffer."""
    # (C): what each probed prefix from the first arrival on reads, for all of them at once
    first_col = int(np.searchsorted(cols, arrive[0]))
    positions = cols[first_col:]
    ends = np.append(positions[1:], n)
    runs = ends - positions - 1
    steps = np.minimum(runs, MAX_STEPS)
    p_sig = SIGMA[np.minimum(n - positions - 1, MAX_STEPS - 1)]
    p_base = prior[None] + bad_after[positions + 1][:, None, :]
    p_end_base = prior[None] + v_clean + LOG_SCALE[steps][:, :, None]
    p_ends = (ends == n) & (runs <= MAX_STEPS)
    p_has_run = runs > 0
    p_end_col = END_AFTER_STEP[steps]
    joined = np.searchsorted(arrive, positions, side="right").tolist()  # rows that arrived by each
    cur, spare = waiting, msg
    hi = 0
    at, upto = positions.tolist(), ends.tolist()
    for idx in range(len(at)):
        lo, hi = hi, joined[idx]
        if cur is not waiting:
            cur[:, lo:hi] = waiting[:, lo:hi]
        kernels.absorb(
            cur,
            acc,
            0,
            hi,
            idx,
            first_col + idx,
            col_weight,
            col_top,
            p_sig,
            p_base,
            positions,
            p_has_run,
            p_end_col,
            p_end_base,
            p_ends,
            out,
            sweep.summed,
            sweep.shift,
        )
        if sweep.cross(cur, spare, acc, out, 0, hi, at[idx] + 1, upto[idx]):
            cur, spare = spare, cur


_SHORT_RUN = 16  # a run this short has its errors read in a compiled loop, a longer one in a BLAS product


@dataclass(frozen=True)
class _Sweep:
    """One solution's candidate sweep (`_row_log_masses`): what every row's run crossing reads."""

    n: int
    prior: np.ndarray  # [d, q]
    bad_after: np.ndarray  # [j, q]
    v_clean: float
    summed: np.ndarray  # [row, d, level]: each row's luck summed out before its run (`kernels.absorb`)
    shift: np.ndarray  # [row]: its scale

    def cross(
        self, src: np.ndarray, dst: np.ndarray, acc: np.ndarray, out: np.ndarray, a: int, b: int, start: int, end: int
    ) -> bool:
        """Rows a..b-1 of states src [d, row, q, level], absorbed at prefix start - 1 (its level step not
        taken), across the unprobed prefixes start..end-1 (their errors into out) to the states before
        prefix `end`, written into dst: True. At the solution's end `absorb` wrote the clean weight
        already and nothing is written: False. The step out of prefix start - 1 goes with the run's
        first product: one level product a probed prefix where there were two."""
        n = self.n
        m = min(end - start, MAX_STEPS)
        if m:
            self.errors(out, a, b, start, m, run_reach_flat_stepped(n - start - 1))
        if end == n and end - start <= MAX_STEPS:
            return False
        _product(src, dst, acc, a, b, step_then_run(m) if m else CLEAN_T, LOG_SCALE[m])
        s = start + m
        while s < end:  # a run longer than the tables: the rest in parts
            m = min(end - s, MAX_STEPS)
            kernels.luck_summed(dst, acc, a, b, self.prior + self.bad_after[end], self.summed, self.shift)
            self.errors(out, a, b, s, m, run_reach_flat(n - s - 1))
            if s + m == n:
                base = self.prior + self.v_clean + LOG_SCALE[m][:, None]
                kernels.clean_end(dst, acc, a, b, END_AFTER_RUN[m], base, out)
                return False
            _product(dst, dst, acc, a, b, POWERS[m], LOG_SCALE[m])
            s += m
        return True

    def errors(self, out: np.ndarray, a: int, b: int, s: int, m: int, tables: tuple[np.ndarray, np.ndarray]) -> None:
        """out[a:b, s:s+m]: errors at the run's prefixes s..s+m-1, from each row's luck-summed state."""
        table, table_scale = tables
        d_, l_ = len(P_GRID), len(C_GRID)
        summed = self.summed.reshape(len(self.summed), d_ * l_)
        if m <= _SHORT_RUN:
            kernels.short_run_errors(summed, self.shift, table, table_scale, out, a, b, s, m)
            return
        switch = summed[a:b] @ table[:m].T  # [row, i]
        with np.errstate(divide="ignore"):
            out[a:b, s : s + m] = np.log(switch) + (self.shift[a:b, None] + table_scale[:m])


def _product(
    src: np.ndarray, dst: np.ndarray, acc: np.ndarray, a: int, b: int, kernel: np.ndarray, log_scale: np.ndarray
) -> None:
    """Rows a..b-1 of the states src [d, row, q, level] through a per-class level kernel [d, level,
    level] (one BLAS product per class) into dst (dst may be src), renormalised where needed, the
    kernel's log scale [d] added to acc."""
    d_, rows, q_, l_ = src.shape
    x = src.reshape(d_, rows * q_, l_)[:, a * q_ : b * q_]
    y = dst.reshape(d_, rows * q_, l_)[:, a * q_ : b * q_]
    if src is dst:
        y[...] = np.matmul(x, kernel)
    else:
        np.matmul(x, kernel, out=y)
    kernels.settle(dst, acc, a, b, log_scale[None], False)


def probe_gains(post: Posterior, priors: Priors, chosen: Sequence[int], b: int) -> np.ndarray:
    """[candidate]: expected bits of first-error uncertainty removed per rollout by `b` more rollouts at each
    prefix in `chosen`; every outcome of every candidate is scored in one sweep (`_row_log_masses`).
    A candidate's gain depends on the posterior and b alone: the posterior keeps it, so a second look
    at the same candidates (the search's localizing pass) costs nothing."""
    if priors.mixed:
        raise ValueError("probe_gains scores probes under priors without a fresh error's extra luck")
    post = post.under(priors)
    known = post.gains.setdefault(b, {})
    new = [j for j in dict.fromkeys(int(j) for j in chosen) if j not in known]
    if new:
        ev = post.evidence
        # rows [candidate, outcome] flattened (np.tile, a Python-level function, cost more than the sums)
        js = np.repeat(np.asarray(new, dtype=np.int64), b + 1)
        outcome = np.arange(len(js)) % (b + 1)
        log_ev, p_good = masses_to_p_good(_row_log_masses(post, js, ev.correct[js] + outcome, ev.graded[js] + b))
        shape = (len(new), b + 1)
        pred = np.exp(log_combs(b) + log_ev.reshape(shape) - post.log_evidence)
        after = (pred * first_error_entropy(p_good).reshape(shape)).sum(axis=1)
        known.update(zip(new, ((post.uncertainty() - after) / b).tolist(), strict=True))
    return np.array([known[int(j)] for j in chosen])
