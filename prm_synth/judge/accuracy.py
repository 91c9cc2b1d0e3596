"""The judge's accuracy per answer class: measured on right-answer and on wrong-answer rows apart.

Real judges miss far more errors in solutions whose final answer is right (ProcessBench), and those are
the rows the rollouts are blind to. One figure measured on the rows the rollouts pinned (nearly all
wrong-answer rows) would overrate the judge exactly where it decides most. So each class's rates are
measured on its own pinned rows (consensus.pinned_first_error: a first error the rollouts pinned, or a
row they found clean; a right answer whose test found a slip counts for the right-answer class), and a
class with fewer than `class_min_votes` readable votes there reads the stated prior (`prior_accuracy`
named, half the rest missed) instead of a figure it has no data for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal

from prm_synth.canary_stats import CanaryStats
from prm_synth.config.sections import ConsensusConfig
from prm_synth.judge.consensus import JudgeAccuracy, JudgeCounts, estimated_accuracy, measure_judge
from prm_synth.judge.estimate import Z, fit_hidden, step_votes, wilson
from prm_synth.schema import LabeledRecord

# The target is held one standard error towards the pessimistic end of the judge's measured rates: a
# shard's rates are measured on few rows, and keeping at the point estimate keeps the rows a too-low
# estimate of hidden errors lets through (chosen on seeds 0-2 of benchmarks/label_precision.py).
CAUTIOUS_Z = 1.0

AnswerClass = Literal["right", "wrong"]
ANSWER_CLASSES: tuple[AnswerClass, ...] = ("right", "wrong")


def answer_class(record: LabeledRecord) -> AnswerClass:
    """ "right" for a row whose final answer was graded correct; every other row (wrong, ungraded) "wrong"."""
    return "right" if record.final_correct is True else "wrong"


def measure_by_class(records: Sequence[LabeledRecord]) -> dict[AnswerClass, JudgeCounts]:
    """The judge's readable votes on the pinned rows of each answer class, and how they fell."""
    return {c: measure_judge([r for r in records if answer_class(r) == c]) for c in ANSWER_CLASSES}


@dataclass(frozen=True)
class ClassAccuracy:
    """One class's rates as the soft posterior reads them, and where each came from."""

    accuracy: JudgeAccuracy
    errors_from: Literal["measured", "prior", "canaries"]  # recall and miss: canaries, pinned errors or prior
    clean_from: Literal["measured", "prior", "votes"]  # clean: rows found clean, the prior, or the votes' mixture
    # the same rates at the pessimistic and the optimistic end of their intervals (estimated_precision)
    low: JudgeAccuracy | None = None
    high: JudgeAccuracy | None = None
    # one standard error towards the pessimistic end: what `consensus.target_precision` is held at
    cautious: JudgeAccuracy | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self.accuracy) | {"errors_from": self.errors_from, "clean_from": self.clean_from}


def class_accuracy(
    counts: JudgeCounts,
    config: ConsensusConfig,
    canaries: CanaryStats | None = None,
    answer: AnswerClass = "wrong",
    rows: Sequence[LabeledRecord] = (),
) -> ClassAccuracy:
    """The class's shrunk measured rates (consensus.estimated_accuracy), each replaced by the prior where
    fewer than `class_min_votes` votes measured it. Where the shard's canaries hold votes of the class,
    its recall and misses are theirs (a planted error's first step is known), shrunk towards those rates
    by `prior_votes`. On right answers (`rows`: the class's rows), the share of rows hiding an error and
    the false alarms are fitted to the class's votes under that recall (judge.estimate)."""
    least = max(config.class_min_votes, 1)
    enough_errors = counts.pinned_votes >= least
    enough_clean = counts.clean_votes >= least
    measured = estimated_accuracy(counts, config)
    prior = estimated_accuracy(JudgeCounts(), config)
    recall, miss = (measured.recall, measured.miss) if enough_errors else (prior.recall, prior.miss)
    clean = measured.clean if enough_clean else prior.clean
    dependence = canaries.miss_dependence() if canaries else 0.0
    c = canaries.of(answer) if canaries else None
    from_canaries = c is not None and c["votes"] > 0
    w = config.prior_votes

    def rates(named: float, missed: float, votes: float) -> JudgeAccuracy:
        r = min(0.99, max(0.01, (named + w * recall) / (votes + w)))
        m = min(1.0 - r, max(0.01, (missed + w * miss) / (votes + w)))
        if answer != "right" or not rows:
            return JudgeAccuracy(r, clean, m, dependence)
        base = JudgeAccuracy(r, clean, m, dependence, 0.0, vote_shape(rows))
        hidden, fitted_clean = fit_hidden(rows, base)
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


def accuracy_by_class(
    records: Sequence[LabeledRecord], config: ConsensusConfig, canaries: CanaryStats | None = None
) -> dict[AnswerClass, ClassAccuracy]:
    """Each answer class's accuracy, measured on `records` (one shard's rows) and its canaries."""
    counts = measure_by_class(records)
    return {
        c: class_accuracy(counts[c], config, canaries, c, [r for r in records if answer_class(r) == c])
        for c in ANSWER_CLASSES
    }


def counts_dict(counts: JudgeCounts, accuracy: ClassAccuracy) -> dict[str, int]:
    """A class's counts as ConsensusStats.by_answer holds them (summed key by key over shards): the votes,
    and in how many shards its errors (and its clean rows) read the prior."""
    return asdict(counts) | {
        "shards": 1,
        "errors_on_prior": int(accuracy.errors_from == "prior"),
        "errors_on_canaries": int(accuracy.errors_from == "canaries"),
        "clean_on_prior": int(accuracy.clean_from == "prior"),
    }
