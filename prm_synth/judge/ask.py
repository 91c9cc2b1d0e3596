"""The LLM judge: a model names the earliest wrong step of a solution, or -1 if every step is right.

The prompt is ProcessBench's critique prompt: the problem, then the steps as numbered paragraphs
(`<paragraph_0>` ... `</paragraph_0>`), and the answer in `\\boxed{}`. m samples per solution are
drawn in one request (n=m) and combined by majority vote; a tie or a solution without a single
readable vote gets no verdict (None), which is recorded and never guessed. A request the engine
refuses (`RequestRefused`, e.g. a solution too long for the judge's context) rejects that row
("engine_refused", the server's words in the detail); the other rows are judged as usual. A row none
of whose samples could be read was not judged: the judge failed, not the row, so it is left open
("judge_unreadable", one of the judge's answers in the detail, the labeled row as its payload) and the
next run asks the judge again for it alone (flows/synthesize.py); a shard where most votes are unreadable
fails the run once it is written (pipeline.check_judges_readable).

The prompt and its parser live in prompts.py; the simulated judge in simulated/engines.py.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from prm_synth.config import JudgeConfig
from prm_synth.engines.base import Engine, GenerationRequest, GenerationResult, RequestRefused, SamplingOptions
from prm_synth.engines.stream import stream_for
from prm_synth.grading.math import last_boxed
from prm_synth.prompting.prompts import JUDGE_PROMPT_VERSION, parse_judge_prompt, render_judge_prompt
from prm_synth.prompting.thinking import ThinkingMarkers
from prm_synth.records import JudgeStats, LabeledRecord, RejectedRecord, reject
from prm_synth.records.stage import StageResult
from prm_synth.store.left_open import answer_sample, leave_open

__all__ = [
    "JUDGE_PROMPT_VERSION",
    "UNPARSEABLE",
    "judge_records",
    "judge_solutions",
    "parse_judge_prompt",
    "render_judge_prompt",
]

# A judge sample whose answer could not be read (no box, garbage, index out of range). It is kept
# in `judge_votes` so the row shows how many samples were lost, and never counts as a vote.
UNPARSEABLE = -2

# Model output is untrusted: only its tail is read (the last box wins anyway), in one linear pass.
MAX_ANSWER_CHARS = 20_000

_INDEX = re.compile(r"-?\d+")


def all_unreadable(votes: Sequence[int]) -> bool:
    """Votes were asked and not one could be read: the judge failed on this row (no verdict either way)."""
    return bool(votes) and all(v == UNPARSEABLE for v in votes)


# ------------------------------------------------------------------ answers
def parse_judge_answer(text: str, n_steps: int) -> int:
    """The index in the last complete `\\boxed{}` (-1 allowed), or UNPARSEABLE.

    Garbage in the last box is unparseable even when an earlier box held a number: the model's
    final word is the answer, and an earlier one is not guessed in its place.
    """
    box = last_boxed(text[-MAX_ANSWER_CHARS:])
    if box is None:
        return UNPARSEABLE
    content = box.replace("−", "-")  # a unicode minus is still a minus
    content = content.strip().strip("$").strip()
    if not _INDEX.fullmatch(content):
        return UNPARSEABLE
    index = int(content)
    return index if -1 <= index < n_steps else UNPARSEABLE


def majority_vote(votes: Sequence[int]) -> tuple[int | None, bool]:
    """(the most frequent readable vote, whether a tie left it undecided).

    Plurality among readable votes (self-consistency's rule); unreadable ones abstain. A tie for
    first place, or no readable vote at all, gives None.
    """
    counts = Counter(v for v in votes if v != UNPARSEABLE).most_common()
    if not counts:
        return None, False
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return None, True
    return counts[0][0], False


# ------------------------------------------------------------------ judging
# One judge sample already drawn: its vote, its answer text, its request's prompt tokens and its own
# generated tokens. Keyed by sample index, a row's drawn samples are served again to a later stage that
# would ask the same prompt at the same index (the canaries' clean controls, then the judge), at the tokens
# asking would have cost (one prompt a request).
Drawn = tuple[int, str, int, int]


@dataclass
class JudgeVerdict:
    first_error: int | None  # the vote's winner; None: tie or nothing readable
    votes: list[int]  # every sample's index, UNPARSEABLE (-2) where unreadable
    texts: list[str]  # the judge's raw answers (for prediction files and debugging)
    tokens: int  # prompt + generated tokens of this solution's request
    tie: bool = False
    refused: str | None = None  # the engine refused the request: its message (no votes then)
    drawn: dict[int, Drawn] = field(default_factory=dict)  # by sample index: what later stages may reuse


@dataclass(frozen=True)
class JudgePrompt:
    """How a judge is asked and how its answer is read: ProcessBench's critique prompt by default;
    `evaluate` also scores generative verifiers, asked with the verifier prompt (prm_synth/judge/verify.py)."""

    render: Callable[[str, Sequence[str]], str] = render_judge_prompt
    parse: Callable[[str, int], int] = parse_judge_answer  # (answer, steps) -> index, -1, or UNPARSEABLE
    system: str | None = None


CRITIQUE = JudgePrompt()


def judge_requests(
    items: Sequence[tuple[str, Sequence[str]]],
    config: JudgeConfig,
    prompt: JudgePrompt = CRITIQUE,
    first_samples: Sequence[int] | None = None,
) -> list[GenerationRequest]:
    """One request (n=samples) per item; `first_samples`: per item, the index of its first sample."""
    sampling = SamplingOptions(max_tokens=config.max_tokens, temperature=config.temperature)
    firsts = first_samples if first_samples is not None else [0] * len(items)
    return [
        GenerationRequest(
            user=prompt.render(q, steps),
            system=prompt.system,
            n=config.samples,
            sampling=sampling,
            first_sample_index=first,
        )
        for (q, steps), first in zip(items, firsts, strict=True)
    ]


def ask(
    engine: Engine, requests: Sequence[GenerationRequest], max_batch_requests: int, what: str
) -> tuple[list[GenerationResult | RequestRefused], int]:
    """The request loop of the judge and verify stages: requests sent in chunks of the batch size through
    the engine's stream. Returns, per request, its result (exactly `n` completions, else RuntimeError) or
    the `RequestRefused` the engine answered it with (it fails alone), and the number of engine calls.
    Any other engine error is raised: it fails the shard."""
    answers: list[GenerationResult | RequestRefused] = []
    stream = stream_for(engine)
    calls = 0
    for start in range(0, len(requests), max_batch_requests):
        chunk = requests[start : start + max_batch_requests]
        futures = stream.submit_all(chunk)
        stream.wait(futures, all_of=True)
        calls += 1
        for request, future in zip(chunk, futures, strict=True):
            error = future.exception()
            if isinstance(error, RequestRefused):
                answers.append(error)
                continue
            result = future.result()
            if len(result.completions) != request.n:
                raise RuntimeError(f"{what} engine returned {len(result.completions)} samples, asked {request.n}")
            answers.append(result)
    return answers, calls


def judge_solutions(
    engine: Engine,
    items: Sequence[tuple[str, Sequence[str]]],
    config: JudgeConfig,
    max_batch_requests: int,
    prompt: JudgePrompt = CRITIQUE,
    *,
    sent: Sequence[bool] | None = None,
    settled: Callable[[list[list[int]], list[int]], list[bool]] | None = None,
    first_samples: Sequence[int] | None = None,
    known: Sequence[Mapping[int, Drawn] | None] | None = None,
) -> tuple[list[JudgeVerdict | None], JudgeStats]:
    """The judge's one request loop: judge (question, steps) pairs, a refused request failing alone (its
    verdict says so). Without `settled`, one request of n=samples per pair; with it, votes are asked one
    at a time in rounds over the pairs still open (round r asks sample index r of the prompt, so a pair's
    votes are the ones one request of n=samples would have drawn), and after each round `settled` (every
    pair's votes so far, the open pairs' indices) says which of the open pairs are settled and close, up
    to `samples` rounds (selection.py).
    `sent`: which pairs are asked at all; an unsent pair's verdict is None. `first_samples`: per pair, the
    sample index its first vote is drawn at (0 where not given): a row asked again after its answers could
    not be read starts past the indices earlier runs used, as a judge that honours seeds would repeat them.
    `known`: per pair, samples already drawn for the same prompt (by sample index, `Drawn`): a vote whose
    index is known is served from there, not asked again (counted in `stats.reused`); without `settled`
    only a pair whose every index is known is served."""
    firsts = [0] * len(items) if first_samples is None else list(first_samples)
    known = [None] * len(items) if known is None else list(known)
    drawn: list[dict[int, Drawn]] = [{} for _ in items]
    sent = [True] * len(items) if sent is None else list(sent)
    per_request = config if settled is None else config.model_copy(update={"samples": 1})
    votes: list[list[int]] = [[] for _ in items]
    texts: list[list[str]] = [[] for _ in items]
    tokens = [0] * len(items)
    refused: list[str | None] = [None] * len(items)
    stats = JudgeStats(rows_skipped=sent.count(False))
    open_rows = [i for i, s in enumerate(sent) if s]
    for round_index in range(1 if settled is None else config.samples):
        if not open_rows:
            break
        wanted = {i: range(firsts[i] + round_index, firsts[i] + round_index + per_request.samples) for i in open_rows}
        served = [i for i in open_rows if known[i] and all(k in known[i] for k in wanted[i])]
        for i in served:
            for k in wanted[i]:
                vote, text, _, generated = drawn[i][k] = known[i][k]
                votes[i].append(vote)
                texts[i].append(text)
                tokens[i] += generated
                stats.reused += 1
            tokens[i] += known[i][wanted[i][0]][2]  # the prompt, once a request
        asking = [i for i in open_rows if i not in served]
        requests = judge_requests(
            [items[i] for i in asking], per_request, prompt, [firsts[i] + round_index for i in asking]
        )
        answers, calls = ask(engine, requests, max_batch_requests, "judge") if requests else ([], 0)
        stats.engine_calls += calls
        stats.requests += len(requests)
        for i, answer in zip(asking, answers, strict=True):
            if isinstance(answer, RequestRefused):
                refused[i] = str(answer)
                continue
            answered = [c.text for c in answer.completions]
            read = read_votes(engine, answered, len(items[i][1]), prompt)
            for k, vote, c in zip(wanted[i], read, answer.completions, strict=False):
                drawn[i][k] = (vote, c.text, answer.prompt_tokens, c.generated_tokens)
            votes[i] += read
            texts[i] += answered
            tokens[i] += answer.prompt_tokens + answer.generated_tokens
        if settled is not None:
            answered_rows = [i for i in open_rows if refused[i] is None]
            closed = settled(votes, answered_rows)
            open_rows = [i for i, done in zip(answered_rows, closed, strict=True) if not done]
    verdicts: list[JudgeVerdict | None] = []
    for i, was_sent in enumerate(sent):
        if not was_sent:
            verdicts.append(None)
        elif refused[i] is not None:
            verdicts.append(JudgeVerdict(None, votes[i], texts[i], tokens[i], refused=refused[i]))
            stats.refused += 1
        else:
            winner, tie = majority_vote(votes[i])
            verdicts.append(JudgeVerdict(winner, votes[i], texts[i], tokens[i], tie, drawn=drawn[i]))
            count_verdict(stats, votes[i], winner, tie, tokens[i])
    return verdicts, stats


def read_votes(engine: Engine, texts: Sequence[str], n_steps: int, prompt: JudgePrompt = CRITIQUE) -> list[int]:
    """The votes in a judge's answers. A thinking judge's vote is read from its answer alone (after the
    close marker); one whose trace never closes is unreadable."""
    markers: ThinkingMarkers | None = getattr(engine, "thinking", None)
    answers_only = [t if markers is None else markers.answer_section(t) or "" for t in texts]
    return [prompt.parse(t, n_steps) for t in answers_only]


def count_verdict(stats: JudgeStats, votes: list[int], winner: int | None, tie: bool, tokens: int) -> None:
    """A judged row's share of the stage's counters (every stage that asks the judge counts this way)."""
    stats.solutions += 1
    stats.samples += len(votes)
    stats.unparseable += votes.count(UNPARSEABLE)
    stats.ties += tie
    stats.undecided += winner is None
    stats.tokens += tokens
    kind = "none" if winner is None else "-1" if winner == -1 else "error"
    stats.verdicts[kind] = stats.verdicts.get(kind, 0) + 1


def judge_records(
    engine: Engine,
    records: list[LabeledRecord],
    config: JudgeConfig,
    max_batch_requests: int,
    *,
    sent: Sequence[bool] | None = None,
    settled: Callable[[list[list[int]], list[int]], list[bool]] | None = None,
    first_samples: Sequence[int] | None = None,
    known: Mapping[str, Mapping[int, Drawn]] | None = None,
) -> StageResult[LabeledRecord, JudgeStats]:
    """The judge stage: (the judged rows, the rejected, its counters). The stage contract it shares with
    verify (verify.verify_records): the input rows are not changed; the rows returned are copies with the
    stage's fields filled. `sent` and `settled`: which rows are asked and when a row has votes enough
    (`judge_solutions`; selection.py sets them); by default every row gets `samples` votes at once.
    `known`: samples already drawn for a row's prompt, by row id (`judge_solutions`).

    A record whose judge request the engine refused is rejected (stage "judge", "engine_refused"); one
    whose every vote is unreadable is left open ("judge_unreadable", the labeled row as its payload, so
    the next run judges it alone). The judge's tokens are added to the row's `tokens` (what labeling
    this row cost).
    """
    items = [(r.question, r.steps) for r in records]
    verdicts, stats = judge_solutions(
        engine,
        items,
        config,
        max_batch_requests,
        sent=sent,
        settled=settled,
        first_samples=first_samples,
        known=[(known or {}).get(r.id) for r in records],
    )
    kept, rejected = apply_verdicts(engine, records, verdicts, config, stats)
    return StageResult(kept, rejected, stats)


def apply_verdicts(
    engine: Engine,
    records: list[LabeledRecord],
    verdicts: Sequence[JudgeVerdict | None],
    config: JudgeConfig,
    stats: JudgeStats,
) -> tuple[list[LabeledRecord], list[RejectedRecord]]:
    """The rows with their verdicts written in (copies), those whose request was refused, rejected, and
    those without one readable vote left open (counted in `stats.unreadable_rows`). A row without a
    verdict (None: not sent, selection.py) is kept as it is."""
    kept: list[LabeledRecord] = []
    rejected: list[RejectedRecord] = []
    for record, verdict in zip(records, verdicts, strict=True):
        if verdict is None:
            kept.append(replace(record))
            continue
        if verdict.refused is not None:
            row = record.to_row()
            rejected.append(
                reject(record.id, record.problem_id, record.source, "judge", "engine_refused", verdict.refused, row)
            )
            continue
        if all_unreadable(verdict.votes):
            detail = (
                f"none of the judge's {len(verdict.votes)} answers could be read as a step index, "
                f"e.g. {answer_sample(verdict.texts)}: the judge failed, not the row; asked again next run"
            )
            rejected.append(leave_open(record, "judge", "judge_unreadable", detail))
            stats.unreadable_rows += 1
            continue
        kept.append(
            replace(
                record,
                judge_first_error=verdict.first_error,
                judge_votes=verdict.votes,
                judge_prompt_version=config.prompt_version,
                judge_model=engine.model_name,
                tokens=record.tokens + verdict.tokens,
            )
        )
    return kept, rejected
