"""What the run estimates about its own labels: the judge's rates per answer class as the soft posterior
reads them (from canaries where the shard has them), how often a right answer hides an error, and how
precise the kept labels are (`estimated_precision`).

Rates (`rates_by_class`): the judge's recall and misses on each answer class come from the shard's
canaries (shard/canaries.py: a planted error's first step is known), shrunk towards the pinned-row rates
(accuracy.py) by `consensus.prior_votes`; without canaries of the class, they are accuracy.py's. Vote
dependence comes from the canaries too (CanaryStats.miss_dependence).

Late placement: a slip the policy repaired leaves the rollouts' change-point after the true first error;
how often (beyond the rollouts' own doubt) is measured on the class's canaries, which the policy itself
continues from the planted slip (CanaryStats.late_rate), and with the shard's rate of fresh errors per
step (how often a slip is there to repair: posterior.slip_hazard) enters every posterior as
posterior.late_prior.

Hidden errors (`fit_hidden`): on right-answer rows the rollouts are blind (a repaired slip still reaches
the answer), so the share of those rows that hold an error, and the judge's clean rate there, are fitted
by EM to the class's votes under the posterior's own model (posterior.py) with the recall fixed from the
canaries. Which step two votes name matters (false alarms scatter, a real error draws votes to one step),
so the two rates are told apart by more than counts. A stopped-early row's votes are a likelihood like
any other: the stopping rule depends on the votes only.

Precision (`label_expectations`): for a kept row whose labels follow first error k under the posterior
(index n: none), the good labels before k are right when the true first error is later, the bad ones
when it is at or before them; the expected count of right labels and its variance over the posterior (a
row's labels stand or fall together: one missed error makes every good label after it wrong) are summed
over the kept rows (ConsensusStats.estimate). The interval adds that spread to the point estimates under
the judge's rates at both ends of their 95% intervals (canary_stats.precision_report).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from prm_synth.config import PINNED, ConsensusConfig
from prm_synth.judge.accuracy import (
    ANSWER_CLASSES,
    AnswerClass,
    ClassAccuracy,
    JudgeAccuracy,
    JudgeCounts,
    answer_class,
    estimated_accuracy,
    measure_by_class,
)
from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.judge.posterior import first_error_prior, late_prior, posterior, slip_hazard
from prm_synth.records import LabeledRecord
from prm_synth.records.canaries import CanaryStats, Z, wilson

# The target is held one standard error towards the pessimistic end of the judge's measured rates: a
# shard's rates are measured on few rows, and keeping at the point estimate keeps the rows a too-low
# estimate of hidden errors lets through (chosen on seeds 0-3 of benchmarks/label_precision.py, with
# target.POOL_Z: z 1 and 2 keep 49.5 and 47.0 rows of the repair world at good precision .978 and .979).
CAUTIOUS_Z = 1.0


def step_votes(records: Sequence[LabeledRecord]) -> list[tuple[int, int]]:
    """Per row with readable votes: (votes naming a step, readable votes)."""
    out = []
    for r in records:
        votes = [v for v in r.judge_votes if v != UNPARSEABLE]
        if votes:
            out.append((sum(1 for v in votes if v != -1), len(votes)))
    return out


def fit_hidden(
    rows: Sequence[LabeledRecord],
    rates: JudgeAccuracy,
    iterations: int = 60,
    doubt: Mapping[str, tuple[float, float]] | None = None,
) -> tuple[float, float]:
    """(share of right-answer rows hiding an error, the judge's clean rate), fitted by EM to the rows'
    votes under the posterior's own model (consensus.posterior): each row's prior is the rollouts'
    (1 - share) mixed with a hidden error (share, spread by `rates.hidden_shape`), its votes read under
    `rates` (recall and misses from canaries). Which step two votes name matters: false alarms scatter,
    a real error draws votes to one step, so the two rates are told apart by more than counts."""
    voted = [r for r in rows if any(v != UNPARSEABLE for v in r.judge_votes) and r.labels]
    if not voted:
        return 0.0, rates.clean
    share, clean = 0.2, rates.clean
    doubt = doubt or {}  # rows graded against a pseudo-gold: their own doubt explains part of what is hidden
    for _ in range(iterations):
        current = replace(rates, hidden=share, clean=clean)
        hidden_mass = clean_votes = clean_minus = 0.0
        for r in voted:
            n = len(r.labels)
            q, right = doubt.get(r.id, (0.0, 0.0))
            post = posterior(r, replace(current, doubt=q, doubt_clean=right))
            rollout = late_prior(
                first_error_prior(r), current.late, current.hazard
            )  # as posterior() reads the rollouts
            spread = current.hidden_prior(n)
            # P(hidden component | votes) = posterior mass the hidden part of the prior explains
            mixed = [(1 - share) * p + share * h for p, h in zip(rollout, [*spread, 0.0], strict=True)]
            if q > 0.0:
                mixed = [
                    (1 - q) * m + q * d for m, d in zip(mixed, [*((1 - right) * h for h in spread), right], strict=True)
                ]
            own = [(1 - q) * share * h for h in spread]
            hidden_mass += sum(post[k] * own[k] / mixed[k] for k in range(n) if mixed[k] > 0)
            votes = [v for v in r.judge_votes if v != UNPARSEABLE]
            clean_votes += post[n] * len(votes)
            clean_minus += post[n] * votes.count(-1)
        share = min(0.95, hidden_mass / len(voted))
        clean = min(0.99, max(0.01, (clean_minus + 1.0) / (clean_votes + 2.0)))
    return share, clean


def label_expectations(
    post: Sequence[float], first_error: int, bad_steps: Sequence[int] | None = None
) -> dict[str, float]:
    """For one kept row whose labels follow `first_error` (-1: none): its good labels (the steps before
    it) and bad labels (`bad_steps`: the ones consensus.follow labels bad, it and the labeled steps after
    it; None: it and every step after), how many of each the posterior expects right, and the variance of
    that count over the posterior (`expectations`)."""
    n = len(post) - 1
    end = n if first_error == -1 else first_error
    bad = set(range(end, n) if bad_steps is None else (i for i in bad_steps if end <= i < n))
    return expectations(post, [True if i < end else False if i in bad else None for i in range(n)])


def expectations(post: Sequence[float], labels: Sequence[bool | None]) -> dict[str, float]:
    """For one kept row's labels (None: unlabeled), how many good and bad labels it holds, how many of
    each the posterior `post` over the first error (index n: none) expects right (a good label at step i
    is right when the true first error is after i, a bad one when it is at or before i), and the variance
    of that count over the posterior: a row's labels stand or fall together (one missed error makes every
    good label after it wrong), so they are never counted as independent draws."""
    n = len(post) - 1
    good = [i for i, label in enumerate(labels) if label is True]
    bad = [i for i, label in enumerate(labels) if label is False]
    out: dict[str, float] = {"good_labels": float(len(good)), "bad_labels": float(len(bad))}
    for kind, steps, right in (
        ("good", good, lambda k, i: i < k),
        ("bad", bad, lambda k, i: k <= i),
    ):
        counts = [sum(1 for i in steps if right(k, i)) for k in range(n + 1)]
        mean = sum(p * c for p, c in zip(post, counts, strict=True))
        out[f"{kind}_expected"] = mean
        out[f"{kind}_var"] = max(0.0, sum(p * c * c for p, c in zip(post, counts, strict=True)) - mean * mean)
        # log P(every label of the kind right): what target.pool_holds reads for a pool of few labels
        all_right = sum(p for p, c in zip(post, counts, strict=True) if c == len(steps))
        out[f"{kind}_log_all_right"] = math.log(max(all_right, 1e-300))
    return out


def sure_labels(post: Sequence[float], labeled: Sequence[bool | None], level: float) -> list[bool | None]:
    """The labels a row keeps where its whole-row first error is not sure enough: each step good where the
    posterior puts its prefix correct at `level` or more (P(first error after it)), bad where it puts the
    first error at or before it at `level` or more and the step was labeled (`labeled`: the labels as
    measured; a step after an error the rollouts left unlabeled stays unlabeled), the rest unlabeled."""
    n = len(post) - 1
    out: list[bool | None] = []
    later = post[n] + sum(post[:n])  # P(first error >= 0) + P(none): 1 up to rounding
    for i in range(n):
        later -= post[i]  # P(first error after step i)
        if later >= level:
            out.append(True)
        elif 1.0 - later >= level and (labeled[i] is not None or not any(x is False for x in out)):
            out.append(False)
        else:
            out.append(None)
    return out


def expected_precision(post: Sequence[float], first_error: int) -> float:
    """The share of a row's labels that are right, expected under the posterior `post`, when its labels
    follow `first_error` (steps before it good, it and the steps after bad; -1: every step good)."""
    n = len(post) - 1
    end = n if first_error == -1 else first_error
    later, right = 1.0, 0.0
    for i in range(n):
        later -= post[i]  # P(first error after step i)
        right += later if i < end else 1.0 - later
    return min(1.0, max(0.0, right / n)) if n else 1.0


def bad_steps_after(record: LabeledRecord, first_error: int) -> list[int]:
    """The steps consensus.follow labels bad when a row's labels follow `first_error` (-1: none): it, and
    the steps after it that were labeled (unlabeled ones after an error stay unlabeled)."""
    if first_error == -1:
        return []
    return [first_error, *(i for i in range(first_error + 1, len(record.labels)) if record.labels[i] is not None)]


def estimate_kept(record: LabeledRecord, labels: Sequence[bool | None], accuracy: ClassAccuracy) -> dict[str, float]:
    """One kept row's expected right labels (`labels`: the labels it is kept with; overall and under its
    answer class's key), and the same at the pessimistic and the optimistic end of the judge's rates
    (`low`, `high`)."""
    out = expectations(posterior(record, accuracy.accuracy), labels)
    out = {k: v for k, v in out.items() if not k.endswith("_log_all_right")}  # hold_to_target's, not the run's
    for end, rates in (("low", accuracy.low), ("high", accuracy.high)):
        ends = expectations(posterior(record, rates or accuracy.accuracy), labels)
        out |= {f"{kind}_{end}": ends[f"{kind}_expected"] for kind in ("good", "bad")}
        if end == "low":  # the spread of the right count where the judge is at its worst (precision_report)
            out |= {f"{kind}_var_low": ends[f"{kind}_var"] for kind in ("good", "bad")}
    prefix = f"{answer_class(record)}:"
    return out | {prefix + k: v for k, v in out.items()}


def followed_labels(record: LabeledRecord, first_error: int) -> list[bool | None]:
    """The labels consensus.follow gives a row whose labels follow `first_error` (-1: none)."""
    end = len(record.labels) if first_error == -1 else first_error
    bad = set(bad_steps_after(record, first_error))
    return [True if i < end else False if i in bad else None for i in range(len(record.labels))]


def canary_accuracy(
    counts: JudgeCounts,
    config: ConsensusConfig,
    canaries: CanaryStats | None = None,
    answer: AnswerClass = "wrong",
    rows: Sequence[LabeledRecord] = (),
    doubt: Mapping[str, tuple[float, float]] | None = None,
    hazard: float = 0.0,
) -> ClassAccuracy:
    """The class's shrunk measured rates (accuracy.estimated_accuracy), each replaced by the prior where
    fewer than `class_min_votes` votes measured it. Where the shard's canaries hold votes of the class,
    its recall and misses are theirs (a planted error's first step is known), shrunk towards those rates
    by `prior_votes`. On right answers (`rows`: the class's rows), the share of rows hiding an error and
    the false alarms are fitted to the class's votes under that recall (`fit_hidden`)."""
    least = max(config.class_min_votes, 1)
    enough_errors = counts.pinned_votes >= least
    enough_clean = counts.clean_votes >= least
    measured = estimated_accuracy(counts, config)
    prior = estimated_accuracy(JudgeCounts(), config)
    recall, miss = (measured.recall, measured.miss) if enough_errors else (prior.recall, prior.miss)
    clean = measured.clean if enough_clean else prior.clean
    dependence = canaries.miss_dependence() if canaries else 0.0
    late = canaries.late_rate(answer) if canaries else 0.0  # how often the rollouts place an error late
    c = canaries.of(answer) if canaries else None
    from_canaries = c is not None and c["votes"] > 0
    w = config.prior_votes

    def rates(named: float, missed: float, votes: float) -> JudgeAccuracy:
        r = min(0.99, max(0.01, (named + w * recall) / (votes + w)))
        m = min(1.0 - r, max(0.01, (missed + w * miss) / (votes + w)))
        if answer != "right" or not rows:
            return JudgeAccuracy(r, clean, m, dependence, late=late, hazard=hazard)
        base = JudgeAccuracy(r, clean, m, dependence, 0.0, vote_shape(rows), late=late, hazard=hazard)
        hidden, fitted_clean = fit_hidden(rows, base, doubt=doubt)
        return replace(base, hidden=hidden, clean=fitted_clean)

    named, missed, votes = (c["named"], c["missed"], c["votes"]) if c and from_canaries else (0, 0, 0)
    point = rates(named, missed, votes)

    def ends(z: float) -> tuple[JudgeAccuracy, JudgeAccuracy]:
        """The rates at the pessimistic and the optimistic end of their `z` intervals."""
        low, high = point, point
        if from_canaries:
            lo_miss, hi_miss = wilson(missed, votes, z)
            lo_named, hi_named = wilson(named, votes, z)
            low = rates(lo_named * votes, hi_miss * votes, votes)
            high = rates(hi_named * votes, lo_miss * votes, votes)
        if answer == "right" and rows:  # the share of hidden errors is itself counted on the class's rows
            n = len(step_votes(rows))
            lo_hidden, hi_hidden = wilson(point.hidden * n, n, z)
            low, high = (
                replace(low, hidden=max(low.hidden, hi_hidden)),
                replace(high, hidden=min(high.hidden, lo_hidden)),
            )
        return low, high

    (low, high), (cautious, _) = ends(Z), ends(CAUTIOUS_Z)
    # the interval's pessimistic end also reads the votes as dependent as the canaries' rows' votes agree
    # beyond chance (a judge that repeats one reading on every sample gives fewer independent votes than
    # it seems; miss_dependence sees only its misses): where it exceeds the point's dependence
    if canaries and (agreement := canaries.agreement_beyond_chance()) and agreement > low.dependence:
        low = replace(low, dependence=agreement)
    errors_from: Literal["measured", "prior", "canaries"] = (
        "canaries" if from_canaries else "measured" if enough_errors else "prior"
    )
    clean_from: Literal["measured", "prior", "votes"] = (
        "votes" if answer == "right" and rows else "measured" if enough_clean else "prior"
    )
    return ClassAccuracy(point, errors_from, clean_from, low, high, cautious)


def vote_shape(rows: Sequence[LabeledRecord], parts: int = 5) -> tuple[float, ...]:
    """Where the judge's step votes fall in the rows (counts per equal part of a solution, one added to
    each): where the errors the rollouts cannot see are likeliest."""
    counts = [1.0] * parts
    for r in rows:
        n = len(r.steps)
        for v in r.judge_votes:
            if 0 <= v < n:
                counts[min(parts - 1, v * parts // n)] += 1
    return tuple(counts)


def rates_by_class(
    records: Sequence[LabeledRecord],
    config: ConsensusConfig,
    pinned: float = PINNED,
    canaries: CanaryStats | None = None,
    doubt: Mapping[str, tuple[float, float]] | None = None,
) -> dict[AnswerClass, ClassAccuracy]:
    """Each answer class's rates as soft reads them: measured on `records` (one shard's rows, pinned at
    `pinned`) and on the shard's canaries; `doubt`: rows graded against a pseudo-gold (grading/majority.py)."""
    counts = measure_by_class(records, pinned)
    hazard = slip_hazard(records)  # how often a slip is there to be repaired (posterior.late_prior)
    return {
        c: canary_accuracy(counts[c], config, canaries, c, [r for r in records if answer_class(r) == c], doubt, hazard)
        for c in ANSWER_CLASSES
    }
