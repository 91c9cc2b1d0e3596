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
from prm_synth.judge.estimate import hidden_error_rate, step_votes, wilson
from prm_synth.schema import LabeledRecord

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
    fewer than `class_min_votes` votes measured it. With that many canary votes of the class, its recall
    and misses are the canaries' (a planted error's first step is known); on right answers the share of
    rows hiding an error and the false alarms are then fitted to the class's votes (judge.estimate)."""
    least = max(config.class_min_votes, 1)
    enough_errors = counts.pinned_votes >= least
    enough_clean = counts.clean_votes >= least
    measured = estimated_accuracy(counts, config)
    prior = estimated_accuracy(JudgeCounts(), config)
    recall, miss = (measured.recall, measured.miss) if enough_errors else (prior.recall, prior.miss)
    clean = measured.clean if enough_clean else prior.clean
    dependence = (canaries.agreement_beyond_chance() or 0.0) if canaries else 0.0
    c = canaries.of(answer) if canaries else None
    if c is None or c["votes"] < least:
        return ClassAccuracy(
            JudgeAccuracy(recall, clean, min(miss, 1.0 - recall), dependence),
            "measured" if enough_errors else "prior",
            "measured" if enough_clean else "prior",
        )

    def rates(named: float, missed: float, votes: float) -> JudgeAccuracy:
        recall = min(0.99, max(0.01, named / votes))
        miss = min(1.0 - recall, max(0.01, missed / votes))
        if answer != "right":
            return JudgeAccuracy(recall, clean, miss, dependence)
        hidden, alarm = hidden_error_rate(step_votes(rows), 1.0 - miss)
        return JudgeAccuracy(recall, min(0.99, max(0.01, 1.0 - alarm)), miss, dependence, hidden)

    votes = c["votes"]
    lo_miss, hi_miss = wilson(c["missed"], votes)
    lo_named, hi_named = wilson(c["named"], votes)
    point = rates(c["named"], c["missed"], votes)
    low = rates(lo_named * votes, hi_miss * votes, votes)
    high = rates(hi_named * votes, lo_miss * votes, votes)
    if answer == "right":  # the share of hidden errors is itself counted on the class's rows
        n = len(step_votes(rows))
        low = replace(low, hidden=max(low.hidden, wilson(point.hidden * n, n)[1] if n else 1.0))
        high = replace(high, hidden=min(high.hidden, wilson(point.hidden * n, n)[0] if n else 0.0))
    return ClassAccuracy(point, "canaries", "votes" if answer == "right" else clean_from(enough_clean), low, high)


def clean_from(enough: bool) -> Literal["measured", "prior"]:
    return "measured" if enough else "prior"


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
