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
from dataclasses import asdict, dataclass
from typing import Literal

from prm_synth.config.sections import ConsensusConfig
from prm_synth.judge.consensus import JudgeAccuracy, JudgeCounts, estimated_accuracy, measure_judge
from prm_synth.schema import LabeledRecord

AnswerClass = Literal["right", "wrong"]
ANSWER_CLASSES: tuple[AnswerClass, ...] = ("right", "wrong")


def answer_class(record: LabeledRecord) -> AnswerClass:
    """"right" for a row whose final answer was graded correct; every other row (wrong, ungraded) "wrong"."""
    return "right" if record.final_correct is True else "wrong"


def measure_by_class(records: Sequence[LabeledRecord]) -> dict[AnswerClass, JudgeCounts]:
    """The judge's readable votes on the pinned rows of each answer class, and how they fell."""
    return {c: measure_judge([r for r in records if answer_class(r) == c]) for c in ANSWER_CLASSES}


@dataclass(frozen=True)
class ClassAccuracy:
    """One class's rates as the soft posterior reads them, and where each came from."""

    accuracy: JudgeAccuracy
    errors_from: Literal["measured", "prior"]  # recall and miss: the class's pinned errors, or the prior
    clean_from: Literal["measured", "prior"]  # clean: the class's rows found clean, or the prior

    def as_dict(self) -> dict[str, object]:
        return asdict(self.accuracy) | {"errors_from": self.errors_from, "clean_from": self.clean_from}


def class_accuracy(counts: JudgeCounts, config: ConsensusConfig) -> ClassAccuracy:
    """The class's shrunk measured rates (consensus.estimated_accuracy), each replaced by the prior where
    fewer than `class_min_votes` votes measured it."""
    enough_errors = counts.pinned_votes >= max(config.class_min_votes, 1)
    enough_clean = counts.clean_votes >= max(config.class_min_votes, 1)
    measured = estimated_accuracy(counts, config)
    prior = estimated_accuracy(JudgeCounts(), config)
    recall, miss = (measured.recall, measured.miss) if enough_errors else (prior.recall, prior.miss)
    clean = measured.clean if enough_clean else prior.clean
    return ClassAccuracy(
        JudgeAccuracy(recall, clean, min(miss, 1.0 - recall)),
        "measured" if enough_errors else "prior",
        "measured" if enough_clean else "prior",
    )


def accuracy_by_class(records: Sequence[LabeledRecord], config: ConsensusConfig) -> dict[AnswerClass, ClassAccuracy]:
    """Each answer class's accuracy, measured on `records` (one shard's rows)."""
    return {c: class_accuracy(n, config) for c, n in measure_by_class(records).items()}


def counts_dict(counts: JudgeCounts, accuracy: ClassAccuracy) -> dict[str, int]:
    """A class's counts as ConsensusStats.by_answer holds them (summed key by key over shards): the votes,
    and in how many shards its errors (and its clean rows) read the prior."""
    return asdict(counts) | {
        "shards": 1,
        "errors_on_prior": int(accuracy.errors_from == "prior"),
        "clean_on_prior": int(accuracy.clean_from == "prior"),
    }
