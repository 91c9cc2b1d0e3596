"""First-error search under a model that assumes little: a monotone clean curve and per-solution luck.

The model, for one solution of n steps whose first error is at step e (e = n: no error); prefix j is
steps 0..j-1 (j = 0: the question alone), so prefix j is clean iff j <= e:
- a clean prefix reaches the gold answer at a rate s_j that never falls as the prefix grows
  (s_0 <= s_1 <= ... <= s_e): a policy that has written more correct steps is no worse off. No curve
  shape is assumed (a hard step, a policy that skips or adds steps, any difficulty profile fit): the
  curve lives on a grid of rates and moves up now and then (a Markov chain on the grid; two priors
  on how it moves, a flat one and a rising one, mixed by a weight the shard pools: `CURVES`);
- a prefix that holds the error reaches it at the luck rate q, and a clean prefix is never worse
  than luck (s_j >= q). q is this solution's own, on a grid that reaches 0.94;
- the rollouts of one prefix share more than their rate (its wording, an error the policy may
  notice): counts are beta-binomial around s_j or q (`K`), so one fluke prefix cannot outvote the rest;
- the solution's own verdict: correct for sure when clean, correct at the luck rate when not;
- the error's position has a prior that mixes geometric shapes.
Rollouts that cannot be graded are left out of the evidence: unknown is not failure.

The priors on q and on the shapes are the shard's: the search runs under a weak default, and once
every search of the shard is done, `relabel` pools them from all the evidence at once (EM on the grid
weights, `pool_priors`) and labels every solution again. Pooling over the finished set, never online,
keeps rows independent of the order the searches finished in (run.max_in_flight, batch sizes).

Everything is summed over (e, q, the curve) exactly (a forward pass over the prefixes), so `p_good`
is the posterior probability that a step's prefix is still correct. The search asks for the probe
that most reduces the label uncertainty per rollout, among a few candidates (prefixes around the
posterior's quartiles of the error, ambiguous probed prefixes, the question alone, the last prefix),
by computing the posterior after each possible outcome. A posterior predictive check (leave one
probed prefix out, how surprising is its count?) leaves a solution unlabeled with reason
`undecided_misfit` when its data contradict the model.

Measured across a suite of simulated worlds that each break one assumption of the older models
(benchmarks/fidelity.py): see the README's "Which annotate method" for what holds where.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.calibration import (
    AFTER_ERROR,
    UNDECIDED_BUDGET,
    UNDECIDED_UNINFORMATIVE,
    UNDECIDED_VERDICT,
    labels_from_posterior,
)
from prm_synth.annotate.protocol import Annotator, Probe

UNDECIDED_MISFIT = "undecided_misfit"  # the solution's evidence contradicts the model: no label is trusted
__all__ = ["AFTER_ERROR", "UNDECIDED_MISFIT", "Evidence", "Posterior", "Priors", "changepoint_search"]

Q_GRID = np.array(
    [0.001, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.26, 0.32, 0.39, 0.46, 0.53, 0.6, 0.67, 0.74, 0.81, 0.88, 0.94]
)
S_GRID = np.array(
    [0.002, 0.02, 0.05, 0.09, 0.14, 0.2, 0.26, 0.33, 0.4, 0.47, 0.54, 0.61, 0.68, 0.75, 0.81, 0.86]
    + [0.9, 0.935, 0.96, 0.98, 0.993]
)
P_GRID = np.array(
    [0.003, 0.01, 0.02, 0.04, 0.07, 0.11, 0.16, 0.23, 0.32, 0.45, 0.6]
)  # shapes of the error-position prior
# The clean curve's priors: it moves up between two adjacent prefixes with chance JUMP, by k grid
# levels with weight DECAY ** k. The flat one reads a lower rate after a higher one as an error, not
# as noise of a steep curve (a hard step); the rising one fits a policy whose chances grow with every
# step it has right (a geometric curve). Measured on benchmarks/fidelity.py: the flat one alone
# left p_good off by up to 0.36 and good precision at 0.88; the rising one alone cost bad precision
# with a hard step (0.80); mixed, with the shard's weight: gaps up to 0.27, precision >= 0.90.
CURVES = ((0.1, 0.5), (0.3, 0.7))  # (JUMP, DECAY) of the flat and of the rising curve
_LOG_Q = np.log(Q_GRID)
_LOG_1Q = np.log1p(-Q_GRID)
# Rollouts of one prefix share more than their rate (the prefix's own wording, a recent error the
# policy may notice): each prefix's rate varies around its curve or luck value as Beta(K m, K (1 - m)),
# so counts are beta-binomial. One fluke prefix then cannot outvote the rest.
K = 20.0
MAX_COUNT = 4096


def _rising(a: np.ndarray) -> np.ndarray:
    """R[k, i] = log(a_i (a_i + 1) ... (a_i + k - 1)), k = 0..MAX_COUNT."""
    steps = np.log(a[None, :] + np.arange(MAX_COUNT)[:, None])
    return np.concatenate([np.zeros((1, len(a))), np.cumsum(steps, axis=0)])


def _count_table(rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _rising(K * rates), _rising(K * (1.0 - rates))


_S_HIT, _S_MISS = _count_table(S_GRID)
_Q_HIT, _Q_MISS = _count_table(Q_GRID)
_K_ALL = _rising(np.array([K]))[:, 0]


def _loglik(hit: np.ndarray, miss: np.ndarray, c: np.ndarray, f: np.ndarray) -> np.ndarray:
    """[j, rate]: log beta-binomial likelihood (without the binomial coefficient) of c hits, f misses."""
    c = np.minimum(c, MAX_COUNT)
    f = np.minimum(f, MAX_COUNT - c)
    return hit[c] + miss[f] - _K_ALL[c + f][:, None]


_ALLOWED = S_GRID[None, :] >= Q_GRID[:, None] * 0.999  # [q, s]: a clean rate is never below luck


def _transition(jump: float, decay: float) -> np.ndarray:
    """T[s, s']: stay, or move up by k levels with weight decay ** k (small moves are likelier)."""
    k = len(S_GRID)
    t = np.zeros((k, k))
    for i in range(k):
        up = decay ** np.arange(1, k - i)
        t[i, i] = 1.0 - jump if len(up) else 1.0
        if len(up):
            t[i, i + 1 :] = jump * up / up.sum()
    return t


_TS = [_transition(jump, decay) for jump, decay in CURVES]
_START = _ALLOWED / _ALLOWED.sum(axis=1, keepdims=True)  # s_0 uniform over the allowed levels


@dataclass(frozen=True)
class Priors:
    """Prior weights on the luck grid, the error-position shapes and the two curve priors (a shard pools them)."""

    q: np.ndarray = field(default_factory=lambda: _default_q())
    p: np.ndarray = field(default_factory=lambda: np.full(len(P_GRID), 1.0 / len(P_GRID)))
    curve: np.ndarray = field(default_factory=lambda: np.full(len(CURVES), 1.0 / len(CURVES)))

    def log_prior_e(self, n: int) -> np.ndarray:
        """log P(e = j), j = 0..n: geometric shapes mixed by `p`."""
        return np.log(np.maximum(self._prior_e_by_p(n) @ self.p, 1e-300))

    @staticmethod
    def _prior_e_by_p(n: int) -> np.ndarray:
        e = np.arange(n + 1)[:, None]
        keep = 1.0 - P_GRID[None, :]
        return np.where(e < n, keep**e * P_GRID[None, :], keep**n)  # [e, p]


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

    @classmethod
    def empty(cls, n: int, verdict: str) -> Evidence:
        return cls(n, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), verdict)

    def plus(self, j: int, correct: int, graded: int) -> Evidence:
        c, g = self.correct.copy(), self.graded.copy()
        c[j] += correct
        g[j] += graded
        return Evidence(self.n, c, g, self.verdict, self.stop)


class Posterior:
    """The posterior over (first error e, luck q) of one solution, the clean curve summed out."""

    def __init__(self, ev: Evidence, priors: Priors) -> None:
        self.evidence = ev
        n = ev.n
        c = ev.correct
        f = ev.graded - ev.correct
        # clean part: forward pass over prefixes with the curve's level as the state, for every q at once
        lik_s = np.exp(_loglik(_S_HIT, _S_MISS, c, f))  # [j, s] (unnormalised)
        log_clean = np.stack([_clean_loglik(ev, lik_s, t) for t in _TS])  # [curve, j, q]
        # bad part: prefixes after e at the luck rate
        ll_bad = _loglik(_Q_HIT, _Q_MISS, c, f)  # [j, q]
        after = ll_bad[::-1].cumsum(axis=0)[::-1]  # sum over j' >= j
        log_bad = np.zeros((n + 1, len(Q_GRID)))
        log_bad[: n - 1] = after[1:]  # e: prefixes e+1..n-1 hold the error
        loglik = np.empty((len(_TS), n + 1, len(Q_GRID)))
        loglik[:, :n] = log_clean + log_bad[None, :n]
        loglik[:, n] = log_clean[:, n - 1]
        if ev.verdict == "correct":
            loglik[:, :n] += _LOG_Q[None, None]
        elif ev.verdict == "incorrect":
            loglik[:, :n] += _LOG_1Q[None, None]
            loglik[:, n] = -np.inf
        joint = loglik + priors.log_prior_e(n)[None, :, None] + np.log(priors.q)[None, None]
        joint += np.log(priors.curve)[:, None, None]
        top = joint.max()
        w = np.exp(joint - top)
        total = w.sum()
        self.log_evidence = float(top + math.log(total))
        self.by_curve = w / total  # [curve, e, q]
        self.joint = self.by_curve.sum(axis=0)  # [e, q]
        self.p_error = self.joint.sum(axis=1)
        self.p_good = np.clip(1.0 - np.cumsum(self.p_error)[:n], 0.0, 1.0)
        self.priors = priors

    @property
    def q_marginal(self) -> np.ndarray:
        return self.joint.sum(axis=0)

    @property
    def curve_marginal(self) -> np.ndarray:
        return self.by_curve.sum(axis=(1, 2))

    def p_marginal(self) -> np.ndarray:
        """Posterior weights of the error-position shapes (for pooling the prior)."""
        by_p = Priors._prior_e_by_p(self.evidence.n) * self.priors.p[None]  # [e, p]
        by_p /= np.maximum(by_p.sum(axis=1, keepdims=True), 1e-300)
        return self.p_error @ by_p

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
            rest = ev.plus(j, -c, -g)
            priors = self.priors
            base = Posterior(rest, priors).log_evidence
            pmf = np.array(
                [
                    math.exp(_log_comb(g, k) + Posterior(rest.plus(j, k, g), priors).log_evidence - base)
                    for k in range(g + 1)
                ]
            )
            pmf /= pmf.sum()
            if pmf[pmf <= pmf[c] * (1 + 1e-9)].sum() < level / len(probed):
                return True
        return False


def _clean_loglik(ev: Evidence, lik_s: np.ndarray, transition: np.ndarray) -> np.ndarray:
    """[j, q]: log P(data of prefixes 0..j | all clean), by a forward pass over the prefixes with the
    curve's level as the state, for every luck value at once (the level may not fall below it)."""
    n = ev.n
    out = np.empty((n, len(Q_GRID)))
    alpha = _START * lik_s[0][None]
    scale = alpha.sum(axis=1)
    log_acc = np.log(scale)
    alpha /= scale[:, None]
    out[0] = log_acc
    for j in range(1, n):
        if ev.graded[j]:
            alpha = (alpha @ transition) * lik_s[j][None]
            scale = alpha.sum(axis=1)
            log_acc = log_acc + np.log(scale)
            alpha /= scale[:, None]
        out[j] = log_acc  # an unprobed prefix adds nothing (its level still moves, summed out)
    return out


def _entropy(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return -(p * np.log2(p) + (1 - p) * np.log2(1 - p))


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def best_probe(post: Posterior, priors: Priors, batch: int, room: int, cap: int) -> tuple[int, float]:
    """(prefix j, expected bits of label uncertainty removed per rollout) of the best candidate probe."""
    ev = post.evidence
    n = ev.n
    b = min(batch, room)
    if b <= 0:
        return -1, 0.0
    p_clean = np.concatenate([[1.0], post.p_good[: n - 1]])  # P(prefix j clean) = P(e >= j)
    candidates = {0, n - 1}
    for level in (0.8, 0.5, 0.2):  # around the posterior's quartiles and median of the error
        first_below = int(np.searchsorted(-p_clean, -level))  # first prefix with P(clean) < level
        candidates |= {first_below - 1, first_below}
    candidates |= {j for j in range(n) if ev.graded[j] and 0.05 < p_clean[j] < 0.95}
    now = post.uncertainty()
    best = (-1, 0.0)
    for j in sorted(candidates):
        if not 0 <= j < n or ev.graded[j] + b > cap:
            continue
        after = 0.0
        for k in range(b + 1):
            nxt = Posterior(ev.plus(j, k, b), priors)
            pred = math.exp(_log_comb(b, k) + nxt.log_evidence - post.log_evidence)
            after += pred * nxt.uncertainty()
        gain = (now - after) / b
        if gain > best[1]:
            best = (j, gain)
    return best


@dataclass(frozen=True)
class ChangepointSettings:
    """The search's knobs; `of(config)` reads them from a binary annotate config."""

    confidence: float = 0.9
    max_rollouts: int = 56  # per solution: with the sampled solution, under 60 samples a question
    batch: int = 4  # rollouts a probe asks for
    prefix_cap: int = 16  # graded rollouts one prefix may take
    min_gain: float = 0.01  # bits of label uncertainty a rollout must be expected to remove
    misfit_level: float = 0.01  # the predictive check's false-alarm rate for a solution the model fits

    @classmethod
    def of(cls, config: Any) -> ChangepointSettings:
        return cls(confidence=config.confidence, max_rollouts=config.changepoint_max_rollouts)


def changepoint_search(
    steps: list[str], final_status: str, settings: ChangepointSettings, priors: Priors | None = None
) -> Annotator[Annotation]:
    """Probe the most informative prefix until every step is decided, the budget is spent, or no
    probe is worth its rollouts; the evidence goes into `ann.evidence` so the labeler can
    label again under the shard's pooled priors (`relabel`)."""
    priors = priors or Priors()
    n = len(steps)
    ann = Annotation.empty("binary", n)
    ev = Evidence.empty(n, final_status)
    samples = np.zeros(n, dtype=np.int64)  # rollouts asked per prefix, graded or not
    spent = 0
    while True:
        post = Posterior(ev, priors)
        decided = np.maximum(post.p_good, 1.0 - post.p_good) >= settings.confidence
        if decided.all():
            stop = "decided"
            break
        room = settings.max_rollouts - spent
        if room <= 0:
            stop = UNDECIDED_BUDGET
            break
        j, gain = best_probe(post, priors, settings.batch, room, settings.prefix_cap)
        if j < 0 or gain < settings.min_gain:
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


def label(ann: Annotation, post: Posterior, settings: ChangepointSettings, stop: str, final_status: str) -> None:
    """Labels, sources, reasons and p_good from a posterior (again after pooling: `relabel`)."""
    n = len(ann.label_source)
    if post.misfit(settings.misfit_level):
        undecided = UNDECIDED_MISFIT
        lab_labels: list[bool | None] = [None] * n
        reasons: list[str | None] = [UNDECIDED_MISFIT] * n
    else:
        undecided = UNDECIDED_VERDICT if stop == "decided" else stop
        lab = labels_from_posterior(post.p_good.tolist(), settings.confidence, undecided)
        lab_labels, reasons = list(lab.labels), list(lab.reasons)
    ann.p_good = [float(p) for p in post.p_good]
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
    """The shard's priors on luck, the error-position shapes and the curves, estimated from every solution's
    evidence at once (EM on the grid weights; `strength` solutions' worth of the base prior keep a
    small shard from collapsing onto a few grid points). Depends on the set of evidence only, not on
    the order the searches finished in."""
    base = base or Priors()
    priors = base
    if not evidence:
        return base
    for _ in range(rounds):
        q = strength * base.q
        p = strength * base.p
        curve = strength * base.curve
        for ev in evidence:
            post = Posterior(ev, priors)
            q = q + post.q_marginal
            p = p + post.p_marginal()
            curve = curve + post.curve_marginal
        priors = Priors(q / q.sum(), p / p.sum(), curve / curve.sum())
    return priors


def relabel(anns: Sequence[Annotation], settings: ChangepointSettings) -> Priors:
    """Label every annotation again under the priors pooled from all of them (the shard's)."""
    anns = [a for a in anns if isinstance(a.evidence, Evidence)]
    evidence = [a.evidence for a in anns]
    priors = pool_priors(evidence)
    for ann, ev in zip(anns, evidence, strict=True):
        label(ann, Posterior(ev, priors), settings, ev.stop, ev.verdict)
    return priors
