"""The label rules: how a solution's labels are read from its posterior (`label`).

A good label needs p_good >= `confidence`; a bad one P(bad) >= `bad_confidence`, or `confidence` right
after a good label (`first_bad_step`: the pair pins the first error), and a measurement of its own
prefix (`unmeasured_bad`: a label from the prior alone is wrong at any length). A lone bad label must
also hold under a luck prior without the shard's second modes (`lone_bad_stands_from`). A right
answer's steps are trusted no further than the shard's measurement of hidden errors allows
(right_answers.py). Tuning: docs/design/changepoint-tuning.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.budget_interval import mark_open_interval
from prm_synth.annotate.changepoint.engine import DEFAULT_PRIORS, Evidence, Posterior
from prm_synth.annotate.changepoint.right_answers import repaired_slip_of, right_answer_cap
from prm_synth.annotate.changepoint.settings import ChangepointSettings
from prm_synth.records.labels import (
    UNDECIDED_BUDGET,
    UNDECIDED_UNINFORMATIVE,
    UNDECIDED_UNLOCATED,
    UNDECIDED_VERDICT,
    labels_from_posterior,
)


def unmeasured_bad(ev: Evidence, first_bad: int) -> int | None:
    """The prefix a bad label on step `first_bad` rests on (prefix first_bad + 1, or the verdict of an
    incorrect answer for the last step) when it was not measured, else None."""
    j = first_bad + 1
    if j == ev.n:
        return None if ev.verdict == "incorrect" or ev.graded[j - 1] > 0 else j - 1
    return None if ev.graded[j] > 0 else j


def label(
    ann: Annotation,
    post: Posterior,
    settings: ChangepointSettings,
    stop: str,
    final_status: str,
    process_error_rate: float = 0.0,
    error_positions: Sequence[float] = (),
    unmodelled_rate: float = 0.0,
) -> None:
    """Labels, sources, reasons and p_good from a posterior (again after pooling: `relabel`).
    `process_error_rate`, `error_positions`, `unmodelled_rate`: what the shard measured of the errors a
    right answer may hide (`relabel`); a right answer's steps are trusted no further than they allow
    (`right_answer_cap`), and the steps that leaves undecided say so (`undecided_unlocated`)."""
    n = len(ann.label_source)
    p_good, belief = post.p_good, post.belief
    cap = right_answer_cap(post, final_status, process_error_rate, error_positions, unmodelled_rate)
    hidden = cap is not None
    if cap is not None:
        p_good, belief = np.minimum(p_good, cap), np.minimum(belief, cap)
    slip = repaired_slip_of(post, settings) if final_status == "correct" else None
    lab_labels: list[bool | None]
    reasons: list[str | None]
    if slip is not None:
        # the prefix of steps 0..slip-1 dipped: the error is there or before, and the steps from the
        # first that may hold it on are not labeled good
        lab = labels_from_posterior(
            p_good[: max(slip - 1, 0)].tolist(), settings.confidence, UNDECIDED_UNLOCATED, settings.bad_confidence
        )
        rest = n - len(lab.labels)
        lab_labels = list(lab.labels) + [None] * rest
        reasons = list(lab.reasons) + [UNDECIDED_UNLOCATED] * rest
    else:
        undecided = UNDECIDED_VERDICT if stop == "decided" else stop
        if hidden and (p_good < post.p_good).any():
            undecided = UNDECIDED_UNLOCATED
        lab = labels_from_posterior(p_good.tolist(), settings.confidence, undecided, settings.bad_confidence)
        lab_labels, reasons = list(lab.labels), list(lab.reasons)
    right_answer = final_status != "incorrect"
    first_bad = next((i for i, x in enumerate(lab_labels) if x is False), None)
    if first_bad is not None:
        stands = lone_bad_stands_from(post, lab_labels, first_bad, settings.bad_confidence, right_answer, settings)
        lab_labels[first_bad:stands] = [None] * (stands - first_bad)
        reasons[first_bad:stands] = [UNDECIDED_UNLOCATED] * (stands - first_bad)
        first_bad = stands if stands < n else None
        if first_bad is not None:
            lab_labels[first_bad], reasons[first_bad] = False, None  # the first that holds both ways
    # (the first bad label as it now stands: a wrong answer's may have moved on to a measured prefix)
    unbacked = unmeasured_bad(post.evidence, first_bad) if first_bad is not None else None
    if first_bad is not None and unbacked is not None:
        # no measurement of the first bad step's own prefix: from it on nothing is labeled
        why = UNDECIDED_BUDGET if stop == UNDECIDED_BUDGET else UNDECIDED_UNINFORMATIVE
        lab_labels[first_bad:] = [None] * (n - first_bad)
        reasons[first_bad:] = [why] * (n - first_bad)
    mark_open_interval(lab_labels, reasons, p_good.tolist(), settings.confidence)  # where the error lies
    ann.p_good = [float(p) for p in belief]
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


def lone_bad_stands_from(
    post: Posterior,
    labels: Sequence[bool | None],
    first_bad: int,
    bad_confidence: float,
    right_answer: bool,
    settings: ChangepointSettings,
) -> int:
    """The step from which a solution's bad labels stand (n: none does), its first bad label at
    `first_bad`. Paired with a good label right before it, the first one does. Alone, it must also hold
    under a luck prior without the luck a shard's pooling may have learned from rows that are not luck:
    a solution that reaches the answer about half the time from every prefix before a hard last step
    reads as an early error and a lucky answer, and a shard with such rows teaches its pooled luck a
    mode near 0.5.
    - A right (or ungradable) answer: the default luck prior (little luck, room for a lot), the shard's
      difficulty and overdispersion kept; none stands unless the first does.
    - A wrong answer: the shard's luck prior's main mode alone (`luck_modes`); the labels stand from the
      first step bad under it too (at the latest the last step, which the wrong answer puts the error in
      or before). Where the luck prior has one mode nothing changes.
    Tuning: docs/design/changepoint-tuning.md (`mode_rise`)."""
    n = post.evidence.n
    if first_bad > 0 and labels[first_bad - 1] is True:
        return first_bad
    if right_answer:
        # none: labeled under it already
        priors = [] if post.priors.q is DEFAULT_PRIORS.q else [DEFAULT_PRIORS.q]
    else:
        # none: one mode, the prior it was labeled under
        priors = luck_modes(post.priors.q, settings.mode_rise)
    if not priors:
        return first_bad
    p_bad = np.min([1.0 - Posterior(post.evidence, replace(post.priors, q=q)).p_good for q in priors], axis=0)
    last = first_bad + 1 if right_answer else n  # a right answer's labels stand with its first or not at all
    return next((i for i in range(first_bad, last) if p_bad[i] >= bad_confidence), n)


def luck_modes(q: np.ndarray, rise: float) -> list[np.ndarray]:
    """The luck prior's main mode, alone (`_alone`), where the prior has more than one: the grid points
    reached from its peak while the weights do not rise again (`_mode_span`); none when the main mode
    is all of it (one mode: a broad or flat prior included)."""
    q = np.asarray(q, dtype=float)
    span = _mode_span(q, rise)
    main, rest = np.zeros(len(q)), q.copy()
    main[span], rest[span] = q[span], 0.0
    return [_alone(main)] if rest.sum() > 0 else []


def _mode_span(q: np.ndarray, rise: float) -> slice:
    """The grid points reached from the peak of `q` while the weights do not rise again by more than
    `rise` times from one point to the next."""
    peak = int(np.argmax(q))
    lo, hi = peak, peak
    while lo > 0 and q[lo - 1] <= rise * q[lo]:
        lo -= 1
    while hi < len(q) - 1 and q[hi + 1] <= rise * q[hi]:
        hi += 1
    return slice(lo, hi + 1)


def _alone(part: np.ndarray) -> np.ndarray:
    """A mode's weights as a prior of their own: almost nothing elsewhere (never zero: a log prior)."""
    alone = np.maximum(part, 1e-9)
    return alone / alone.sum()
