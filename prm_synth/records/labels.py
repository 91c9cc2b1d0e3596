"""Labeling rules: turn an annotation's counts into per-step labels and a first error.

- hard: a step is good when at least one rollout from its prefix reached the gold answer (MC > 0),
  the rule of Math-Shepherd, OmegaPRM and Qwen's PRMs.
- majority: a step is good when MC >= 0.5 (most rollouts reach the answer). Still a hard label; the soft
  label of Math-Shepherd is the MC value itself, kept in `mc_values` (`prm-synth export --soft`). This
  rule was called `soft` before; config/upgrade.py moves the old name.
- relative: a step is bad when its MC is significantly below the MC of the prefix before it
  (one-sided binomial test at `significance`), or when its MC is 0. This catches errors that a
  lucky recovery hides from the hard rule.
Labels a search decided ("test", "inferred") are kept as they are under every rule; the rule
applies to measured steps ("mc", "verdict").

Under every rule, a step after the first bad step is never good: its prefix still holds that error
(a later prefix that reaches the answer only recovered by luck), so such a label becomes bad.
Unlabeled steps stay unlabeled, and every one says why (`unlabeled_reasons`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from prm_synth.records.schema import LabelSource, UnlabeledReason

# Why a step has no label (schema.UnlabeledReason says what each means).
AFTER_ERROR: UnlabeledReason = "after_error"
UNDECIDED_BUDGET: UnlabeledReason = "undecided_budget"
UNDECIDED_UNINFORMATIVE: UnlabeledReason = "undecided_uninformative"
UNDECIDED_VERDICT: UnlabeledReason = "undecided_verdict"
UNDECIDED_UNLOCATED: UnlabeledReason = "undecided_unlocated"
TOKEN_BUDGET: UnlabeledReason = "token_budget"
BELOW_TARGET: UnlabeledReason = "below_target"  # consensus kept the row without this label (judge/consensus.py)
TRUNCATED_THINKING: UnlabeledReason = "truncated_thinking"


@dataclass(frozen=True)
class StepLabels:
    labels: list[bool | None]
    reasons: list[UnlabeledReason | None]  # why a step is unlabeled (None where labeled)


def first_bad_step(p_good: Sequence[float], confidence: float, bad_confidence: float | None = None) -> int | None:
    """The step labeled bad (its prefix holds the first error), or None. A step whose P(bad) reaches
    `bad_confidence` (default: confidence); or, where the step before it is labeled good, one whose
    P(bad) reaches `confidence`: the pair pins the first error between them, and the good label
    before it already rules out the early placements a lone bad label at `confidence` gets wrong."""
    bad_confidence = confidence if bad_confidence is None else bad_confidence
    for i, p in enumerate(p_good):
        if 1.0 - p >= bad_confidence or (1.0 - p >= confidence and i > 0 and p_good[i - 1] >= confidence):
            return i
    return None


def labels_from_posterior(
    p_good: Sequence[float], confidence: float, undecided: UnlabeledReason, bad_confidence: float | None = None
) -> StepLabels:
    """Good where P(still correct) >= confidence before the first bad step (`first_bad_step`); steps
    after it are unlabeled (they hold that error); the rest undecided."""
    first_bad = first_bad_step(p_good, confidence, bad_confidence)
    labels: list[bool | None] = []
    reasons: list[UnlabeledReason | None] = []
    for i, p in enumerate(p_good):
        if first_bad is not None and i > first_bad:
            labels.append(None)
            reasons.append(AFTER_ERROR)
        elif i == first_bad:
            labels.append(False)
            reasons.append(None)
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


@dataclass(frozen=True)
class Labels:
    mc_values: list[float | None]
    labels: list[bool | None]
    first_error: int


def binomial_cdf(x: int, n: int, p: float) -> float:
    """P(X <= x) for X ~ Binomial(n, p)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if x >= n else 0.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(0, x + 1)))


class MeasuredSteps(Protocol):
    """What a rule reads of an annotation (annotate/annotation.py's `Annotation`): each step's rollout
    counts, where its label came from, and the labels a search decided."""

    mc_correct: list[int]
    mc_total: list[int]
    label_source: list[LabelSource]
    decided: dict[int, bool]


def apply_rule(ann: MeasuredSteps, rule: str, significance: float = 0.05) -> Labels:
    mc_values = [c / t if t else None for c, t in zip(ann.mc_correct, ann.mc_total, strict=True)]
    labels: list[bool | None] = []
    prev: float | None = None  # MC of the previous measured prefix
    for i, source in enumerate(ann.label_source):
        value = mc_values[i]
        if source in ("test", "inferred") or (source != "none" and i in ann.decided):
            labels.append(ann.decided[i])
        elif value is None or source == "none":
            labels.append(None)
        elif rule == "hard":
            labels.append(value > 0)
        elif rule == "majority":
            labels.append(value >= 0.5)
        elif rule == "relative":
            dropped = (
                prev is not None
                and ann.mc_total[i] > 1
                and binomial_cdf(ann.mc_correct[i], ann.mc_total[i], prev) < significance
            )
            labels.append(value > 0 and not dropped)
        else:
            raise ValueError(f"unknown labeling rule {rule!r}")
        if value is not None and source == "mc":
            prev = value
    first_error = next((i for i, lab in enumerate(labels) if lab is False), -1)
    if first_error >= 0:  # after the first error every later prefix holds it
        labels = labels[:first_error] + [None if lab is None else False for lab in labels[first_error:]]
    return Labels(mc_values, labels, first_error)


def unlabeled_reasons(
    labels: Sequence[bool | None], first_error: int, given: Sequence[UnlabeledReason | None] | None
) -> list[UnlabeledReason | None]:
    """Why each unlabeled step has no label (None where labeled), never None where unlabeled.

    The annotator's own reason where it gave one (the changepoint search does); else `after_error`
    past the first bad step; else `undecided_verdict`: no gradable rollout measured the step (per-step
    MC of an ungradable solution's last step, or rollouts that were all ungradable)."""
    reasons: list[UnlabeledReason | None] = []
    for i, label in enumerate(labels):
        if label is not None:
            reasons.append(None)
        elif given is not None and given[i] is not None:
            reasons.append(given[i])
        else:
            reasons.append(AFTER_ERROR if 0 <= first_error < i else UNDECIDED_VERDICT)
    return reasons
