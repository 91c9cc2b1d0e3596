"""The change-point posterior: where a solution's first error is, under a model of how a policy
writes a solution, with little else assumed. The search that uses it is `changepoint.py`.

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
posterior probability that a step's prefix is still correct. `probe_gains` scores candidate
probes by how much label uncertainty each removes per rollout, computing the posterior after each
possible outcome (each candidate carried forward from the base pass's state at its prefix).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

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
H_GRID = np.array([0.0003, 0.001, 0.003, 0.01, 0.02, 0.035, 0.055, 0.08, 0.11, 0.15, 0.2, 0.27, 0.35, 0.45, 0.57, 0.7, 0.85])
# A solution's difficulty class: its steps' hazards spread (log-sd SPREAD) around a typical one, and
# any step is a hard one (hazard >= 0.2) with chance SPIKE, or the class's typical hazard where that is
# lower (a fixed chance of hard steps would put a floor of about 0.013 under every class's hazard, and
# a solution of hundreds of steps could never be clean). The shard pools the classes' weights.
# The two lowest classes are long solutions' (hundreds to thousands of steps): without them a clean
# prefix far from the end would finish cleanly with chance near 0 under every class, its rollouts
# would look like luck alone, and no probe of a long solution would be worth its rollouts.
P_GRID = np.array([0.001, 0.003, 0.01, 0.03, 0.07, 0.14, 0.25, 0.4])
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
    chance = min(SPIKE, p)
    return (1.0 - chance) * w / w.sum() + chance * spike / spike.sum()


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


def probe_gains(post: Posterior, priors: Priors, chosen: Sequence[int], b: int) -> np.ndarray:
    """[candidate]: expected bits of label uncertainty removed per rollout by `b` more rollouts at each
    prefix in `chosen`; every outcome of every candidate is scored in one batch."""
    ev = post.evidence
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
    return (post.uncertainty() - after) / b


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


def luck_loglik(ev: Evidence, priors: Priors) -> np.ndarray:
    """[luck]: what one solution's evidence says about its problem's luck (its log-likelihood, the
    first error and the difficulty class summed out under the shard's prior, up to a constant).
    Only luck is shared between siblings: difficulty is poorly told apart from luck where luck is
    high, and sharing it there made the siblings' correct verdicts read as an easy problem
    (benchmarks/fidelity.py --samples 4, high_luck: good precision 0.92 -> 0.83)."""
    joint = _log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors)[0]  # [e, d, q]
    top = joint.max()
    loglik = np.log(np.exp(joint - top).sum(axis=(0, 1))) - np.log(priors.q)
    return loglik - loglik.max()
