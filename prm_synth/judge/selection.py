"""Judge calls only where they can change a label (`judge.select: needed`, read under the `soft` policy).

Selection: a wrong-answer row whose first error the rollouts pinned (the most likely first error of
`consensus.first_error_prior` has at least `judge.skip_confidence`, 0.99, and never less than
`consensus.confidence`) is not sent. The bar sits above the keep confidence on purpose: a row the rollouts
put at 0.92 is kept by soft without a vote, yet one vote for the runner-up can move it, and the rollouts'
0.9-0.99 rows are where their wrong first errors are (benchmarks/consensus_quality.py). Right-answer rows are always sent (the rollouts
are blind to an error a right answer follows), as are rows whose interval is still open. A share
`calibrate` of the pinned wrong-answer rows is sent anyway, chosen by row id: the rows the judge's
accuracy on wrong answers is measured on (judge_accuracy.py).

Stopping: votes are asked one at a time, in rounds over every row still open (each round one engine
request of n=1 per row, batched across rows as every stage's requests are: `judge.ask`). After each
round the judge's accuracy per answer class is measured on the votes so far, and a row whose posterior
over the first error (consensus.posterior) has reached the confidence is closed; the others get another
vote, up to `samples`. An unreadable vote counts as asked. Round r asks sample index r of the prompt
(`first_sample_index`), so a row's votes are the ones one request of n=samples would have drawn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from prm_synth.config.sections import ConsensusConfig, JudgeConfig
from prm_synth.engines.base import Engine, RequestRefused
from prm_synth.judge.accuracy import ClassAccuracy, accuracy_by_class, answer_class
from prm_synth.judge.ask import (
    JudgeVerdict,
    apply_verdicts,
    ask,
    count_verdict,
    judge_records,
    judge_requests,
    majority_vote,
    read_votes,
)
from prm_synth.judge.consensus import first_error_prior, posterior
from prm_synth.schema import JudgeStats, LabeledRecord, RejectedRecord


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
    `needed` asks the selected rows in rounds until each is settled (see the module doc). Same contract as
    judge_records: input rows unchanged, copies returned, refused rows rejected. `first_samples`: per row,
    the sample index its round 0 asks (a row asked again after unreadable answers: indices not used yet)."""
    if config.select == "all":
        return judge_records(engine, records, config, max_batch_requests, first_samples)
    firsts = list(first_samples) if first_samples is not None else [0] * len(records)
    sent = selected(records, config, consensus)
    votes: list[list[int]] = [[] for _ in records]
    texts: list[list[str]] = [[] for _ in records]
    tokens = [0] * len(records)
    refused: list[str | None] = [None] * len(records)
    stats = JudgeStats(rows_skipped=sent.count(False))
    open_rows = [i for i, s in enumerate(sent) if s]
    for round_index in range(config.samples):
        if not open_rows:
            break
        one = config.model_copy(update={"samples": 1})
        requests = judge_requests(
            [(records[i].question, records[i].steps) for i in open_rows],
            one,
            first_samples=[firsts[i] + round_index for i in open_rows],
        )
        answers, calls = ask(engine, requests, max_batch_requests, "judge")
        stats.engine_calls += calls
        stats.requests += len(requests)
        for i, answer in zip(open_rows, answers, strict=True):
            if isinstance(answer, RequestRefused):
                refused[i] = str(answer)
                continue
            completion = answer.completions[0]
            votes[i] += read_votes(engine, [completion.text], len(records[i].steps))
            texts[i].append(completion.text)
            tokens[i] += answer.prompt_tokens + answer.generated_tokens
        so_far = [replace(r, judge_votes=v) for r, v in zip(records, votes, strict=True)]
        accuracy = accuracy_by_class(so_far, consensus)
        open_rows = [
            i
            for i in open_rows
            if refused[i] is None and not settled(so_far[i], accuracy[answer_class(so_far[i])], consensus.confidence)
        ]
    verdicts: list[JudgeVerdict | None] = []
    for i, was_sent in enumerate(sent):
        if not was_sent:
            verdicts.append(None)
            continue
        if refused[i] is not None:
            verdicts.append(JudgeVerdict(None, votes[i], texts[i], tokens[i], refused=refused[i]))
            stats.refused += 1
            continue
        winner, tie = majority_vote(votes[i])
        verdicts.append(JudgeVerdict(winner, votes[i], texts[i], tokens[i], tie))
        count_verdict(stats, votes[i], winner, tie, tokens[i])
    kept, rejected = apply_verdicts(engine, records, verdicts, config, stats)
    return kept, rejected, stats
