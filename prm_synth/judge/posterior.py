"""The posterior over a row's first error: the rollouts' evidence (`first_error_prior`, from `p_good` or
the interval the labels leave open) and the judge's votes read under its measured accuracy (accuracy.py).
What selection.py stops on and what consensus.py's `soft` policy keeps by.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from prm_synth.judge.accuracy import JudgeAccuracy
from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.records import LabeledRecord

__all__ = [
    "first_error_prior",
    "late_mixture",
    "late_prior",
    "open_interval",
    "posterior",
    "prefix_confidence",
    "slip_hazard",
]


def open_interval(labels: Sequence[bool | None]) -> tuple[int, int]:
    """(lo, hi): the first errors the labels allow, lo..hi inclusive; hi == len(labels) stands for -1.

    lo is the step after the last good label; hi the first bad label, or "no error" when none is bad."""
    lo = max((i for i, label in enumerate(labels) if label is True), default=-1) + 1
    hi = next((i for i, label in enumerate(labels) if label is False), len(labels))
    return lo, hi


def first_error_prior(record: LabeledRecord) -> list[float]:
    """P(first error = k) for k = 0..n-1, and at index n P(no error), from the rollouts alone.

    From `p_good` (the probability each prefix is still correct; made monotone, as prefixes nest) where
    the labeler gives it, else uniform over the interval the labels leave open."""
    n = len(record.labels)
    if record.p_good is not None and len(record.p_good) == n:
        mass, previous = [], 1.0
        for p in record.p_good:
            p = min(previous, max(0.0, p))
            mass.append(previous - p)
            previous = p
        return mass + [previous]
    lo, hi = open_interval(record.labels)
    width = max(hi - lo + 1, 1)
    return [1.0 / width if lo <= k <= hi else 0.0 for k in range(n + 1)]


def late_mixture(prior: Sequence[float], late: float) -> list[float]:
    """The rollouts' prior where, with probability `late`, the change-point they found is late: the true
    first error lies at an earlier step (each as likely). What a canary's planted step is scored under
    (its slip is certain, so `late` is the whole chance: CanaryStats.late_rate)."""
    return _spread_back(prior, lambda _j: late)


def late_prior(prior: Sequence[float], late: float, hazard: float) -> list[float]:
    """The rollouts' prior for a row of the data, where a change-point j may be late: the policy slipped at
    an earlier step and repaired it, so rollouts from after the slip still reached the answer. Against
    "no slip before j", each earlier step i holds such a slip with odds hazard * late / (1 - hazard): a
    fresh error there (`hazard`, the shard's own rate per step, `slip_hazard`) that the rollouts then place
    late (`late`, measured on canaries the policy itself continued: CanaryStats.late_rate). Both are
    measured; neither knows where a world puts its slips. The mass at "no error" (index n) is left alone:
    an error the rollouts did not see at all is `JudgeAccuracy.hidden`'s."""
    if late <= 0.0 or hazard <= 0.0:
        return list(prior)
    odds = min(hazard, 0.99) * late / (1.0 - min(hazard, 0.99))
    return _spread_back(prior, lambda j: j * odds / (1.0 + j * odds))


def _spread_back(prior: Sequence[float], moved: Callable[[int], float]) -> list[float]:
    """`prior` with the share `moved(j)` of each step j's mass spread evenly over steps 0..j-1."""
    n = len(prior) - 1
    out = list(prior)
    reach = 0.0  # what step k receives from the later steps: sum over j > k of their moved mass / j
    for k in range(n - 1, -1, -1):
        out[k] += reach
        if k > 0:
            share = moved(k) * prior[k]
            out[k] -= share
            reach += share / k
    return out


def slip_hazard(records: Sequence[LabeledRecord]) -> float:
    """The shard's rate of fresh errors per step: the first errors its rollouts found over the steps they
    covered (each row's steps through its first bad label, all of a row without one)."""
    found = sum(1 for r in records if r.first_error_mc >= 0)
    steps = sum(r.first_error_mc + 1 if r.first_error_mc >= 0 else len(r.labels) for r in records)
    return found / steps if steps else 0.0


def posterior(record: LabeledRecord, accuracy: JudgeAccuracy) -> list[float]:
    """P(first error = k | rollouts, votes) for k = 0..n-1 and, at index n, no error."""
    n = len(record.labels)
    prior = late_prior(first_error_prior(record), accuracy.late, accuracy.hazard)
    if accuracy.hidden > 0.0 and n:  # errors the rollouts cannot see (right answers): the run's own share
        spread = [*accuracy.hidden_prior(n), 0.0]
        prior = [(1.0 - accuracy.hidden) * p + accuracy.hidden * q for p, q in zip(prior, spread, strict=True)]
    if accuracy.doubt > 0.0 and n:  # graded against a pseudo-gold that may be wrong (grader.kind majority)
        # then the rollouts measured against a wrong answer: the row is right with `doubt_clean` (its answer
        # is the truth), else its error is one they cannot place (spread as a hidden one)
        spread = [(1.0 - accuracy.doubt_clean) * q for q in accuracy.hidden_prior(n)] + [accuracy.doubt_clean]
        prior = [(1.0 - accuracy.doubt) * p + accuracy.doubt * q for p, q in zip(prior, spread, strict=True)]
    votes = [v for v in record.judge_votes if v != UNPARSEABLE and -1 <= v < n]
    # votes that repeat one reading are worth fewer independent ones (accuracy.JudgeAccuracy.dependence)
    weight = 1.0 / (1.0 + (len(votes) - 1) * accuracy.dependence) if len(votes) > 1 else 1.0
    logs = []
    for k, mass in enumerate(prior):
        if mass <= 0.0:
            logs.append(-math.inf)
            continue
        first_error = -1 if k == n else k
        evidence = sum(math.log(accuracy.likelihood(v, first_error, n)) for v in votes)
        logs.append(math.log(mass) + weight * evidence)
    top = max(logs)
    if top == -math.inf:
        return [1.0 / (n + 1)] * (n + 1)
    weights = [math.exp(x - top) for x in logs]
    total = sum(weights)
    return [w / total for w in weights]


def prefix_confidence(post: Sequence[float]) -> list[float]:
    """Per step, P(its prefix is still correct) = P(first error after it), from a posterior over the first
    error (index n: no error): what `consensus_p_good` stores."""
    out, later = [], post[-1]
    for k in range(len(post) - 2, -1, -1):
        out.append(later)
        later += post[k]
    return [min(1.0, max(0.0, p)) for p in reversed(out)]
