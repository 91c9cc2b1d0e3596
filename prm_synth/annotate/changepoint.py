"""First-error search under a model of how a policy writes a solution, with little else assumed.

One solution of n steps; its first error is at step e (e = n: no error); prefix j is steps 0..j-1
(j = 0: the question alone), so prefix j is clean iff j <= e. The policy that wrote the solution
also writes the rollouts, and both go wrong the same way:
- every step j has a hazard h_j, the chance the policy gets it wrong having got everything before
  it right. The sampled solution's first error follows them: P(e = j) = (1 - h_0) ... (1 - h_{j-1}) h_j;
- a clean prefix j finishes without an error with chance c_j = (1 - h_j) ... (1 - h_{n-1}), so the
  curve of c rises to c_n = 1 and is steepest where the hard steps are, the same steps where an error
  is likeliest. Its rollouts reach the gold answer at q + (1 - q) c_j;
- a prefix that holds the error reaches the answer at the luck rate q, this solution's own, on a grid
  that reaches 0.94; the solution's own verdict: correct for sure when clean, at q when not;
- hazards are drawn per step from the solution's difficulty class (a typical hazard, spread around
  it, and now and then a hard step: P_GRID, SPREAD, SPIKE), so no curve shape is assumed: a hard step,
  uneven difficulty, solutions of any length fit;
- the rollouts of one prefix share more than their rate (its wording, an error the policy may
  notice): counts are beta-binomial around the model's rate with overdispersion k (`K_CHOICES`).
Rollouts that cannot be graded are left out of the evidence: unknown is not failure.

The luck prior, the classes' weights and k are the shard's: the search runs under a weak default,
and once every search of the shard is done, `relabel` pools them from all the evidence at once (EM
on the grid weights for each k, the likeliest k wins: `pool_priors`) and labels every solution
again. Pooling over the finished set, never online, keeps rows independent of the order the searches
finished in (run.max_in_flight, batch sizes).

Everything is summed exactly (one forward pass over the prefixes, the curve's level on a grid as the
state; the levels after the error do not touch the evidence, so their part is a table; a run of
unprobed prefixes is crossed in one product of precomputed kernel powers), so `p_good` is the
posterior probability that a step's prefix is still correct. The search asks for the probe that most
reduces the label uncertainty per rollout, among a few candidates (prefixes around the posterior's
quartiles of the error, ambiguous probed prefixes, the question alone, the last prefix), by computing
the posterior after each possible outcome (each candidate carried forward from the base pass's state
at its prefix). It goes on until the first error is pinned to one step (bad label on it, good on the
step before) or `localize_max_rollouts` is spent, probing inside the open interval between the last
good and the first bad label when no other probe is worth its rollouts (`open_interval`). A
posterior predictive check (leave one probed prefix out, how surprising is its count?) leaves a
solution unlabeled with reason `undecided_misfit` when its data contradict the model.

A right answer after a wrong step: a stable share of the correct-answer solutions (`check_correct`)
has every early prefix tested first; a dip below the later prefixes is a slip the policy repaired
(`repaired_slip`: the row says `undecided_unlocated` from there on), and `relabel` measures on them
the shard's rate of process errors among correct answers (`process_error_rate`), which caps how far
the untested correct-answer solutions' steps are trusted (`hidden_error_p_good`).

Measured across a suite of simulated worlds that each break one assumption of the older models
(benchmarks/fidelity.py): see the README's "Which annotate method" for what holds where.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.labels import (
    AFTER_ERROR,
    UNDECIDED_BUDGET,
    UNDECIDED_UNINFORMATIVE,
    UNDECIDED_UNLOCATED,
    UNDECIDED_VERDICT,
    binomial_cdf,
    labels_from_posterior,
)
from prm_synth.annotate.protocol import Annotator, Probe

UNDECIDED_MISFIT = "undecided_misfit"  # the solution's evidence contradicts the model: no label is trusted
__all__ = ["AFTER_ERROR", "UNDECIDED_MISFIT", "Evidence", "Posterior", "Priors", "changepoint_search", "relabel"]

Q_GRID = np.array(
    [0.001, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.26, 0.32, 0.39, 0.46, 0.53, 0.6, 0.67, 0.74, 0.81, 0.88, 0.94]
)
# Levels of the clean-finish chance c (a clean prefix's rollouts write the rest without an error with
# chance c, and reach the answer at q + (1 - q) c). Fine near 1, where the last steps live, and
# logarithmic towards 0, where long hard solutions start.
C_GRID = np.array(
    [1.0, 0.97, 0.93, 0.88, 0.82, 0.75, 0.68, 0.6, 0.52, 0.44, 0.37, 0.3, 0.24, 0.19, 0.15, 0.11, 0.08]
    + [0.055, 0.035, 0.02, 0.01, 0.004, 0.001]
)
H_GRID = np.array([0.003, 0.01, 0.02, 0.035, 0.055, 0.08, 0.11, 0.15, 0.2, 0.27, 0.35, 0.45, 0.57, 0.7, 0.85])
# A solution's difficulty class: its steps' hazards spread (log-sd SPREAD) around a typical one, and
# any step is a hard one (hazard >= 0.2) with chance SPIKE. The shard pools the classes' weights.
P_GRID = np.array([0.01, 0.03, 0.07, 0.14, 0.25, 0.4])
SPREAD = 0.3
SPIKE = 0.03
_LOG_Q = np.log(Q_GRID)
_LOG_1Q = np.log1p(-Q_GRID)
# Rollouts of one prefix may share more than their rate (the prefix's own wording, a recent error the
# policy may notice): each prefix's rate varies around its model value as Beta(k m, k (1 - m)), so
# counts are beta-binomial. How much they share is the shard's to say: pooling picks the k under
# which the shard's evidence is likeliest (`pool_priors`); the search runs under the first.
K_CHOICES = (60.0, 12.0, 400.0)
MAX_COUNT = 1024
MAX_STEPS = 512  # the bad stretch's level tables are kept this long; longer solutions reuse the last


def _rising(a: np.ndarray) -> np.ndarray:
    """R[k, i] = log(a_i (a_i + 1) ... (a_i + k - 1)), k = 0..MAX_COUNT."""
    steps = np.log(a[None, :] + np.arange(MAX_COUNT)[:, None])
    return np.concatenate([np.zeros((1, len(a))), np.cumsum(steps, axis=0)])


_CLEAN_RATE = (Q_GRID[:, None] + (1.0 - Q_GRID[:, None]) * C_GRID[None, :]).ravel()  # [q * level]


@dataclass(frozen=True)
class _CountTables:
    """log rising factorials for the beta-binomial likelihood of every clean and luck rate, one k."""

    clean_hit: np.ndarray
    clean_miss: np.ndarray
    bad_hit: np.ndarray
    bad_miss: np.ndarray
    total: np.ndarray

    @classmethod
    @functools.cache
    def of(cls, k: float) -> _CountTables:
        clean = np.clip(_CLEAN_RATE, 0.001, 0.995)
        bad = np.clip(Q_GRID, 0.001, 0.995)
        return cls(
            _rising(k * clean),
            _rising(k * (1 - clean)),
            _rising(k * bad),
            _rising(k * (1 - bad)),
            _rising(np.array([k]))[:, 0],
        )

    def loglik(self, clean: bool, c: np.ndarray, f: np.ndarray) -> np.ndarray:
        """[j, rate]: log beta-binomial likelihood (without the binomial coefficient) of c hits, f misses."""
        c = np.minimum(c, MAX_COUNT)
        f = np.minimum(f, MAX_COUNT - c)
        hit, miss = (self.clean_hit, self.clean_miss) if clean else (self.bad_hit, self.bad_miss)
        return hit[c] + miss[f] - self.total[c + f][..., None]


def _level_kernel(h: float) -> np.ndarray:
    """K[b, a]: the level of prefix j given the level b of prefix j + 1 and step j's hazard h
    (c_j = c_{j+1} (1 - h), split between the two grid levels around it, in log space)."""
    log_c = np.log(C_GRID)
    k = np.zeros((len(C_GRID), len(C_GRID)))
    for b, top in enumerate(log_c):
        t = top + math.log1p(-h)
        lo = int(np.searchsorted(-log_c, -t))  # first level at or below t
        if lo >= len(C_GRID):
            k[b, -1] = 1.0
            continue
        hi = lo - 1
        w = (t - log_c[lo]) / (log_c[hi] - log_c[lo])
        k[b, hi], k[b, lo] = w, 1.0 - w
    return k


def _hazard_weights(p: float) -> np.ndarray:
    w = np.exp(-0.5 * ((np.log(H_GRID) - math.log(p)) / SPREAD) ** 2)
    spike = (H_GRID >= 0.2).astype(float)
    return (1.0 - SPIKE) * w / w.sum() + SPIKE * spike / spike.sum()


def _class_kernels() -> tuple[np.ndarray, np.ndarray]:
    """Per class d: the clean-to-clean transition (step j right: weight 1 - h) and the bad stretch's
    switch table SIGMA[m, d, a]: the weight of 'prefix j at level a is the last clean one' when m
    steps lie between prefix j + 1 and the end (bad prefixes' levels summed out: their rollouts
    do not depend on them)."""
    kernels = np.stack([_level_kernel(h) for h in H_GRID])  # [h, b, a]
    weights = np.stack([_hazard_weights(p) for p in P_GRID])  # [d, h]
    clean = np.einsum("dh,hba->dba", weights * (1.0 - H_GRID), kernels)
    switch = np.einsum("dh,hba->dba", weights * H_GRID, kernels)
    carry = np.einsum("dh,hba->dba", weights, kernels)
    level = np.zeros((len(P_GRID), len(C_GRID)))
    level[:, 0] = 1.0  # after the last step nothing is left to get wrong: c_n = 1
    sigma = np.empty((MAX_STEPS, len(P_GRID), len(C_GRID)))
    for m in range(MAX_STEPS):
        sigma[m] = np.einsum("db,dba->da", level, switch)
        level = np.einsum("db,dba->da", level, carry)
    return np.ascontiguousarray(clean.transpose(0, 2, 1)), sigma


_CLEAN_T, _SIGMA = _class_kernels()  # _CLEAN_T[d, a, b]: forward, from level a at j to b at j + 1


@dataclass(frozen=True)
class Priors:
    """Prior weights on the luck grid and on the difficulty classes, and the rollouts' overdispersion
    k (a shard pools them)."""

    q: np.ndarray = field(default_factory=lambda: _default_q())
    p: np.ndarray = field(default_factory=lambda: np.full(len(P_GRID), 1.0 / len(P_GRID)))
    k: float = K_CHOICES[0]
    # [luck]: log-likelihood of the same problem's other solutions (they share its luck); None for a
    # solution labeled on its own
    siblings: np.ndarray | None = None

    def log_prior(self) -> np.ndarray:
        """[class, luck]: the log prior one solution is labeled under."""
        prior = np.log(self.p)[:, None] + np.log(self.q)[None, :]
        return prior if self.siblings is None else prior + self.siblings[None, :]


def _default_q() -> np.ndarray:
    """A weak prior that leans towards little luck but leaves room for a lot (cell widths x (1 - q)^4)."""
    edges = np.concatenate([[0.0], (Q_GRID[1:] + Q_GRID[:-1]) / 2, [1.0]])
    w = np.diff(edges) * (1.0 - Q_GRID) ** 4
    return w / w.sum()


@dataclass
class Evidence:
    """One solution's measurements: graded rollouts per prefix j = 0..n-1 and its own verdict."""

    n: int
    correct: np.ndarray
    graded: np.ndarray
    verdict: str  # correct | incorrect | unknown
    stop: str = ""  # why the search stopped (its reason for steps it left undecided)
    checked: bool = False  # a correct-answer solution whose early prefixes were all tested (`check_correct`)

    @classmethod
    def empty(cls, n: int, verdict: str) -> Evidence:
        return cls(n, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), verdict)

    def plus(self, j: int, correct: int, graded: int) -> Evidence:
        c, g = self.correct.copy(), self.graded.copy()
        c[j] += correct
        g[j] += graded
        return Evidence(self.n, c, g, self.verdict, self.stop, self.checked)


def _sigma(m: int) -> np.ndarray:
    return _SIGMA[min(m, MAX_STEPS - 1)]


ForwardState = tuple[np.ndarray, np.ndarray]  # (msg [d, q, level], log scale [d, q]) before prefix j


def _powers() -> tuple[np.ndarray, np.ndarray]:
    """The clean stretch's transition over m unprobed steps, m = 0..MAX_STEPS: POWERS[m, d] is the
    m-th power of class d's one-step kernel, scaled to sum 1 (LOG_SCALE[m, d] is the log scale), so a
    run of unprobed prefixes is crossed in one product instead of a step at a time."""
    powers = np.empty((MAX_STEPS + 1, len(P_GRID), len(C_GRID), len(C_GRID)))
    log_scale = np.zeros((MAX_STEPS + 1, len(P_GRID)))
    powers[0] = np.eye(len(C_GRID))[None]
    for m in range(1, MAX_STEPS + 1):
        step = np.matmul(powers[m - 1], _CLEAN_T)
        scale = step.sum(axis=(1, 2))
        powers[m] = step / scale[:, None, None]
        log_scale[m] = log_scale[m - 1] + np.log(scale)
    return powers, log_scale


_POWERS, _LOG_SCALE = _powers()


def _advance(msg: np.ndarray, log_acc: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The forward state m unprobed steps on (msg [b, d, q, level]), renormalised."""
    while m > 0:
        k = min(m, MAX_STEPS)
        msg = np.matmul(msg, _POWERS[k])
        log_acc = log_acc + _LOG_SCALE[k][None, :, None]
        scale = np.maximum(msg.sum(axis=3), 1e-300)
        msg = msg / scale[..., None]
        log_acc = log_acc + np.log(scale)
        m -= k
    return msg, log_acc


@dataclass
class ForwardCache:
    """The base evidence's forward pass, kept where it was materialised (each probed prefix and each
    run of unprobed ones): the state before any prefix is one product away (`at`)."""

    marks: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)

    def at(self, j: int) -> ForwardState:
        pos, msg, log_acc = max((m for m in self.marks if m[0] <= j), key=lambda m: m[0])
        msg, log_acc = _advance(msg[None], log_acc[None], j - pos)
        return msg[0], log_acc[0]


def _log_joint(
    correct: np.ndarray,
    graded: np.ndarray,
    verdict: str,
    priors: Priors,
    start: tuple[int, ForwardState] | None = None,
    cache: ForwardCache | None = None,
) -> np.ndarray:
    """[b, e, d, q]: log P(first error e, class d, luck q, data) for a batch of evidence of one
    solution (rows of `correct` and `graded` are alternative measurements of the same n prefixes).

    The forward pass goes from probed prefix to probed prefix: a run of unprobed ones between is
    crossed in one product (`_POWERS`), its rows of e scored together, so the work is a few array
    operations per probed prefix plus O(n) in one vectorised pass. `start` (j0, state): the pass
    starts at prefix j0 from a state of another evidence that agrees on prefixes < j0 (a probe's
    outcomes differ at one prefix only); rows e < j0 are then left for the caller. `cache`: keeps
    this pass's states (batch of one) for such starts."""
    batch, n = correct.shape
    tables = _CountTables.of(priors.k)
    j = 0 if start is None else start[0]
    # only probed prefixes carry a likelihood (an unprobed one scores 0): score those alone
    cols = np.flatnonzero(graded.any(axis=0))
    c, f = correct[:, cols], graded[:, cols] - correct[:, cols]
    ll_clean = tables.loglik(True, c, f).reshape(batch, len(cols), len(Q_GRID), len(C_GRID))
    ll_bad = np.zeros((batch, n, len(Q_GRID)))
    ll_bad[:, cols] = tables.loglik(False, c, f)
    column = {int(k): i for i, k in enumerate(cols)}
    if verdict == "correct":
        v_clean, v_bad = 0.0, _LOG_Q
    elif verdict == "incorrect":
        v_clean, v_bad = -np.inf, _LOG_1Q
    else:
        v_clean, v_bad = 0.0, np.zeros(len(Q_GRID))
    # bad_after[:, j]: log P(rollouts of prefixes j..n-1 and the verdict | they all hold the error)
    bad_after = np.concatenate([ll_bad[:, ::-1].cumsum(axis=1)[:, ::-1], np.zeros((batch, 1, len(Q_GRID)))], axis=1)
    bad_after = bad_after + v_bad
    # forward over the clean stretch: msg[b, d, q, level] = P(data of prefixes < j, prefix j clean at level)
    msg = np.ones((batch, len(P_GRID), len(Q_GRID), len(C_GRID)))
    log_acc = np.zeros((batch, len(P_GRID), len(Q_GRID)))
    log_e = np.empty((batch, n + 1, len(P_GRID), len(Q_GRID)))
    if start is not None:
        msg0, acc0 = start[1]
        msg = np.repeat(msg0[None], batch, axis=0)
        log_acc = np.repeat(acc0[None], batch, axis=0)
    probed = [int(k) for k in cols if k >= j] + [n]
    with np.errstate(divide="ignore"):
        for p in probed:
            if cache is not None:
                cache.marks.append((j, msg[0], log_acc[0]))
            while j < p:  # unprobed prefixes j..p-1, at most MAX_STEPS at a time
                m = min(p - j, MAX_STEPS)
                # switch[b, i, d, q]: prefix j + i is the last clean one; its level carried by POWERS[i]
                sig = _SIGMA[np.minimum(n - (j + np.arange(m)) - 1, MAX_STEPS - 1)]  # [i, d, level]
                reach = np.matmul(_POWERS[:m], sig[..., None])[..., 0]  # [i, d, level at j]
                # switch[b, i, d, q] = sum over level of msg[b, d, q, level] reach[i, d, level] (BLAS)
                switch = np.matmul(msg.transpose(1, 0, 2, 3), reach.transpose(1, 2, 0)[:, None])  # [d, b, q, i]
                switch = switch.transpose(1, 3, 0, 2)
                log_e[:, j : j + m] = (
                    log_acc[:, None]
                    + _LOG_SCALE[:m][None, :, :, None]
                    + np.log(switch)
                    + bad_after[:, j + 1 : j + m + 1][:, :, None, :]
                )
                msg, log_acc = _advance(msg, log_acc, m)
                j += m
            if p == n:
                break
            if cache is not None:
                cache.marks.append((p, msg[0], log_acc[0]))
            lik = ll_clean[:, column[p]]  # [b, q, level]
            top = lik.max(axis=2)  # [b, q]
            msg = msg * np.exp(lik - top[:, :, None])[:, None]
            log_acc = log_acc + top[:, None]
            switch = (msg * _sigma(n - p - 1)[None, :, None, :]).sum(axis=3)
            log_e[:, p] = log_acc + np.log(switch) + bad_after[:, p + 1][:, None]
            msg = np.matmul(msg, _CLEAN_T)
            scale = np.maximum(msg.sum(axis=3), 1e-300)
            msg = msg / scale[..., None]
            log_acc = log_acc + np.log(scale)
            j = p + 1
        log_e[:, n] = log_acc + np.log(msg[..., 0]) + v_clean
    return log_e + priors.log_prior()[None, None]


def _evidence_and_p_good(log_joint: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per batch row: the log evidence and p_good (P(prefix after step i is clean), i = 0..n-1)."""
    top = log_joint.max(axis=(1, 2, 3))
    w = np.exp(log_joint - top[:, None, None, None])
    total = w.sum(axis=(1, 2, 3))
    p_error = w.sum(axis=(2, 3)) / total[:, None]
    return top + np.log(total), np.clip(1.0 - np.cumsum(p_error, axis=1)[:, :-1], 0.0, 1.0)


def _alternatives(ev: Evidence, j: int, graded: int) -> tuple[np.ndarray, np.ndarray]:
    """The evidence plus each possible count 0..graded of `graded` more rollouts at prefix j, as a batch."""
    k = np.arange(graded + 1)
    correct = np.repeat(ev.correct[None], graded + 1, axis=0)
    total = np.repeat(ev.graded[None], graded + 1, axis=0)
    correct[:, j] += k
    total[:, j] += graded
    return correct, total


class Posterior:
    """The posterior over (first error e, luck q, difficulty class) of one solution, the curve summed out."""

    def __init__(self, ev: Evidence, priors: Priors) -> None:
        self.evidence = ev
        self.priors = priors
        joint = _log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors)
        log_evidence, p_good = _evidence_and_p_good(joint)
        self.log_evidence = float(log_evidence[0])
        self.p_good = p_good[0]
        self.by_class = np.exp(joint[0] - self.log_evidence)  # [e, d, q]
        self.joint = self.by_class.sum(axis=1)  # [e, q]
        self.p_error = self.joint.sum(axis=1)

    @property
    def q_marginal(self) -> np.ndarray:
        return self.joint.sum(axis=0)

    def p_marginal(self) -> np.ndarray:
        """Posterior weights of the difficulty classes (for pooling the prior)."""
        return self.by_class.sum(axis=(0, 2))

    def uncertainty(self) -> float:
        return float(_entropy(self.p_good).sum())

    def misfit(self, level: float) -> bool:
        """Posterior predictive check, leave one out: each probed prefix's count against what the
        model predicts for it from everything else. A count at least as unlikely as the observed one
        has predictive probability p_j; the model fails this solution when min p_j < level / probes
        (Bonferroni), e.g. a prefix after the error that reaches the answer far more often than luck
        allows, or a clean stretch that falls and rises again."""
        ev = self.evidence
        probed = np.flatnonzero(ev.graded > 0)
        if len(probed) < 3:
            return False
        for j in probed:
            g, c = int(ev.graded[j]), int(ev.correct[j])
            correct, graded = _alternatives(ev.plus(j, -c, -g), j, g)  # every count j could have had
            log_ev, _ = _evidence_and_p_good(_log_joint(correct, graded, ev.verdict, self.priors))
            log_pmf = np.array([_log_comb(g, k) for k in range(g + 1)]) + log_ev
            pmf = np.exp(log_pmf - log_pmf.max())
            pmf /= pmf.sum()
            if pmf[pmf <= pmf[c] * (1 + 1e-9)].sum() < level / len(probed):
                return True
        return False


def _entropy(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return -(p * np.log2(p) + (1 - p) * np.log2(1 - p))


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def open_interval(p_good: np.ndarray, confidence: float) -> range:
    """The prefixes whose probing can pin the first error to one step: those between the last step
    labeled good and the first labeled bad (prefix j is clean iff the first error is at step j or
    later). Empty when there is no bad label, or when the step before it is labeled good already."""
    bad = np.flatnonzero(1.0 - p_good >= confidence)
    if len(bad) == 0 or bad[0] == 0 or p_good[bad[0] - 1] >= confidence:
        return range(0)
    first_bad = int(bad[0])
    good = np.flatnonzero(p_good[:first_bad] >= confidence)
    last_good = int(good[-1]) if len(good) else -1
    return range(last_good + 1, first_bad + 1)  # prefixes last_good+1 (clean-ish) .. first_bad


def _spread(prefixes: range, most: int = 5) -> list[int]:
    """At most `most` prefixes of an interval, its ends included and the rest evenly between."""
    if len(prefixes) <= most:
        return list(prefixes)
    return sorted({prefixes[round(i * (len(prefixes) - 1) / (most - 1))] for i in range(most)})


def best_probe(
    post: Posterior, priors: Priors, batch: int, room: int, cap: int, extra: Sequence[int] = ()
) -> tuple[int, float]:
    """(prefix j, expected bits of label uncertainty removed per rollout) of the best candidate probe;
    every outcome of every candidate is scored in one batch. `extra`: more candidate prefixes (the
    open interval the search is pinning the first error in)."""
    ev = post.evidence
    n = ev.n
    b = min(batch, room)
    if b <= 0:
        return -1, 0.0
    p_clean = np.concatenate([[1.0], post.p_good[: n - 1]])  # P(prefix j clean) = P(e >= j)
    candidates = {0, n - 1, *extra}
    for level in (0.8, 0.5, 0.2):  # around the posterior's quartiles and median of the error
        first_below = int(np.searchsorted(-p_clean, -level))  # first prefix with P(clean) < level
        candidates |= {first_below - 1, first_below}
    candidates |= {j for j in range(n) if ev.graded[j] and 0.05 < p_clean[j] < 0.95}
    chosen = [j for j in sorted(candidates) if 0 <= j < n and ev.graded[j] + b <= cap]
    if not chosen:
        return -1, 0.0
    # The base evidence's forward pass once; each candidate's outcomes differ from it at prefix j
    # only: rows e < j change by prefix j's bad-stretch likelihood alone, rows e >= j are carried
    # forward from the base state at j (the same sums, without the shared stretch recomputed).
    cache = ForwardCache()
    base = _log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors, cache=cache)[0]
    tables = _CountTables.of(priors.k)
    rows = []
    for j in chosen:
        correct, graded = _alternatives(ev, j, b)
        part = _log_joint(correct, graded, ev.verdict, priors, start=(j, cache.at(j)))
        bad_new = tables.loglik(False, correct[:, j], graded[:, j] - correct[:, j])  # [outcome, q]
        bad_old = tables.loglik(False, ev.correct[j : j + 1], ev.graded[j : j + 1] - ev.correct[j : j + 1])
        part[:, :j] = base[None, :j] + (bad_new - bad_old)[:, None, None, :]
        rows.append(part)
    log_ev, p_good = _evidence_and_p_good(np.concatenate(rows))
    log_comb = np.array([_log_comb(b, k) for k in range(b + 1)])
    pred = np.exp(np.tile(log_comb, len(chosen)) + log_ev - post.log_evidence)
    after = (pred * _entropy(p_good).sum(axis=1)).reshape(len(chosen), b + 1).sum(axis=1)
    gains = (post.uncertainty() - after) / b
    best = int(np.argmax(gains))
    return (chosen[best], float(gains[best])) if gains[best] > 0 else (-1, 0.0)


@dataclass(frozen=True)
class ChangepointSettings:
    """The search's knobs; `of(config)` reads them from a binary annotate config."""

    confidence: float = 0.9
    max_rollouts: int = 56  # per solution: with the sampled solution, under 60 samples a question
    batch: int = 4  # rollouts a probe asks for
    prefix_cap: int = 16  # graded rollouts one prefix may take
    min_gain: float = 0.01  # bits of label uncertainty a rollout must be expected to remove
    misfit_level: float = 0.01  # the predictive check's false-alarm rate for a solution the model fits
    # while the first error is not pinned to one step: graded rollouts one prefix may take, and the
    # bits a rollout must still be expected to remove
    localize_cap: int = 32
    localize_max_rollouts: int = 80  # the budget while the first error is not pinned (else max_rollouts)
    # Share of correct-answer solutions whose early prefixes (the first half) are each tested with
    # `batch` rollouts before the search: the shard's rate of process errors among correct-answer
    # solutions is measured on them (`relabel`), and sets how far the others' early steps are trusted.
    check_correct: float = 0.25
    localize_min_gain: float = 0.001

    @classmethod
    def of(cls, config: Any) -> ChangepointSettings:
        return cls(confidence=config.confidence, max_rollouts=config.changepoint_max_rollouts)


def changepoint_search(
    steps: list[str],
    final_status: str,
    settings: ChangepointSettings,
    priors: Priors | None = None,
    check: bool = False,
) -> Annotator[Annotation]:
    """Probe the most informative prefix until every step is decided and the first error is pinned,
    the budget is spent, or no probe is worth its rollouts; the evidence goes into `ann.evidence` so
    the labeler can label again under the shard's pooled priors (`relabel`). `check`: a correct-answer
    solution drawn for the shard's process-error measurement: its early prefixes are tested first."""
    priors = priors or Priors()
    n = len(steps)
    ann = Annotation.empty("binary", n)
    ev = Evidence.empty(n, final_status)
    samples = np.zeros(n, dtype=np.int64)  # rollouts asked per prefix, graded or not
    spent = 0
    if check and final_status == "correct" and n > 1:
        # a slip the policy repaired shows as a dip at the prefix that ends on it: test every early one
        early = range(1, (n + 1) // 2 + 1)
        results = yield [Probe.of_steps(steps, j - 1, settings.batch) for j in early]
        for j, result in zip(early, results, strict=True):
            spent += result.total
            samples[j] = result.total
            ev.correct[j], ev.graded[j] = result.correct, result.total - result.unknown
            if j >= 1:
                ann.record(result)
        ev.checked = True
    while True:
        post = Posterior(ev, priors)
        decided = np.maximum(post.p_good, 1.0 - post.p_good) >= settings.confidence
        if decided.all():
            stop = "decided"
            break
        # Pinning the first error to one step is worth more than the gain threshold says: the step
        # where the error happens is the one a PRM most needs. While it is not pinned, the search
        # probes inside the open interval too, with a higher cap a prefix, on any positive gain.
        interval = open_interval(post.p_good, settings.confidence)
        room = (settings.localize_max_rollouts if interval else settings.max_rollouts) - spent
        if room <= 0:
            stop = UNDECIDED_BUDGET
            break
        j, gain = -1, 0.0
        if spent < settings.max_rollouts:
            j, gain = best_probe(post, priors, settings.batch, room, settings.prefix_cap)
        if (j < 0 or gain < settings.min_gain) and interval:
            j, gain = best_probe(post, priors, settings.batch, room, settings.localize_cap, _spread(interval))
            gain = gain if gain >= settings.localize_min_gain else 0.0
        if j < 0 or gain <= 0.0 or (gain < settings.min_gain and not interval):
            stop = UNDECIDED_UNINFORMATIVE
            break
        want = int(samples[j]) + min(settings.batch, room)
        (result,) = yield [Probe.of_steps(steps, j - 1, want)]
        spent += max(0, result.total - int(samples[j]))
        samples[j] = result.total
        ev.correct[j] = result.correct
        ev.graded[j] = result.total - result.unknown
        if j >= 1:
            ann.record(result)
    ev.stop = stop
    ann.evidence = ev
    label(ann, post, settings, stop, final_status)
    return ann


def hidden_error_p_good(post: Posterior, rate: float) -> np.ndarray:
    """p_good of a correct-answer solution whose early steps were not tested, when a share `rate` of
    the shard's correct-answer solutions hold a process error: the error, if any, placed where the
    posterior would place an error (its shape), never more trusting than the posterior itself."""
    n = post.evidence.n
    p_error = post.p_error[:n]
    total = p_error.sum()
    shape = np.cumsum(p_error) / total if total > 0 else np.linspace(1.0 / n, 1.0, n)
    return np.minimum(post.p_good, 1.0 - rate * shape)


def repaired_slip(ev: Evidence, significance: float = 0.05) -> int | None:
    """The first prefix of a correct-answer solution whose rollouts fall clearly below those of the
    prefixes after it (one-sided binomial test against their pooled rate, Bonferroni over the probed
    prefixes), or None. A correct answer after such a dip: the policy slipped at the dip's last step
    and repaired it later, so the later prefixes look clean again. A steep rise after a hard step
    reads the same (the prefixes before it are low too): that costs coverage of such solutions, never
    a wrong label. Tried and dropped: a fall below the prefix before (too weak on 4 rollouts a prefix:
    good precision 0.62 in the fidelity suite's `repair` world, against 0.94 here)."""
    probed = [j for j in range(ev.n) if ev.graded[j] > 0]
    for j in probed:
        later = [k for k in probed if k > j]
        hits, total = sum(int(ev.correct[k]) for k in later), sum(int(ev.graded[k]) for k in later)
        if total < 8:
            break
        if binomial_cdf(int(ev.correct[j]), int(ev.graded[j]), hits / total) < significance / len(probed):
            return j
    return None


def label(
    ann: Annotation,
    post: Posterior,
    settings: ChangepointSettings,
    stop: str,
    final_status: str,
    process_error_rate: float = 0.0,
) -> None:
    """Labels, sources, reasons and p_good from a posterior (again after pooling: `relabel`).
    `process_error_rate`: the shard's measured share of correct-answer solutions that hold an error
    (`relabel`); an untested correct-answer solution's steps are trusted no further than it allows,
    and the steps it leaves undecided say so (`undecided_unlocated`)."""
    n = len(ann.label_source)
    p_good = post.p_good
    hidden = final_status == "correct" and not post.evidence.checked and process_error_rate > 0
    if hidden:
        p_good = hidden_error_p_good(post, process_error_rate)
    slip = repaired_slip(post.evidence) if final_status == "correct" else None
    if post.misfit(settings.misfit_level):
        # a correct answer whose rollouts contradict the model: most often a repaired slip, not located
        reason = UNDECIDED_UNLOCATED if final_status == "correct" else UNDECIDED_MISFIT
        lab_labels: list[bool | None] = [None] * n
        reasons: list[str | None] = [reason] * n
    elif slip is not None:
        # the prefix of steps 0..slip-1 dipped: the error is there or before, and the steps from the
        # first that may hold it on are not labeled good
        lab = labels_from_posterior(p_good[: max(slip - 1, 0)].tolist(), settings.confidence, UNDECIDED_UNLOCATED)
        rest = n - len(lab.labels)
        lab_labels = list(lab.labels) + [None] * rest
        reasons = list(lab.reasons) + [UNDECIDED_UNLOCATED] * rest
    else:
        undecided = UNDECIDED_VERDICT if stop == "decided" else stop
        if hidden and (p_good < post.p_good).any():
            undecided = UNDECIDED_UNLOCATED
        lab = labels_from_posterior(p_good.tolist(), settings.confidence, undecided)
        lab_labels, reasons = list(lab.labels), list(lab.reasons)
    ann.p_good = [float(p) for p in p_good]
    ann.unlabeled_reason = reasons
    ann.decided.clear()
    ann.record_verdict(n - 1, final_status)
    for i, lbl in enumerate(lab_labels):
        measured = ann.mc_total[i] > 0
        if lbl is None:
            ann.label_source[i] = "none"  # counts stay; no rule may turn them into a label
        elif i == n - 1 and ann.label_source[i] == "verdict":
            ann.decide(i, lbl, "verdict")
        else:
            ann.decide(i, lbl, "test" if measured else "inferred")


def pool_priors(
    evidence: Sequence[Evidence], base: Priors | None = None, rounds: int = 8, strength: float = 8.0
) -> Priors:
    """The shard's priors on luck and the difficulty classes, estimated from every solution's evidence
    at once (EM on the grid weights; `strength` solutions' worth of the base prior keep a small shard
    from collapsing onto a few grid points), under each overdispersion k in K_CHOICES; the k under
    which the shard's evidence is likeliest wins. Depends on the set of evidence only, not on the
    order the searches finished in."""
    base = base or Priors()
    if not evidence:
        return base
    best: tuple[float, Priors] | None = None
    for k in K_CHOICES:
        priors = Priors(base.q, base.p, k)
        for _ in range(rounds):
            q = strength * base.q
            p = strength * base.p
            for ev in evidence:
                post = Posterior(ev, priors)
                q = q + post.q_marginal
                p = p + post.p_marginal()
            priors = Priors(q / q.sum(), p / p.sum(), k)
        fit = sum(Posterior(ev, priors).log_evidence for ev in evidence)
        if best is None or fit > best[0]:
            best = (fit, priors)
    assert best is not None
    return best[1]


def _luck_loglik(ev: Evidence, priors: Priors) -> np.ndarray:
    """[luck]: what one solution's evidence says about its problem's luck (its log-likelihood, the
    first error and the difficulty class summed out under the shard's prior, up to a constant).
    Only luck is shared between siblings: difficulty is poorly told apart from luck where luck is
    high, and sharing it there made the siblings' correct verdicts read as an easy problem
    (benchmarks/fidelity.py --samples 4, high_luck: good precision 0.92 -> 0.83)."""
    joint = _log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors)[0]  # [e, d, q]
    top = joint.max()
    loglik = np.log(np.exp(joint - top).sum(axis=(0, 1))) - np.log(priors.q)
    return loglik - loglik.max()


def _shared_prefixes(a: Sequence[str], b: Sequence[str]) -> int:
    """The last prefix two solutions share: prefixes 0..m (m steps each) are the same text, so the
    scheduler answered both from the same rollouts."""
    m = 0
    while m < min(len(a), len(b)) and a[m] == b[m]:
        m += 1
    return m


def _without(ev: Evidence, upto: int) -> Evidence:
    """The evidence with prefixes 0..upto left out (measured for another solution already)."""
    correct, graded = ev.correct.copy(), ev.graded.copy()
    correct[: upto + 1] = 0
    graded[: upto + 1] = 0
    return Evidence(ev.n, correct, graded, ev.verdict, ev.stop, ev.checked)


def _siblings_loglik(
    i: int, group: list[int], evidence: list[Evidence], steps: list[list[str]], priors: Priors
) -> np.ndarray:
    """[luck]: what the other solutions of solution i's problem say about its luck, every prefix
    counted once: a sibling's prefixes that solution i, or a sibling before it, also has are left
    out (they hold the same rollouts)."""
    total = np.zeros(len(Q_GRID))
    seen = [i]
    for j in group:
        if j == i:
            continue
        if any(steps[j] == steps[k] for k in seen):
            continue  # the same text again: its rollouts and its verdict are already counted
        shared = max(_shared_prefixes(steps[j], steps[k]) for k in seen)
        total += _luck_loglik(_without(evidence[j], shared), priors)
        seen.append(j)
    return total


def relabel(
    anns: Sequence[Annotation],
    settings: ChangepointSettings,
    problems: Sequence[tuple[str, list[str]]] | None = None,
) -> Priors:
    """Label every annotation again under the priors pooled from all of them (the shard's). Solutions
    of one problem (`problems`: each annotation's problem id and steps) share its luck: each is
    labeled under the shard's prior times what its siblings' evidence says about it."""
    keys = list(problems) if problems is not None else [(str(i), []) for i in range(len(anns))]
    kept = [(a, key) for a, key in zip(anns, keys, strict=True) if isinstance(a.evidence, Evidence)]
    evidence = [a.evidence for a, _ in kept]
    steps = [key[1] for _, key in kept]
    priors = pool_priors(evidence)
    by_problem: dict[str, list[int]] = {}
    for i, (_, (problem, _)) in enumerate(kept):
        by_problem.setdefault(problem, []).append(i)
    owns = []
    for i, (_, (problem, _)) in enumerate(kept):
        group = by_problem[problem]
        owns.append(
            priors if len(group) == 1 else replace(priors, siblings=_siblings_loglik(i, group, evidence, steps, priors))
        )
    posts = [Posterior(ev, own) for ev, own in zip(evidence, owns, strict=True)]
    rate = process_error_rate([p for p in posts if p.evidence.checked], settings)
    for (ann, _), post in zip(kept, posts, strict=True):
        ev = post.evidence
        label(ann, post, settings, ev.stop, ev.verdict, rate)
    return priors


def process_error_rate(checked: Sequence[Posterior], settings: ChangepointSettings) -> float:
    """The shard's share of correct-answer solutions that hold a process error, measured on those whose
    early prefixes were all tested: one counts when its posterior puts an error in it at least as
    likely as not, or when its rollouts dip and rise again (a repaired slip, or the model's misfit).
    A Beta(0.5, 4.5) prior keeps a shard with few tested solutions from trusting them blindly."""
    found = sum(
        1
        for p in checked
        if 1.0 - p.p_good[-1] >= 0.5 or repaired_slip(p.evidence) is not None or p.misfit(settings.misfit_level)
    )
    return (found + 0.5) / (len(checked) + 5.0)
