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
from dataclasses import replace
from typing import TYPE_CHECKING

from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.schema import LabeledRecord

if TYPE_CHECKING:
    from prm_synth.config.sections import ConsensusConfig
    from prm_synth.judge.accuracy import ClassAccuracy
    from prm_synth.judge.consensus import Decision, JudgeAccuracy

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
    """For one kept row whose labels follow `first_error` (-1: none): its good labels (the steps before
    it) and bad labels (it and the steps after), how many of each the posterior expects right, and the
    variance of that count over the posterior: a row's labels stand or fall together (one missed error
    makes every good label after it wrong), so they are never counted as independent draws."""
    n = len(post) - 1
    end = n if first_error == -1 else first_error
    out: dict[str, float] = {"good_labels": float(end), "bad_labels": float(n - end)}
    for kind, right in (
        ("good", lambda k: min(k, end)),  # good labels before the true first error k (n: none) are right
        ("bad", lambda k: n - max(end, k) if k < n else 0),  # bad labels at or after it are right
    ):
        mean = sum(p * right(k) for k, p in enumerate(post))
        out[f"{kind}_expected"] = mean
        out[f"{kind}_var"] = max(0.0, sum(p * right(k) ** 2 for k, p in enumerate(post)) - mean * mean)
    return out


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


def hold_to_target(
    records: Sequence[LabeledRecord],
    decisions: Sequence[Decision],
    rates: Sequence[ClassAccuracy],
    config: ConsensusConfig,
) -> list[Decision]:
    """`consensus.target_precision`: the rows soft would keep, taken from the surest down (by the expected
    precision of their labels), each kept only while the kept good labels and the kept bad labels each
    stay at the target expected precision; the others rejected with their reason. The target holds
    for the shard's kept labels together (and so for the run's), not row by row: a row whose labels
    are 0.95 sure may be kept beside surer ones, never below `confidence`."""
    from prm_synth.judge.consensus import Decision, expected_precision, posterior

    out = list(decisions)
    candidates = []
    for i, (record, decision) in enumerate(zip(records, decisions, strict=True)):
        if decision.keep and decision.first_error is not None:
            post = posterior(record, rates[i].cautious or rates[i].accuracy)  # held towards the pessimistic end
            candidates.append((-expected_precision(post, decision.first_error), record.id, i, post))
    sums = dict.fromkeys(("good_labels", "good_expected", "bad_labels", "bad_expected"), 0.0)
    for surest, _, i, post in sorted(candidates):
        first_error = decisions[i].first_error
        assert first_error is not None
        e = label_expectations(post, first_error)
        after = {k: sums[k] + e[k] for k in sums}
        ok = all(
            after[f"{kind}_labels"] == 0
            or after[f"{kind}_expected"] >= config.target_precision * after[f"{kind}_labels"]
            for kind in ("good", "bad")
        )
        if ok:
            sums = after
            continue
        detail = (
            f"its labels' expected precision {-surest:.3f} would take the shard's kept labels below "
            f"consensus.target_precision {config.target_precision}"
        )
        out[i] = Decision(False, "low_confidence", detail, prefix_confidence=decisions[i].prefix_confidence)
    return out


def fit_hidden(rows: Sequence[LabeledRecord], rates: JudgeAccuracy, iterations: int = 60) -> tuple[float, float]:
    """(share of right-answer rows hiding an error, the judge's clean rate), fitted by EM to the rows'
    votes under the posterior's own model (consensus.posterior): each row's prior is the rollouts'
    (1 - share) mixed with a hidden error (share, spread by `rates.hidden_shape`), its votes read under
    `rates` (recall and misses from canaries). Which step two votes name matters: false alarms scatter,
    a real error draws votes to one step, so the two rates are told apart by more than counts."""
    from prm_synth.judge.consensus import first_error_prior, posterior

    voted = [r for r in rows if any(v != UNPARSEABLE for v in r.judge_votes) and r.labels]
    if not voted:
        return 0.0, rates.clean
    share, clean = 0.2, rates.clean
    for _ in range(iterations):
        current = replace(rates, hidden=share, clean=clean)
        hidden_mass = clean_votes = clean_minus = 0.0
        for r in voted:
            n = len(r.labels)
            post = posterior(r, current)
            rollout = first_error_prior(r)
            spread = current.hidden_prior(n)
            # P(hidden component | votes) = posterior mass the hidden part of the prior explains
            mixed = [(1 - share) * p + share * q for p, q in zip(rollout, [*spread, 0.0], strict=True)]
            hidden_mass += sum(post[k] * share * spread[k] / mixed[k] for k in range(n) if mixed[k] > 0)
            votes = [v for v in r.judge_votes if v != UNPARSEABLE]
            clean_votes += post[n] * len(votes)
            clean_minus += post[n] * votes.count(-1)
        share = min(0.95, hidden_mass / len(voted))
        clean = min(0.99, max(0.01, (clean_minus + 1.0) / (clean_votes + 2.0)))
    return share, clean
