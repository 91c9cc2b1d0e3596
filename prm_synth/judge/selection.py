"""Judge calls only where they can change a label (`judge.select: needed`, read under the `soft` policy).

Selection: a wrong-answer row whose first error the rollouts pinned (the most likely first error of
`posterior.first_error_prior` has at least `judge.skip_confidence`, 0.99 (the level accuracy.py calls
pinned), and never less than `consensus.confidence`) is not sent. The bar sits above the keep confidence on purpose: a row the rollouts
put at 0.92 is kept by soft without a vote, yet one vote for the runner-up can move it, and the rollouts'
0.9-0.99 rows are where their wrong first errors are (benchmarks/consensus_quality.py). Right-answer rows are always sent (the rollouts
are blind to an error a right answer follows), as are rows whose interval is still open. A share
`calibrate` of the pinned wrong-answer rows is sent anyway, chosen by row id: the rows the judge's
accuracy on wrong answers is measured on (accuracy.py).

Stopping: votes are asked one at a time, in rounds over every row still open (each round one engine
request of n=1 per row, batched across rows as every stage's requests are: the one request loop, `ask.judge_solutions`). After each
round the judge's accuracy per answer class is measured on the votes so far, and a row whose posterior
over the first error (posterior.py) has reached the confidence is closed; the others get another
vote, up to `samples`. An unreadable vote counts as asked. Round r asks sample index r of the prompt
(`first_sample_index`), so a row's votes are the ones one request of n=samples would have drawn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from prm_synth.config import ConsensusConfig, JudgeConfig
from prm_synth.engines.base import Engine
from prm_synth.judge.accuracy import ClassAccuracy, accuracy_by_class, answer_class
from prm_synth.judge.ask import judge_records
from prm_synth.judge.posterior import first_error_prior, posterior
from prm_synth.schema import JudgeStats, LabeledRecord, RejectedRecord

__all__ = ["calibrates", "judge_selected", "judge_stage", "needs_judge", "pinned_at", "selected", "settled"]


def pinned_at(record: LabeledRecord, confidence: float) -> bool:
    """The rollouts alone put the row's most likely first error at `confidence` or more."""
    return max(first_error_prior(record)) >= confidence


def needs_judge(record: LabeledRecord, confidence: float) -> bool:
    """A vote can change the row's labels: a right (or ungraded) answer, or a first error not yet pinned."""
    return record.final_correct is not False or not pinned_at(record, confidence)


def calibrates(record: LabeledRecord, share: float) -> bool:
    """The row is among the `share` of rows sent to measure the judge (a stable draw from its id)."""
    if share <= 0.0:
        return False
    draw = int.from_bytes(hashlib.blake2b(f"calibrate:{record.id}".encode(), digest_size=8).digest(), "big")
    return draw / 2**64 < share


def selected(records: Sequence[LabeledRecord], config: JudgeConfig, consensus: ConsensusConfig) -> list[bool]:
    """Per row, whether the judge is asked about it."""
    level = max(config.skip_confidence, consensus.confidence)
    return [needs_judge(r, level) or calibrates(r, config.calibrate) for r in records]


def settled(record: LabeledRecord, accuracy: ClassAccuracy, confidence: float) -> bool:
    """The stopping rule: the posterior's most likely first error has reached the confidence."""
    return max(posterior(record, accuracy.accuracy)) >= confidence


def judge_selected(
    engine: Engine,
    records: list[LabeledRecord],
    config: JudgeConfig,
    consensus: ConsensusConfig,
    max_batch_requests: int,
    first_samples: Sequence[int] | None = None,
) -> tuple[list[LabeledRecord], list[RejectedRecord], JudgeStats]:
    """The judge stage under `soft`: `select: all` asks every row `samples` votes at once (judge_records);
    `needed` asks the selected rows in rounds until each is settled (see the module doc), through the same
    request loop. Same contract as judge_records: input rows unchanged, copies returned, refused rows
    rejected."""
    if config.select == "all":
        return judge_records(engine, records, config, max_batch_requests, first_samples=first_samples)

    def settled_rows(votes: list[list[int]], rows: list[int]) -> list[bool]:
        so_far = [replace(r, judge_votes=v) for r, v in zip(records, votes, strict=True)]
        accuracy = accuracy_by_class(so_far, consensus, config.skip_confidence)
        return [settled(so_far[i], accuracy[answer_class(so_far[i])], consensus.confidence) for i in rows]

    sent = selected(records, config, consensus)
    return judge_records(
        engine, records, config, max_batch_requests, sent=sent, settled=settled_rows, first_samples=first_samples
    )


def judge_stage(
    engine: Engine,
    records: list[LabeledRecord],
    config: JudgeConfig,
    consensus: ConsensusConfig | None,
    max_batch_requests: int,
    first_samples: Sequence[int] | None = None,
) -> tuple[list[LabeledRecord], list[RejectedRecord], JudgeStats]:
    """The judge stage as the pipeline runs it: under `soft`, only the rows a vote can change, votes asked
    until settled (`judge_selected`); under any other policy (or none), every row with `samples` votes.
    `first_samples`: per row, the sample index its first vote is drawn at (judge_solutions)."""
    if consensus is not None and consensus.policy == "soft":
        return judge_selected(engine, records, config, consensus, max_batch_requests, first_samples)
    return judge_records(engine, records, config, max_batch_requests, first_samples=first_samples)
