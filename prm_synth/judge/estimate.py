"""What the run estimates about its own labels: how often a right answer hides an error, and how precise
the kept labels are (`estimated_precision`).

Hidden errors: on right-answer rows the rollouts are blind (a repaired slip still reaches the answer), so
the share of those rows that hold an error is estimated from the judge's votes on them, read under the
judge's recall measured on canaries: a row's step votes (not -1) are a binomial draw at the judge's
detection rate (1 - miss) where it holds an error and at its false-alarm rate where it is clean, and a
two-part mixture fitted by EM gives both the share and the false-alarm rate (the rows the rollouts found
clean cannot measure false alarms: some of them hide an error). A stopped-early row's votes are a
likelihood like any other (the stopping rule depends on the votes only).

Precision: for a kept row whose labels follow first error k under the posterior `post` (index n: none),
step i < k labeled good is right with P(first error > i), step i >= k labeled bad with P(first error <= i);
the sums over kept rows are the expected right labels. Its interval adds the spread of that sum (each
label's variance) to the point estimates under the judge's rates at both ends of their intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.schema import LabeledRecord

if TYPE_CHECKING:
    from prm_synth.judge.accuracy import ClassAccuracy

Z = 1.96  # the intervals' normal quantile (95%)


def wilson(hits: float, total: float, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval of a proportion (0..1 where nothing was counted)."""
    if total <= 0:
        return 0.0, 1.0
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def step_votes(records: Sequence[LabeledRecord]) -> list[tuple[int, int]]:
    """Per row with readable votes: (votes naming a step, readable votes)."""
    out = []
    for r in records:
        votes = [v for v in r.judge_votes if v != UNPARSEABLE]
        if votes:
            out.append((sum(1 for v in votes if v != -1), len(votes)))
    return out


def hidden_error_rate(rows: Sequence[tuple[int, int]], detect: float, iterations: int = 200) -> tuple[float, float]:
    """(share of rows holding an error, false-alarm rate per vote), fitted by EM to rows' (step votes,
    votes) with the judge's detection rate per vote on an error fixed at `detect` (from canaries)."""
    if not rows:
        return 0.0, 0.0
    share, alarm = 0.2, min(0.1, detect / 2)
    for _ in range(iterations):
        weights = []
        for k, m in rows:
            a = share * detect**k * (1 - detect) ** (m - k)
            b = (1 - share) * alarm**k * (1 - alarm) ** (m - k)
            weights.append(a / (a + b) if a + b > 0 else 0.0)
        share = sum(weights) / len(rows)
        clean_votes = sum((1 - w) * m for w, (_, m) in zip(weights, rows, strict=True))
        clean_steps = sum((1 - w) * k for w, (k, _) in zip(weights, rows, strict=True))
        alarm = min(detect * 0.9, clean_steps / clean_votes) if clean_votes > 0 else alarm
    return min(0.95, max(0.0, share)), max(0.0, alarm)


def label_expectations(post: Sequence[float], first_error: int) -> dict[str, float]:
    """For one kept row whose labels follow `first_error` (-1: none): its good and bad labels, how many
    of each the posterior expects right, and that count's variance (labels as independent draws)."""
    n = len(post) - 1
    end = n if first_error == -1 else first_error
    later = [sum(post[i + 1 :]) for i in range(n)]  # P(first error after step i)
    good = [min(1.0, max(0.0, later[i])) for i in range(end)]
    bad = [min(1.0, max(0.0, 1.0 - later[i])) for i in range(end, n)] if first_error != -1 else []
    return {
        "good_labels": float(len(good)),
        "good_expected": sum(good),
        "good_var": sum(p * (1 - p) for p in good),
        "bad_labels": float(len(bad)),
        "bad_expected": sum(bad),
        "bad_var": sum(p * (1 - p) for p in bad),
    }


def estimate_kept(record: LabeledRecord, first_error: int, accuracy: ClassAccuracy) -> dict[str, float]:
    """One kept row's expected right labels (overall and under its answer class's key), and the same at
    the pessimistic and the optimistic end of the judge's rates (`low`, `high`)."""
    from prm_synth.judge.accuracy import answer_class
    from prm_synth.judge.consensus import posterior

    out = label_expectations(posterior(record, accuracy.accuracy), first_error)
    for end, rates in (("low", accuracy.low), ("high", accuracy.high)):
        ends = label_expectations(posterior(record, rates or accuracy.accuracy), first_error)
        out |= {f"{kind}_{end}": ends[f"{kind}_expected"] for kind in ("good", "bad")}
    prefix = f"{answer_class(record)}:"
    return out | {prefix + k: v for k, v in out.items()}
