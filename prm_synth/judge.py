"""The LLM judge: a model names the earliest wrong step of a solution, or -1 if every step is right.

The prompt is ProcessBench's critique prompt: the problem, then the steps as numbered paragraphs
(`<paragraph_0>` ... `</paragraph_0>`), and the answer in `\\boxed{}`. m samples per solution are
drawn in one request (n=m) and combined by majority vote; a tie or a solution without a single
readable vote gets no verdict (None), which is recorded and never guessed.

`render_judge_prompt` and `parse_judge_prompt` are a pair: the simulated judge reads its own
prompt back to recompute the truth from the step text, so it runs through exactly the same
requests, batching and parsing as a real judge.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prm_synth import arithmetic
from prm_synth.config import JudgeConfig, SimulatedJudgeConfig
from prm_synth.engines.base import Completion, Engine, GenerationRequest, GenerationResult, SamplingOptions
from prm_synth.engines.simulated import digest
from prm_synth.grading import last_boxed
from prm_synth.schema import LabeledRecord

JUDGE_PROMPT_VERSION = "v1"

# A judge sample whose answer could not be read (no box, garbage, index out of range). It is kept
# in `judge_votes` so the row shows how many samples were lost, and never counts as a vote.
UNPARSEABLE = -2

# Model output is untrusted: only its tail is read (the last box wins anyway), in one linear pass.
MAX_ANSWER_CHARS = 20_000
MAX_PROMPT_CHARS = 1_000_000

_PREAMBLE = (
    "The following is a math problem and a solution (split into paragraphs, enclosed with tags and "
    "indexed from 0):\n\n[Math Problem]\n\n"
)
_SOLUTION_HEADER = "\n\n[Solution]\n\n"
_INSTRUCTION = (
    "\n\nYour task is to review and critique the solution paragraph by paragraph. Once you identify an "
    "error in a paragraph, return the index of the paragraph where the earliest error occurs. Otherwise, "
    'return the index of -1 (which typically denotes "not found").\n\n'
    "Please put your final answer (i.e., the index) in \\boxed{}."
)
_PARAGRAPH = re.compile(r"<paragraph_(\d+)>\n(.*?)\n</paragraph_\1>", re.DOTALL)
_INDEX = re.compile(r"-?\d+")


# ------------------------------------------------------------------ prompt
def render_judge_prompt(question: str, steps: Sequence[str]) -> str:
    """ProcessBench's critique prompt. Steps are shown stripped: the separators that a lossless
    split keeps inside each step are layout, and the tags already separate the paragraphs."""
    if not steps:
        raise ValueError("a solution to judge needs at least one step")
    paragraphs = "\n\n".join(f"<paragraph_{i}>\n{s.strip()}\n</paragraph_{i}>" for i, s in enumerate(steps))
    return _PREAMBLE + question.strip() + _SOLUTION_HEADER + paragraphs + _INSTRUCTION


def parse_judge_prompt(prompt: str) -> tuple[str, list[str]] | None:
    """(question, stripped steps) from a prompt made by `render_judge_prompt`; None for other text."""
    if len(prompt) > MAX_PROMPT_CHARS or not prompt.startswith(_PREAMBLE) or not prompt.endswith(_INSTRUCTION):
        return None
    body = prompt[len(_PREAMBLE) : -len(_INSTRUCTION)]
    # The first paragraph tag right after the header ends the question (questions hold no tags).
    cut = body.find(_SOLUTION_HEADER + "<paragraph_0>\n")
    if cut < 0:
        return None
    question, solution = body[:cut], body[cut + len(_SOLUTION_HEADER) :]
    steps: list[str] = []
    pos = 0
    for m in _PARAGRAPH.finditer(solution):
        expected_gap = "" if not steps else "\n\n"
        if int(m[1]) != len(steps) or solution[pos : m.start()] != expected_gap:
            return None
        steps.append(m[2])
        pos = m.end()
    if not steps or pos != len(solution):
        return None
    return question, steps


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
@dataclass
class JudgeVerdict:
    first_error: int | None  # the vote's winner; None: tie or nothing readable
    votes: list[int]  # every sample's index, UNPARSEABLE (-2) where unreadable
    texts: list[str]  # the judge's raw answers (for prediction files and debugging)
    tokens: int  # prompt + generated tokens of this solution's request
    tie: bool = False


@dataclass
class JudgeStats:
    solutions: int = 0
    samples: int = 0
    unparseable: int = 0
    ties: int = 0
    undecided: int = 0  # no verdict: ties plus solutions without a readable vote
    engine_calls: int = 0
    tokens: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)  # "-1" / "error" / "none" -> count

    def as_dict(self) -> dict[str, Any]:
        # Counts only: shard totals sum these key by key.
        return dict(self.__dict__, verdicts=dict(self.verdicts))


def judge_requests(items: Sequence[tuple[str, Sequence[str]]], config: JudgeConfig) -> list[GenerationRequest]:
    sampling = SamplingOptions(max_tokens=config.max_tokens, temperature=config.temperature)
    return [
        GenerationRequest(user=render_judge_prompt(q, steps), n=config.samples, sampling=sampling) for q, steps in items
    ]


def judge_solutions(
    engine: Engine,
    items: Sequence[tuple[str, Sequence[str]]],
    config: JudgeConfig,
    max_batch_requests: int,
) -> tuple[list[JudgeVerdict], JudgeStats]:
    """Judge (question, steps) pairs: one request of n=samples each, sent in chunks of the batch size."""
    if config.prompt_version != JUDGE_PROMPT_VERSION:
        raise ValueError(f"judge prompt version {config.prompt_version!r} is unknown (have {JUDGE_PROMPT_VERSION!r})")
    requests = judge_requests(items, config)
    stats = JudgeStats()
    verdicts: list[JudgeVerdict] = []
    for start in range(0, len(requests), max_batch_requests):
        chunk = requests[start : start + max_batch_requests]
        results = engine.generate(chunk)
        stats.engine_calls += 1
        if len(results) != len(chunk):
            raise RuntimeError(f"judge engine returned {len(results)} results for {len(chunk)} requests")
        for (_, steps), result in zip(items[start : start + len(chunk)], results, strict=True):
            if len(result.completions) != config.samples:
                raise RuntimeError(f"judge engine returned {len(result.completions)} samples, asked {config.samples}")
            texts = [c.text for c in result.completions]
            votes = [parse_judge_answer(t, len(steps)) for t in texts]
            winner, tie = majority_vote(votes)
            tokens = result.prompt_tokens + result.generated_tokens
            verdicts.append(JudgeVerdict(winner, votes, texts, tokens, tie))
            stats.solutions += 1
            stats.samples += len(votes)
            stats.unparseable += votes.count(UNPARSEABLE)
            stats.ties += tie
            stats.undecided += winner is None
            stats.tokens += tokens
            kind = "none" if winner is None else "-1" if winner == -1 else "error"
            stats.verdicts[kind] = stats.verdicts.get(kind, 0) + 1
    return verdicts, stats


def judge_records(
    engine: Engine, records: list[LabeledRecord], config: JudgeConfig, max_batch_requests: int
) -> dict[str, Any]:
    """Fill each record's judge fields in place; returns count statistics.

    The judge's tokens are added to the row's `tokens` (what labeling this row cost).
    """
    verdicts, stats = judge_solutions(engine, [(r.question, r.steps) for r in records], config, max_batch_requests)
    for record, verdict in zip(records, verdicts, strict=True):
        record.judge_first_error = verdict.first_error
        record.judge_votes = verdict.votes
        record.judge_prompt_version = config.prompt_version
        record.judge_model = engine.model_name
        record.tokens += verdict.tokens
    return stats.as_dict()


# ------------------------------------------------------------------ simulated judge
class SimulatedJudge:
    """A judge engine that knows the truth: an instrument for measuring the consensus filter.

    It reads its own prompt back, recomputes the true first error from the step text
    (arithmetic.true_first_error), and names it with probability `accuracy`; otherwise it names
    another index in [-1, len(steps) - 1], uniformly. Each sample's randomness comes from
    (seed, prompt, sample index), so batching and order change nothing and re-runs repeat.
    """

    def __init__(self, config: SimulatedJudgeConfig | None = None) -> None:
        self.config = config or SimulatedJudgeConfig()

    @property
    def model_name(self) -> str:
        return self.config.model_name

    def close(self) -> None:
        pass

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        out = []
        for req in requests:
            parsed = parse_judge_prompt(req.user)
            base = digest(self.config.seed, req.user)
            texts = [self._answer(parsed, random.Random(f"{base}:{req.first_sample_index + i}")) for i in range(req.n)]
            completions = tuple(Completion(t, len(t.split()), "stop") for t in texts)
            out.append(GenerationResult(completions, len(req.user.split())))
        return out

    def _answer(self, parsed: tuple[str, list[str]] | None, rng: random.Random) -> str:
        if parsed is None:
            return "I cannot read this solution."
        steps = parsed[1]
        truth = arithmetic.true_first_error(steps)
        if rng.random() < self.config.accuracy:
            index = truth
        else:
            index = rng.choice([i for i in range(-1, len(steps)) if i != truth])
        if index == -1:
            return "Every paragraph's arithmetic checks out.\n\n\\boxed{-1}"
        return f"The arithmetic in paragraph {index} is wrong.\n\n\\boxed{{{index}}}"
