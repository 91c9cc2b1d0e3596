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
round the judge's rates per answer class are measured on the votes so far and the shard's canaries
(estimate.rates_by_class), and a row soft would keep (its most likely first error at `consensus.confidence`,
its labels' expected precision at `consensus.target_precision`) is closed, as is one that the votes left
cannot take there; the others get another vote, up to `samples`. An unreadable vote counts as asked. Round r asks sample index r of the prompt
(`first_sample_index`), so a row's votes are the ones one request of n=samples would have drawn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

from prm_synth.config import ConsensusConfig, JudgeConfig
from prm_synth.engines.base import Engine
from prm_synth.judge.accuracy import ANSWER_CLASSES, ClassAccuracy, answer_class
from prm_synth.judge.ask import Drawn, judge_records
from prm_synth.judge.estimate import expected_precision, rates_by_class
from prm_synth.judge.posterior import first_error_prior, late_prior, posterior, slip_hazard
from prm_synth.records import JudgeStats, LabeledRecord
from prm_synth.records.canaries import CanaryStats
from prm_synth.records.stage import StageResult

__all__ = ["calibrates", "judge_selected", "judge_stage", "needs_judge", "pinned_at", "selected", "settled"]


def pinned_at(record: LabeledRecord, confidence: float, late: float = 0.0, hazard: float = 0.0) -> bool:
    """The rollouts alone put the row's most likely first error at `confidence` or more (read with the
    measured rate `late` at which their change-point is late, and the shard's slip `hazard`:
    posterior.late_prior)."""
    return max(late_prior(first_error_prior(record), late, hazard)) >= confidence


def needs_judge(record: LabeledRecord, confidence: float, late: float = 0.0, hazard: float = 0.0) -> bool:
    """A vote can change the row's labels: a right (or ungraded) answer, or a first error not yet pinned."""
    return record.final_correct is not False or not pinned_at(record, confidence, late, hazard)


def calibrates(record: LabeledRecord, share: float) -> bool:
    """The row is among the `share` of rows sent to measure the judge (a stable draw from its id)."""
    if share <= 0.0:
        return False
    draw = int.from_bytes(hashlib.blake2b(f"calibrate:{record.id}".encode(), digest_size=8).digest(), "big")
    return draw / 2**64 < share


def selected(
    records: Sequence[LabeledRecord],
    config: JudgeConfig,
    consensus: ConsensusConfig,
    doubt: Mapping[str, tuple[float, float]] | None = None,
    canaries: CanaryStats | None = None,
) -> list[bool]:
    """Per row, whether the judge is asked about it. A row with a `doubt` (graded against a pseudo-gold
    that may be wrong, grading/majority.py) always is: the rollouts' pin stands on that pseudo-gold. A pin
    is read with the rate at which the shard's canaries found the rollouts' change-point late (a repaired
    slip before it): where that is measured, a row pinned by the rollouts alone may still need a vote."""
    level = max(config.skip_confidence, consensus.confidence)
    doubt = doubt or {}
    hazard = slip_hazard(records)
    late = {c: (canaries.late_rate(c), hazard) if canaries else (0.0, 0.0) for c in ANSWER_CLASSES}
    return [
        r.id in doubt or needs_judge(r, level, *late[answer_class(r)]) or calibrates(r, config.calibrate)
        for r in records
    ]


def reaches(record: LabeledRecord, accuracy: ClassAccuracy, consensus: ConsensusConfig) -> bool:
    """Soft would keep the row as it stands: its most likely first error at `confidence`, its labels'
    expected precision at `target_precision`."""
    post = posterior(record, accuracy.accuracy)
    best = max(range(len(post)), key=post.__getitem__)
    first_error = -1 if best == len(record.labels) else best
    return post[best] >= consensus.confidence and expected_precision(post, first_error) >= consensus.target_precision


def settled(record: LabeledRecord, accuracy: ClassAccuracy, consensus: ConsensusConfig, votes_left: int = 0) -> bool:
    """The stopping rule: soft keeps the row (`reaches`), or no `votes_left` more votes can take it there
    (each of its two likeliest first errors tried with every vote left naming it): votes go only where
    they can still move a row across the target."""
    if reaches(record, accuracy, consensus):
        return True
    post = posterior(record, accuracy.accuracy)
    n = len(record.labels)
    for k in sorted(range(len(post)), key=post.__getitem__, reverse=True)[:2]:
        more = replace(record, judge_votes=[*record.judge_votes, *([-1 if k == n else k] * votes_left)])
        if votes_left and reaches(more, accuracy, consensus):
            return False
    return True


def judge_selected(
    engine: Engine,
    records: list[LabeledRecord],
    config: JudgeConfig,
    consensus: ConsensusConfig,
    max_batch_requests: int,
    canaries: CanaryStats | None = None,
    first_samples: Sequence[int] | None = None,
    doubt: Mapping[str, tuple[float, float]] | None = None,
    known: Mapping[str, Mapping[int, Drawn]] | None = None,
) -> StageResult[LabeledRecord, JudgeStats]:
    """The judge stage under `soft`: `select: all` asks every row `samples` votes at once (judge_records);
    `needed` asks the selected rows in rounds until each is settled (see the module doc), through the same
    request loop. Same contract as judge_records: input rows unchanged, copies returned, refused rows
    rejected."""
    if config.select == "all":
        return judge_records(engine, records, config, max_batch_requests, first_samples=first_samples, known=known)

    def settled_rows(votes: list[list[int]], rows: list[int]) -> list[bool]:
        so_far = [replace(r, judge_votes=v) for r, v in zip(records, votes, strict=True)]
        accuracy = rates_by_class(so_far, consensus, config.skip_confidence, canaries, doubt)
        return [
            settled(
                so_far[i],
                accuracy[answer_class(so_far[i])].with_doubt(*(doubt or {}).get(so_far[i].id, (0.0, 0.0))),
                consensus,
                config.samples - len(votes[i]),
            )
            for i in rows
        ]

    sent = selected(records, config, consensus, doubt, canaries)
    return judge_records(
        engine,
        records,
        config,
        max_batch_requests,
        sent=sent,
        settled=settled_rows,
        first_samples=first_samples,
        known=known,
    )


def judge_stage(
    engine: Engine,
    records: list[LabeledRecord],
    config: JudgeConfig,
    consensus: ConsensusConfig | None,
    max_batch_requests: int,
    canaries: CanaryStats | None = None,
    first_samples: Sequence[int] | None = None,
    doubt: Mapping[str, tuple[float, float]] | None = None,
    known: Mapping[str, Mapping[int, Drawn]] | None = None,
) -> StageResult[LabeledRecord, JudgeStats]:
    """The judge stage as the pipeline runs it: under `soft`, only the rows a vote can change, votes asked
    until settled (`judge_selected`); under any other policy (or none), every row with `samples` votes.
    `first_samples`: per row, the sample index its first vote is drawn at; `known`: samples already drawn
    for a row's prompt, by row id, served instead of asked (judge_solutions)."""
    if consensus is not None and consensus.policy == "soft":
        return judge_selected(
            engine, records, config, consensus, max_batch_requests, canaries, first_samples, doubt, known
        )
    return judge_records(engine, records, config, max_batch_requests, first_samples=first_samples, known=known)
