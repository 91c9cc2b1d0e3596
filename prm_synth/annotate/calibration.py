"""Calibrated first-error search: a change-point model whose assumptions are estimated from the run.

The model, for one solution of n steps whose first error is at step e (e = n: no error):
- a prefix that ends before the error (clean) reaches the gold answer with
      g(r) = q + (1 - q) * (1 - p) ** r,        r = steps still ahead of it,
  i.e. the policy has to write the r remaining steps without an error (per-step error rate p, this
  solution's difficulty) or get lucky after one;
- a prefix that holds the error reaches it at the luck rate q, whatever comes after;
- the solution's own verdict is one more draw: correct for sure when clean, with probability q when
  it holds an error (a lucky solution), and the error's position has the prior of the same policy:
  P(e = j) = (1 - p) ** j * p.

p is per solution, q per run. Neither is a constant: both live on a grid, the solution's own
rollouts weigh them, and the priors come from the run (`RunEstimates`, shared by all annotators of a
run and updated as each one finishes: an online EM over the expected counts). The posterior gives
every step its probability of being still correct (`p_good`), and the search asks for the probe
(prefix and rollouts) that most reduces the uncertainty of the step labels per rollout. It stops
when every step is decided at the `confidence` level, when the budget is spent, or when no probe
is worth its rollouts; steps the evidence cannot decide stay unlabeled, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.protocol import Annotator, Probe
from prm_synth.schema import CalibratedStop, UnlabeledReason, VerdictStatus

# Per-step error rates (a solution's difficulty) and luck rates the posterior ranges over.
P_GRID = np.array([0.005, 0.015, 0.03, 0.05, 0.075, 0.1, 0.14, 0.2, 0.28, 0.4])
Q_GRID = np.array([0.002, 0.015, 0.035, 0.06, 0.1, 0.15, 0.21, 0.28, 0.36, 0.45])
_LOG_Q = np.log(Q_GRID)
_LOG_1Q = np.log1p(-Q_GRID)


def _cell_widths(grid: np.ndarray) -> np.ndarray:
    """Each grid point's share of [0, max]: a flat prior on the interval, not on the grid points."""
    edges = np.concatenate([[0.0], (grid[1:] + grid[:-1]) / 2, [grid[-1]]])
    w = np.diff(edges)
    return w / w.sum()


_LOG_Q_WIDTH = np.log(_cell_widths(Q_GRID))
_P_WIDTH = _cell_widths(P_GRID)

# Why a step has no label (schema.UnlabeledReason says what each means).
AFTER_ERROR: UnlabeledReason = "after_error"
UNDECIDED_BUDGET: UnlabeledReason = "undecided_budget"
UNDECIDED_UNINFORMATIVE: UnlabeledReason = "undecided_uninformative"
UNDECIDED_VERDICT: UnlabeledReason = "undecided_verdict"


class RunEstimates:
    """The run's estimates of the luck rate q and of how hard its problems are (the prior on p).

    One object per run (or shard), shared by every annotator: each annotator keeps its solution's
    expected counts here (the E-step under its current posterior), replacing them after every
    probe, so what one solution measures informs the others while they are still searching.
    `max_strength` caps how many pseudo-observations the pooled luck rate counts as, so a run whose
    problems differ in luck never becomes so sure that a solution's own rollouts cannot move it.
    Until `mature` (enough pooled evidence), an annotator does not stop on the strength of the
    priors alone.
    """

    def __init__(self, max_strength: float = 60.0, p_pseudo: float = 4.0, min_pooled: float = 40.0) -> None:
        self.max_strength = max_strength
        self.p_pseudo = p_pseudo
        self.min_pooled = min_pooled
        self.lucky = 0.0  # expected successes of prefixes (and solutions) that hold an error
        self.unlucky = 0.0  # expected failures of the same
        self.p_mass = np.zeros(len(P_GRID))
        self._parts: dict[str, tuple[float, float, np.ndarray]] = {}

    @property
    def solutions(self) -> int:
        return len(self._parts)

    @property
    def mature(self) -> bool:
        return self.lucky + self.unlucky >= self.min_pooled

    def log_prior_q(self) -> np.ndarray:
        a, b = self.lucky, self.unlucky
        scale = min(1.0, self.max_strength / (a + b)) if a + b > 0 else 0.0
        logp = scale * (a * _LOG_Q + b * _LOG_1Q) + _LOG_Q_WIDTH
        return logp - logp.max()

    def log_prior_p(self) -> np.ndarray:
        mass = self.p_mass + self.p_pseudo * _P_WIDTH
        return np.log(mass / mass.sum())

    @property
    def luck_rate(self) -> float:
        """The pooled estimate of q (posterior mean on the grid)."""
        w = np.exp(self.log_prior_q())
        return float((w * Q_GRID).sum() / w.sum())

    def update(self, key: str, post: Posterior) -> None:
        """Set one solution's share of the pooled estimates (replacing what it said before)."""
        bad = post.p_bad_prefix  # P(prefix j holds the error)
        ev = post.evidence
        lucky = float((bad * ev.correct).sum())
        unlucky = float((bad * (ev.total - ev.correct)).sum())
        held = 1.0 - post.p_clean  # the solution's own ending is one more draw after its error
        if ev.verdict == "correct":
            lucky += held
        elif ev.verdict == "incorrect":
            unlucky += held
        # p: only a solution with measurements says more about difficulty than the prior it started from
        p_mass = post.p_marginal if ev.total.any() else np.zeros(len(P_GRID))
        old = self._parts.get(key)
        if old is not None:
            self.lucky -= old[0]
            self.unlucky -= old[1]
            self.p_mass -= old[2]
        self._parts[key] = (lucky, unlucky, p_mass)
        self.lucky += lucky
        self.unlucky += unlucky
        self.p_mass += p_mass


@dataclass
class Evidence:
    """One solution's measurements. Index j is the prefix of steps 0..j-1 (j = 0: the question alone);
    prefixes 0..n-1 can be probed, the complete solution (j = n) is graded once: `verdict`."""

    n: int
    correct: np.ndarray
    total: np.ndarray
    verdict: VerdictStatus
    # Steps of a complete solution, when the steps are only its beginning (a partial tree path):
    # a prefix's clean rate depends on the steps still ahead of it, not on the path's own length.
    horizon: int | None = None

    @classmethod
    def empty(cls, n: int, verdict: VerdictStatus, horizon: int | None = None) -> Evidence:
        return cls(n, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), verdict, horizon)


def _binomial_pmf(b: int, rate: np.ndarray) -> np.ndarray:
    """pmf[c, ...] of Binomial(b, rate) for c = 0..b."""
    c = np.arange(b + 1).reshape((-1,) + (1,) * rate.ndim)
    comb = np.array([math.comb(b, int(k)) for k in range(b + 1)], dtype=float).reshape(c.shape)
    return comb * rate[None] ** c * (1.0 - rate[None]) ** (b - c)


def _entropy(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return -(p * np.log2(p) + (1 - p) * np.log2(1 - p))


class Posterior:
    """The joint posterior over (first error e, difficulty p, luck q) of one solution."""

    def __init__(self, evidence: Evidence, estimates: RunEstimates) -> None:
        self.evidence = ev = evidence
        n = ev.n
        remaining = max(n, ev.horizon or n) - np.arange(n)  # steps ahead of prefix j
        one_minus_p = 1.0 - P_GRID
        q = Q_GRID[None, None, :]
        # clean rate G[j, p, q]
        self.good_rate = q + (1.0 - q) * one_minus_p[None, :, None] ** remaining[:, None, None]
        c = ev.correct[:, None, None].astype(float)
        f = (ev.total - ev.correct)[:, None, None].astype(float)
        ll_good = c * np.log(self.good_rate) + f * np.log1p(-self.good_rate)  # [j, p, q]
        ll_bad = c[:, :, 0:1] * _LOG_Q[None, None, :] + f[:, :, 0:1] * _LOG_1Q[None, None, :]  # [j, 1, q]
        # prefix j is clean iff j <= e; L[e] = sum_{j<=e} ll_good[j] + sum_{j>e} ll_bad[j]
        cum_good = np.cumsum(ll_good, axis=0)  # [n, p, q]
        cum_bad = np.cumsum(ll_bad, axis=0)
        total_bad = cum_bad[-1]
        loglik = np.empty((n + 1, len(P_GRID), len(Q_GRID)))
        loglik[:n] = cum_good + (total_bad[None] - cum_bad)
        loglik[n] = cum_good[-1]
        # the verdict of the complete solution
        if ev.verdict == "correct":
            loglik[:n] += _LOG_Q[None, None, :]
        elif ev.verdict == "incorrect":
            loglik[:n] += _LOG_1Q[None, None, :]
            loglik[n] = -np.inf
        # prior of the first error's position, given p
        e = np.arange(n + 1)[:, None]
        log_prior_e = np.where(e < n, e * np.log(one_minus_p)[None] + np.log(P_GRID)[None], n * np.log(one_minus_p))
        joint = loglik + log_prior_e[:, :, None]
        joint += estimates.log_prior_p()[None, :, None] + estimates.log_prior_q()[None, None, :]
        joint = np.exp(joint - joint.max())
        self.joint = joint / joint.sum()
        self.p_error = self.joint.sum(axis=(1, 2))  # P(e = j), j = 0..n
        # p_good[i] = P(e > i): prefix ending at step i is still correct
        self.p_good = 1.0 - np.cumsum(self.p_error)[:n]
        self.p_good = np.clip(self.p_good, 0.0, 1.0)

    @property
    def p_clean(self) -> float:
        return float(self.p_error[-1])

    @property
    def p_marginal(self) -> np.ndarray:
        return self.joint.sum(axis=(0, 2))

    @property
    def p_bad_prefix(self) -> np.ndarray:
        """P(prefix j holds the error) = P(e < j), j = 0..n-1 (the question alone never does)."""
        return np.concatenate([[0.0], np.cumsum(self.p_error)[: self.evidence.n - 1]])

    def uncertainty(self) -> float:
        return float(_entropy(self.p_good).sum())

    def best_probe(self, batches: Sequence[int], room: int) -> tuple[int, int, float]:
        """(prefix j, rollouts b, expected entropy drop per rollout) of the most informative probe.

        Expected drop in the summed binary entropies of the step labels, one probe ahead.
        """
        n = self.evidence.n
        now = self.uncertainty()
        best = (-1, 0, 0.0)
        flat = self.joint.reshape(n + 1, -1)  # [e, (p, q)]
        by_q = self.joint.sum(axis=1)  # [e, q]
        clean = np.arange(n)[:, None] <= np.arange(n + 1)[None, :]  # [j, e]: prefix j is clean
        for b in batches:
            if b > room:
                continue
            # A prefix's rate is its clean rate G[j, p, q] or the luck rate q: weigh each outcome c
            # of b rollouts under both and pick per (j, e).
            pmf_clean = _binomial_pmf(b, self.good_rate).reshape(b + 1, n, -1)  # [c, j, (p, q)]
            pmf_bad = _binomial_pmf(b, Q_GRID)  # [c, q]
            if_clean = (pmf_clean.reshape(-1, flat.shape[1]) @ flat.T).reshape(b + 1, n, n + 1)  # [c, j, e]
            if_bad = pmf_bad @ by_q.T  # [c, e]
            post_e = np.where(clean[None], if_clean, if_bad[:, None, :])  # [c, j, e] unnormalised
            pred = post_e.sum(axis=2)  # [c, j]
            post_e = post_e / np.maximum(pred[:, :, None], 1e-300)
            p_good = 1.0 - np.cumsum(post_e, axis=2)[:, :, :n]  # [c, j, i]
            after = (pred * _entropy(p_good).sum(axis=2)).sum(axis=0)  # [j]
            gain = (now - after) / b
            j = int(np.argmax(gain))
            if gain[j] > best[2]:
                best = (j, b, float(gain[j]))
        return best


@dataclass(frozen=True)
class StepLabels:
    labels: list[bool | None]
    reasons: list[UnlabeledReason | None]  # why a step is unlabeled (None where labeled)


def labels_from_posterior(p_good: Sequence[float], confidence: float, undecided: UnlabeledReason) -> StepLabels:
    """Good where P(still correct) >= confidence; the first step whose prefix holds an error with
    P >= confidence is bad; steps after it are unlabeled (they hold that error); the rest undecided."""
    labels: list[bool | None] = []
    reasons: list[UnlabeledReason | None] = []
    bad_seen = False
    for p in p_good:
        if bad_seen:
            labels.append(None)
            reasons.append(AFTER_ERROR)
        elif 1.0 - p >= confidence:
            labels.append(False)
            reasons.append(None)
            bad_seen = True
        elif p >= confidence:
            labels.append(True)
            reasons.append(None)
        else:
            labels.append(None)
            reasons.append(undecided)
    return StepLabels(labels, reasons)


def confident_labels(
    labels: Sequence[bool | None], p_good: Sequence[float | None] | None, min_confidence: float
) -> list[bool | None]:
    """The labels that meet `min_confidence`, None for the rest.

    A good label needs p_good >= min_confidence, a bad one 1 - p_good >= min_confidence. Rows
    without p_good (methods that do not estimate it) keep their labels only when min_confidence is 0.
    """
    if not 0.0 <= min_confidence <= 1.0:
        raise ValueError("min_confidence must be in [0, 1]")
    if p_good is None:
        return list(labels) if min_confidence <= 0.0 else [None] * len(labels)
    if len(p_good) != len(labels):
        raise ValueError(f"p_good has {len(p_good)} entries for {len(labels)} labels")
    out: list[bool | None] = []
    for label, p in zip(labels, p_good, strict=True):
        sure = label is not None and p is not None and (p if label else 1.0 - p) >= min_confidence
        out.append(label if sure else None)
    return out


# ------------------------------------------------------------------ the annotator
@dataclass(frozen=True)
class SearchSettings:
    confidence: float = 0.9  # a step is labeled when its posterior says so with at least this probability
    max_rollouts: int = 96  # per solution
    min_gain: float = 0.02  # bits of label uncertainty a rollout must be expected to remove
    batches: tuple[int, ...] = (3, 8)  # rollouts a probe may ask for at once


def calibrated_search(
    steps: list[str],
    final_status: VerdictStatus,
    settings: SearchSettings,
    estimates: RunEstimates | None = None,
    key: str = "",
) -> Annotator[Annotation]:
    """Probe the most informative prefix until every step is decided, the budget is spent, or no
    probe is worth its rollouts; label from the posterior (see the module docstring)."""
    estimates = estimates if estimates is not None else RunEstimates()
    n = len(steps)
    ann = Annotation.empty("binary", n)
    ev = Evidence.empty(n, final_status)
    spent = 0
    samples = np.zeros(n, dtype=np.int64)  # rollouts asked per prefix, graded or not
    stop: CalibratedStop = UNDECIDED_VERDICT
    key = key or f"solution-{id(ev)}"
    while True:
        post = Posterior(ev, estimates)
        estimates.update(key, post)
        # Before the run has pooled enough evidence its priors are guesses: do not stop on them.
        trusted = estimates.mature
        decided = np.maximum(post.p_good, 1.0 - post.p_good) >= settings.confidence
        if decided.all() and trusted:
            stop = "decided"
            break
        room = settings.max_rollouts - spent
        if room <= 0:
            stop = UNDECIDED_BUDGET
            break
        j, b, gain = post.best_probe(settings.batches, room)
        if b == 0 or (gain < settings.min_gain and (trusted or gain <= 0.0)):
            stop = UNDECIDED_UNINFORMATIVE
            break
        step = j - 1  # prefix j ends at step j-1 (−1: the question alone)
        # ungradable rollouts are sampled again and left out of the evidence
        (result,) = yield [Probe.of_steps(steps, step, int(samples[j]) + b)]
        spent += max(0, result.total - int(samples[j]))
        samples[j] = result.total
        ev.correct[j], ev.total[j] = result.correct, result.graded
        if step >= 0:
            ann.record(result)
    _label(ann, post, settings.confidence, stop, final_status)
    return ann


def _label(
    ann: Annotation, post: Posterior, confidence: float, stop: CalibratedStop, final_status: VerdictStatus
) -> None:
    n = len(ann.label_source)
    undecided = UNDECIDED_VERDICT if stop == "decided" else stop
    lab = labels_from_posterior(post.p_good.tolist(), confidence, undecided)
    ann.p_good = [float(p) for p in post.p_good]
    ann.unlabeled_reason = list(lab.reasons)
    ann.record_verdict(n - 1, final_status)
    for i, label in enumerate(lab.labels):
        measured = ann.mc_total[i] > 0
        if label is None:
            ann.label_source[i] = "none"
        elif i == n - 1 and ann.label_source[i] == "verdict":
            ann.decide(i, label, "verdict")
        else:
            ann.decide(i, label, "test" if measured else "inferred")
