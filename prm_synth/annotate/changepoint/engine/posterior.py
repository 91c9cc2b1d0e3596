"""The change-point posterior of one solution: where its first error is, from its rollouts (model.py).

Everything is summed exactly: one forward pass over the prefixes with the clean-finish level on a grid
as the state; the levels after the error do not touch the evidence, so their part is a table; a run of
unprobed prefixes is crossed in one product of precomputed kernel powers. `p_good[i]` is the posterior
probability that the prefix ending on step i is still correct. The passes over the states at each probed prefix are compiled (kernels.py); the
level products between them are numpy's BLAS. Scoring probes is gains.py's.
"""

from __future__ import annotations

import bisect
import math
import weakref
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from prm_synth.annotate.changepoint.engine import kernels
from prm_synth.annotate.changepoint.engine.model import (
    C_GRID,
    CLEAN_T,
    LOG_1Q,
    LOG_Q,
    LOG_SCALE,
    MAX_STEPS,
    NO_SCALE,
    P_GRID,
    POWERS,
    Q_GRID,
    RECENT_STEPS,
    CountTables,
    Evidence,
    Priors,
    recent_tables,
    run_reach,
    sigma_at,
)

ForwardState = tuple[np.ndarray, np.ndarray]  # (msg [d, q, level], log scale [d, q]) before prefix j


def _advance(msg: np.ndarray, log_acc: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The forward state m unprobed steps on (msg [b, d, q, level]), renormalised."""
    while m > 0:
        k = min(m, MAX_STEPS)
        msg = np.matmul(msg, POWERS[k])
        log_acc = log_acc.copy()
        kernels.normalise(msg, log_acc, LOG_SCALE[k])
        m -= k
    return msg, log_acc


@dataclass
class ForwardCache:
    """The base evidence's forward pass, kept where it was materialised (each probed prefix and each
    run of unprobed ones): the state before any prefix is one product away (`at`)."""

    marks: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)

    def at(self, j: int) -> ForwardState:
        # the latest mark at or before j (marks come in the order of their prefixes; of two at one
        # prefix, the first)
        positions = [m[0] for m in self.marks]
        i = bisect.bisect_right(positions, j) - 1
        i = bisect.bisect_left(positions, positions[i], 0, i)
        pos, msg, log_acc = self.marks[i]
        if pos == j:
            return msg, log_acc
        msg, log_acc = _advance(msg[None], log_acc[None], j - pos)
        return msg[0], log_acc[0]


@dataclass(frozen=True)
class _Terms:
    """A batch of evidence's likelihood terms: what the forward pass multiplies in."""

    cols: np.ndarray  # the prefixes probed in any row (an unprobed prefix scores 0)
    clean: np.ndarray  # [b, col, q, level]: log-likelihood of the column's counts, prefix clean
    bad: np.ndarray  # [b, j, q]: log-likelihood of prefix j's counts, prefix holding the error
    # [b, j, q]: log P(rollouts of prefixes j..n-1, verdict | prefix j is the first holding the error)
    bad_after: np.ndarray
    v_clean: float  # log P(verdict | the solution is clean)

    @classmethod
    def of(cls, correct: np.ndarray, graded: np.ndarray, verdict: str, k: float, recent: float = 0.0) -> _Terms:
        batch, n = correct.shape
        tables = CountTables.of(k)
        cols = np.flatnonzero(graded.any(axis=0))
        c, f = correct[:, cols], graded[:, cols] - correct[:, cols]
        clean = tables.loglik(True, c, f).reshape(batch, len(cols), len(Q_GRID), len(C_GRID))
        bad = np.zeros((batch, n, len(Q_GRID)))
        bad[:, cols] = tables.loglik(False, c, f)
        if verdict == "correct":
            v_clean, v_bad = 0.0, LOG_Q
        elif verdict == "incorrect":
            v_clean, v_bad = -np.inf, LOG_1Q
        else:
            v_clean, v_bad = 0.0, np.zeros(len(Q_GRID))
        after = np.concatenate([bad[:, ::-1].cumsum(axis=1)[:, ::-1], np.zeros((batch, 1, len(Q_GRID)))], axis=1)
        if recent > 0:  # the first RECENT_STEPS prefixes of the bad stretch at their raised rates
            for m in range(RECENT_STEPS):
                at = cols[cols >= m]
                raised = recent_tables(k, recent)[m].loglik(correct[:, at], graded[:, at] - correct[:, at])
                after[:, at - m] += raised - bad[:, at]
        return cls(cols, clean, bad, after + v_bad, v_clean)


def _log_joint(
    correct: np.ndarray,
    graded: np.ndarray,
    verdict: str,
    priors: Priors,
    cache: ForwardCache | None = None,
    terms: _Terms | None = None,
) -> np.ndarray:
    """[b, e, d, q]: log P(first error e, class d, luck q, data) for a batch of evidence of one
    solution (rows of `correct` and `graded` are alternative measurements of the same n prefixes).

    The forward pass goes from probed prefix to probed prefix: a run of unprobed ones between is
    crossed in one product (`POWERS`), its rows of e scored together (`run_reach`), so the work is a
    few array operations per probed prefix plus O(n) in one vectorised pass. `cache`: keeps this
    pass's states (batch of one) for passes that start from them (`_row_log_masses`)."""
    batch, n = correct.shape
    terms = terms or _Terms.of(correct, graded, verdict, priors.k)
    column = {int(k): i for i, k in enumerate(terms.cols)}
    bad_after = terms.bad_after
    # forward over the clean stretch: msg[b, d, q, level] = P(data of prefixes < j, prefix j clean at level)
    msg = np.ones((batch, len(P_GRID), len(Q_GRID), len(C_GRID)))
    log_acc = np.zeros((batch, len(P_GRID), len(Q_GRID)))
    log_e = np.empty((batch, n + 1, len(P_GRID), len(Q_GRID)))
    j = 0
    with np.errstate(divide="ignore"):
        for p in [*column, n]:
            if cache is not None:
                cache.marks.append((j, msg[0], log_acc[0]))
            while j < p:  # unprobed prefixes j..p-1, at most MAX_STEPS at a time
                m = min(p - j, MAX_STEPS)
                reach = run_reach(n - j - 1)[:m]  # [i, d, level at j]: prefix j + i is the last clean one
                # switch[b, i, d, q] = sum over level of msg[b, d, q, level] reach[i, d, level] (BLAS)
                switch = np.matmul(msg.transpose(1, 0, 2, 3), reach.transpose(1, 2, 0)[:, None])  # [d, b, q, i]
                kernels.run_errors(switch, log_acc, LOG_SCALE[:m], bad_after, j, log_e)
                msg, log_acc = _advance(msg, log_acc, m)
                j += m
            if p == n:
                break
            if cache is not None:
                cache.marks.append((p, msg[0], log_acc[0]))
            # the prefix's likelihood and its switch to the bad stretch (one compiled pass), one step on
            lik = terms.clean[:, column[p]]  # [b, q, level]
            absorbed, absorbed_acc = np.empty_like(msg), np.empty_like(log_acc)
            kernels.clean_prefix(msg, log_acc, lik, sigma_at(n - p - 1), bad_after, p, log_e, absorbed, absorbed_acc)
            msg, log_acc = np.matmul(absorbed, CLEAN_T), absorbed_acc
            kernels.normalise(msg, log_acc, NO_SCALE)
            j = p + 1
        log_e[:, n] = log_acc + np.log(msg[..., 0]) + terms.v_clean
    return log_e + priors.log_prior()[None, None]


def mixed_log_joint(
    correct: np.ndarray, graded: np.ndarray, verdict: str, priors: Priors, plain: np.ndarray | None = None
) -> np.ndarray:
    """`_log_joint` with every error read both ways: without a fresh error's extra luck, and with it
    (weight `priors.recent_share`). `plain`: the first reading's joint where it is known already; each
    reading is computed only where its weight is not 0."""
    share = priors.recent_share if priors.recent > 0 else 0.0
    if plain is None and share < 1.0:
        plain = _log_joint(correct, graded, verdict, priors)
    if share <= 0.0:
        assert plain is not None
        return plain
    raised = _log_joint(
        correct, graded, verdict, priors, terms=_Terms.of(correct, graded, verdict, priors.k, priors.recent)
    )
    if share >= 1.0:
        return raised
    with np.errstate(divide="ignore"):
        return np.logaddexp(plain + math.log1p(-share), raised + math.log(share))


def cautious(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per step, the less sure of two p_good readings: the lower where both lean good, the higher
    where both lean bad, 0.5 where they disagree (non-increasing where both are)."""
    low, high = np.minimum(a, b), np.maximum(a, b)
    return np.where(low >= 0.5, low, np.where(high <= 0.5, high, 0.5))


def _evidence_and_p_good(log_joint: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per batch row: the log evidence and p_good (P(prefix after step i is clean), i = 0..n-1)."""
    top = log_joint.max(axis=(1, 2, 3))
    w = np.exp(log_joint - top[:, None, None, None])
    total = w.sum(axis=(1, 2, 3))
    p_error = w.sum(axis=(2, 3)) / total[:, None]
    return top + np.log(total), np.clip(1.0 - np.cumsum(p_error, axis=1)[:, :-1], 0.0, 1.0)


def masses_to_p_good(log_mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same from rows of log P(first error e, data) [b, e] (class and luck summed out)."""
    top = log_mass.max(axis=1)
    w = np.exp(log_mass - top[:, None])
    total = w.sum(axis=1)
    p_error = w / total[:, None]
    return top + np.log(total), np.clip(1.0 - np.cumsum(p_error, axis=1)[:, :-1], 0.0, 1.0)


_HELD_STATES = 64


_holding: deque[weakref.ref[Posterior]] = deque()


def _hold_states(post: Posterior) -> None:
    """Keep the forward states of the last `_HELD_STATES` posteriors only: a state is 20 kB a probed
    prefix, and a shard's relabeling builds a posterior for every solution before it reads any."""
    _holding.append(weakref.ref(post))
    while len(_holding) > _HELD_STATES:
        old = _holding.popleft()()
        if old is not None:
            old._cache = None


class Posterior:
    """The posterior over (first error e, luck q, difficulty class) of one solution, the curve summed out."""

    def __init__(self, ev: Evidence, priors: Priors) -> None:
        self.evidence = ev
        self.priors = priors
        self.terms = _Terms.of(ev.correct[None], ev.graded[None], ev.verdict, priors.k)  # the plain reading's
        self._cache: ForwardCache | None = ForwardCache()  # the pass's states (`cache`)
        self.gains: dict[int, dict[int, float]] = {}  # b -> candidate prefix -> gain (`probe_gains`)
        self._plain: Posterior | None = None  # the plain reading's posterior, where the priors mix two
        self._under: dict[int, Posterior] = {}  # the same evidence under other priors (`under`), by token
        if priors.mixed:
            # its pass and forward states are the plain reading's posterior's; the mixture reuses its joint
            self._plain = Posterior(ev, replace(priors, recent_share=0.0))
            self._cache = None
            with np.errstate(divide="ignore"):
                plain = np.log(self._plain.by_class)[None] + self._plain.log_evidence
            joint = mixed_log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors, plain)
        else:
            joint = _log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors, self._cache, self.terms)
        _hold_states(self)
        log_evidence, p_good = _evidence_and_p_good(joint)
        self.log_evidence = float(log_evidence[0])
        self.p_good = p_good[0]
        self.belief = self.p_good  # what the row says of each step (p_good is what labels need)
        if self._plain is not None:
            # A fresh error's extra luck and a hard step look alike on a few rollouts (both raise the
            # prefix before a fall): where the shard reads errors both ways, the labels (and the
            # search) go by the less sure of the two readings' p_good, so a label holds under either
            # (`cautious`); the row keeps the mixed reading's, a probability.
            self.p_good = cautious(self._plain.p_good, self.p_good)
        self.by_class = np.exp(joint[0] - self.log_evidence)  # [e, d, q]
        self.joint = self.by_class.sum(axis=1)  # [e, q]
        self.p_error = self.joint.sum(axis=1)

    @property
    def cache(self) -> ForwardCache:
        """The forward pass's states, where passes for changed evidence start (`probe_gains`, the model
        check). Only the most recent posteriors keep theirs (`_hold_states`); an older one runs its
        pass again when asked."""
        cache = self._cache
        if cache is None:
            cache = ForwardCache()
            ev = self.evidence
            _log_joint(ev.correct[None], ev.graded[None], ev.verdict, self.priors, cache, self.terms)
            self._cache = cache
        return cache

    def under(self, priors: Priors) -> Posterior:
        """This posterior's evidence under `priors` (itself where they are its own), built once: the
        search scores probes under other priors than it labels under (`probe_value_priors`)."""
        if priors is self.priors:
            return self
        other = self._under.get(priors.token)  # tokens are never reused (`Priors.token`)
        if other is None:
            other = self._under[priors.token] = Posterior(self.evidence, priors)
        return other

    @property
    def q_marginal(self) -> np.ndarray:
        return self.joint.sum(axis=0)

    def p_marginal(self) -> np.ndarray:
        """Posterior weights of the difficulty classes (for pooling the prior)."""
        return self.by_class.sum(axis=(0, 2))

    def uncertainty(self) -> float:
        """Bits of uncertainty about where the first error is (`first_error_entropy`)."""
        return float(first_error_entropy(self.p_good[None])[0])


def first_error_entropy(p_good: np.ndarray) -> np.ndarray:
    """[row]: bits of uncertainty about where the first error is, from rows of p_good: the entropy of
    P(first error at step e), e = 0..n-1, or none (P(e) = p_good[e - 1] - p_good[e]).

    This is what a probe should reduce: the labels are read from where the first error is, and the
    steps after it never get one. The sum of the steps' own label entropies, the former objective,
    also counted the steps after the error, whose p_good mostly tracks the luck rate: the search
    spent a third of its rollouts on the last prefix measuring luck, and stopped early where the
    steps it could still pin mattered less in that sum than the steps after them."""
    edge = np.ones((len(p_good), 1))
    p = -np.diff(np.concatenate([edge, p_good, 0.0 * edge], axis=1), axis=1)
    p = np.clip(p, 1e-300, 1.0)
    return -(p * np.log2(p)).sum(axis=1)
