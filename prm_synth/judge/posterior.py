"""The posterior over a row's first error: the rollouts' evidence (`first_error_prior`, from `p_good` or
the interval the labels leave open) and the judge's votes read under its measured accuracy (accuracy.py).
What selection.py stops on and what consensus.py's `soft` policy keeps by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from prm_synth.judge.accuracy import JudgeAccuracy
from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.records import LabeledRecord

__all__ = ["first_error_prior", "open_interval", "posterior", "prefix_confidence"]


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


def posterior(record: LabeledRecord, accuracy: JudgeAccuracy) -> list[float]:
    """P(first error = k | rollouts, votes) for k = 0..n-1 and, at index n, no error."""
    n = len(record.labels)
    prior = first_error_prior(record)
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
