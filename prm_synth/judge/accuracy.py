"""The judge's accuracy: how its votes fall on the rows whose first error the rollouts pinned, measured
per answer class (right-answer and wrong-answer rows apart) and shrunk towards a stated prior.

Pinned: the one definition the judge stage and consensus share. A row's first error is pinned at a
level L (`judge.skip_confidence`, 0.99 by default) when the rollouts put p_good >= L on the prefix before
its first bad label and <= 1 - L on the one at it; a row is found clean when every step is labeled good
and every prefix but the graded solution itself is at p_good >= L. Those rows are the judge's ground
truth here, and the same level decides which wrong-answer rows selection.py leaves unasked (the share
`judge.calibrate` of them still asked is what this module measures on).

Real judges miss far more errors in solutions whose final answer is right (ProcessBench), and those are
the rows the rollouts are blind to. One figure measured on the pinned rows (nearly all wrong-answer rows)
would overrate the judge exactly where it decides most. So each class's rates are measured on its own
pinned rows (a right answer whose test found a slip counts for the right-answer class), and a class with
fewer than `class_min_votes` readable votes there reads the stated prior (`prior_accuracy` named, half the
rest missed) instead of a figure it has no data for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal

from prm_synth.config import PINNED, ConsensusConfig
from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.records import LabeledRecord

__all__ = [
    "ANSWER_CLASSES",
    "PINNED",
    "AnswerClass",
    "ClassAccuracy",
    "JudgeAccuracy",
    "JudgeCounts",
    "accuracy_by_class",
    "answer_class",
    "class_accuracy",
    "counts_dict",
    "estimated_accuracy",
    "measure_by_class",
    "measure_judge",
    "pinned_first_error",
]

LIKELIHOOD_FLOOR = 1e-4  # the least a vote's likelihood is: a judge's rates are measured, never certain

AnswerClass = Literal["right", "wrong"]
ANSWER_CLASSES: tuple[AnswerClass, ...] = ("right", "wrong")


def pinned_first_error(record: LabeledRecord, level: float = PINNED) -> int | None:
    """The first error the rollouts pinned at `level` (p_good >= level before it, <= 1 - level at it), -1
    for a row they found clean (every step labeled good, every prefix but the graded solution itself at
    p_good >= level), or None where they pinned nothing."""
    p = record.p_good
    if p is None or len(p) != len(record.labels) or not p:
        return None
    first_bad = next((i for i, label in enumerate(record.labels) if label is False), -1)
    if first_bad == -1:
        clean = all(label is True for label in record.labels) and min(p[:-1], default=1.0) >= level
        return -1 if clean else None
    before = first_bad == 0 or p[first_bad - 1] >= level
    return first_bad if before and p[first_bad] <= 1.0 - level else None


@dataclass(frozen=True)
class JudgeAccuracy:
    """How one readable vote falls: on an error, naming it (`recall`) or missing it (`miss`: says -1);
    on a clean solution, saying -1 (`clean`). Real judges miss more than they misplace, so a -1 vote is
    weaker evidence of a clean solution than a step vote is of an error there."""

    recall: float
    clean: float
    miss: float = 0.0
    # how much a row's misses come together (canaries' CanaryStats.miss_dependence, 0..1): m votes weigh
    # as m / (1 + (m - 1) * dependence) independent ones
    dependence: float = 0.0
    # the share of the class's rows holding an error the rollouts' prior cannot see (right answers: the
    # run's own estimate, estimate.fit_hidden), spread over the steps by `hidden_shape` (weights of equal
    # fifths of a solution, where the judge's step votes fall; None: even)
    hidden: float = 0.0
    hidden_shape: tuple[float, ...] | None = None
    # one row graded against a pseudo-gold (grader.kind majority): P(the pseudo-gold is wrong), and then
    # P(this row's answer is the truth) (grading/majority.row_doubts); 0: a real gold
    doubt: float = 0.0
    doubt_clean: float = 0.0
    # how often the rollouts' change-point is late (a slip the policy repaired before it): the class's
    # canaries' measured rate (CanaryStats.late_rate), read by posterior.late_prior; 0 without canaries
    late: float = 0.0
    hazard: float = 0.0  # the shard's rate of fresh errors per step (posterior.slip_hazard): how often a slip is there

    def hidden_prior(self, n: int) -> list[float]:
        """P(first error = k) for k = 0..n-1 of a hidden error in a row of n steps."""
        shape = self.hidden_shape or (1.0,)
        weights = [shape[min(len(shape) - 1, k * len(shape) // max(n, 1))] for k in range(n)]
        total = sum(weights)
        return [w / total for w in weights] if total > 0 else [1.0 / n] * n

    def likelihood(self, vote: int, first_error: int, n_steps: int) -> float:
        """P(vote | first error), -1 for none; the remaining mass spread over the other steps. Never 0:
        no single vote rules a first error out."""
        if first_error == -1:
            p = self.clean if vote == -1 else (1.0 - self.clean) / max(n_steps, 1)
        elif vote == first_error:
            p = self.recall
        elif vote == -1:
            p = self.miss
        else:
            p = (1.0 - self.recall - self.miss) / max(n_steps - 1, 1)
        return max(p, LIKELIHOOD_FLOOR)


@dataclass(frozen=True)
class JudgeCounts:
    """Readable votes on the rows the rollouts pinned (errors) or found clean, and how they fell."""

    pinned_votes: int = 0
    pinned_named: int = 0  # naming the pinned step
    pinned_missed: int = 0  # saying -1
    clean_votes: int = 0
    clean_said_clean: int = 0


def measure_judge(records: Sequence[LabeledRecord], pinned: float = PINNED) -> JudgeCounts:
    """The judge's readable votes counted against the rows whose first error the rollouts pinned at
    `pinned` (or found clean)."""
    pinned_votes = pinned_named = pinned_missed = clean_votes = clean_said = 0
    for record in records:
        first_error = pinned_first_error(record, pinned)
        if first_error is None:
            continue
        votes = [v for v in record.judge_votes if v != UNPARSEABLE]
        if first_error == -1:
            clean_votes += len(votes)
            clean_said += votes.count(-1)
        else:
            pinned_votes += len(votes)
            pinned_named += votes.count(first_error)
            pinned_missed += votes.count(-1)
    return JudgeCounts(pinned_votes, pinned_named, pinned_missed, clean_votes, clean_said)


def estimated_accuracy(counts: JudgeCounts, config: ConsensusConfig) -> JudgeAccuracy:
    """The measured rates, each shrunk towards the prior (`prior_accuracy` right, half the rest misses) by
    `prior_votes` pseudo-votes (a shard may hold few pinned rows), kept inside (0.01, 0.99) so that no
    single vote overrules everything."""
    w, a = config.prior_votes, config.prior_accuracy

    def rate(hits: int, total: int, prior: float) -> float:
        value = (hits + w * prior) / (total + w) if total + w > 0 else prior
        return min(0.99, max(0.01, value))

    recall = rate(counts.pinned_named, counts.pinned_votes, a)
    miss = min(rate(counts.pinned_missed, counts.pinned_votes, (1.0 - a) / 2), 1.0 - recall)
    return JudgeAccuracy(recall, rate(counts.clean_said_clean, counts.clean_votes, a), miss)


# ------------------------------------------------------------------ per answer class
def answer_class(record: LabeledRecord) -> AnswerClass:
    """ "right" for a row whose final answer was graded correct; every other row (wrong, ungraded) "wrong"."""
    return "right" if record.final_correct is True else "wrong"


def measure_by_class(records: Sequence[LabeledRecord], pinned: float = PINNED) -> dict[AnswerClass, JudgeCounts]:
    """The judge's readable votes on the pinned rows of each answer class, and how they fell."""
    return {c: measure_judge([r for r in records if answer_class(r) == c], pinned) for c in ANSWER_CLASSES}


@dataclass(frozen=True)
class ClassAccuracy:
    """One class's rates as the soft posterior reads them, and where each came from."""

    accuracy: JudgeAccuracy
    # recall and miss: the shard's canaries (estimate.rates_by_class), the class's pinned errors, or the prior
    errors_from: Literal["measured", "prior", "canaries"]
    # clean: the class's rows found clean, the prior, or (right answers) fitted to the class's votes
    clean_from: Literal["measured", "prior", "votes"]
    # the same rates at the pessimistic and the optimistic end of their intervals (estimated_precision),
    # and one standard error towards the pessimistic end (what consensus.target_precision is held at)
    low: JudgeAccuracy | None = None
    high: JudgeAccuracy | None = None
    cautious: JudgeAccuracy | None = None

    def as_dict(self) -> dict[str, object]:
        rates = {k: v for k, v in asdict(self.accuracy).items() if k not in ("doubt", "doubt_clean")}  # per row
        return rates | {"errors_from": self.errors_from, "clean_from": self.clean_from}

    def with_doubt(self, doubt: float, doubt_clean: float) -> ClassAccuracy:
        """The class's rates read for one row graded against a pseudo-gold (`JudgeAccuracy.doubt`)."""
        if doubt <= 0.0:
            return self

        def one(rates: JudgeAccuracy | None) -> JudgeAccuracy | None:
            return None if rates is None else replace(rates, doubt=doubt, doubt_clean=doubt_clean)

        return replace(
            self,
            accuracy=replace(self.accuracy, doubt=doubt, doubt_clean=doubt_clean),
            low=one(self.low),
            high=one(self.high),
            cautious=one(self.cautious),
        )


def class_accuracy(counts: JudgeCounts, config: ConsensusConfig) -> ClassAccuracy:
    """The class's shrunk measured rates (`estimated_accuracy`), each replaced by the prior where fewer
    than `class_min_votes` votes measured it."""
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


def accuracy_by_class(
    records: Sequence[LabeledRecord], config: ConsensusConfig, pinned: float = PINNED
) -> dict[AnswerClass, ClassAccuracy]:
    """Each answer class's accuracy, measured on `records` (one shard's rows) pinned at `pinned`."""
    return {c: class_accuracy(n, config) for c, n in measure_by_class(records, pinned).items()}


def counts_dict(counts: JudgeCounts, accuracy: ClassAccuracy) -> dict[str, int]:
    """A class's counts as ConsensusStats.by_answer holds them (summed key by key over shards): the votes,
    and in how many shards its errors (and its clean rows) read the prior."""
    return asdict(counts) | {
        "shards": 1,
        "errors_on_prior": int(accuracy.errors_from == "prior"),
        "errors_on_canaries": int(accuracy.errors_from == "canaries"),
        "clean_on_prior": int(accuracy.clean_from == "prior"),
    }
