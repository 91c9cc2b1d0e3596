"""One grading contract for every kind (`grader.kind`), so labelers, rollouts, the judge, consensus,
verification chains, exports and the card work unchanged whatever is graded.

A grader turns a problem into a `key` (a string: what the rest of the pipeline passes around as "the
gold"), and grades a solution's text against a key with a three-valued `Verdict` in bounded time. For
`math` the key is the gold answer itself and grading is prm_synth/grading/math.py, unchanged; the other
kinds put what they need (options, aliases, tests) into a JSON key built from the problem's `grading`
field. `canonical` reads a solution's final answer as the value votes are counted on (`majority`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from prm_synth.config.grader import GraderConfig
from prm_synth.grading import math as math_grading
from prm_synth.grading.choice import ChoiceGrader
from prm_synth.grading.code import CodeGrader
from prm_synth.grading.exact import ExactGrader
from prm_synth.grading.math import Verdict
from prm_synth.prompting.thinking import TRUNCATED_THINKING, ThinkingMarkers
from prm_synth.records import Problem


class Grader(Protocol):
    kind: str

    def key(self, problem: Problem) -> str:
        """What a solution of `problem` is graded against (the pipeline's "gold")."""
        ...

    def grade(self, text: str, key: str) -> Verdict:
        """Three-valued verdict of a full solution text; bounded time; never raises on model text."""
        ...

    def canonical(self, text: str, key: str) -> str | None:
        """The solution's final answer as the value votes are counted on (None: none read)."""
        ...

    def with_answer(self, key: str, answer: str) -> str:
        """`key` with its gold answer replaced (a majority's pseudo-gold)."""
        ...


class MathGrader:
    kind = "math"

    def key(self, problem: Problem) -> str:
        return problem.gold_answer

    def grade(self, text: str, key: str) -> Verdict:
        return math_grading.grade(text, key)

    def canonical(self, text: str, key: str) -> str | None:
        extracted = math_grading.extract_answer(text)
        if extracted is None or len(extracted) > math_grading.MAX_ANSWER_CHARS:
            return None
        number = math_grading.as_number(extracted)
        return str(number) if number is not None else " ".join(extracted.split())

    def with_answer(self, key: str, answer: str) -> str:
        return answer


def make_grader(config: GraderConfig, inner: bool = False) -> Grader:
    """The grader of `config.kind` (`inner`: the kind a majority's votes are read with)."""
    kind = config.inner_kind if inner else config.kind
    if kind == "math":
        return MathGrader()
    if kind == "choice":
        return ChoiceGrader()
    if kind == "exact":
        return ExactGrader(config.tolerance, config.case_sensitive)
    if kind == "code":
        return CodeGrader(config.sandbox)
    if kind == "majority":
        return make_grader(config, inner=True)  # against the pseudo-gold, a majority grades as its inner kind
    raise ValueError(f"unknown grader kind {kind!r}")


def grade_answer(grader: Grader, text: str, key: str, thinking: ThinkingMarkers | None = None) -> Verdict:
    """`grader.grade` of the answer section (after a thinking trace's close marker; unknown if it never closes)."""
    if thinking is not None:
        answer = thinking.answer_section(text)
        if answer is None:
            return Verdict("unknown", None, TRUNCATED_THINKING)
        text = answer
    return grader.grade(text, key)


def grade_completion(
    grader: Grader, text: str, key: str, finish_reason: str | None, thinking: ThinkingMarkers | None = None
) -> Verdict:
    """An engine's completion: cut off by `max_tokens` is unknown ("truncated"), as math_grading's."""
    if thinking is not None and thinking.answer_section(text) is None:
        return Verdict("unknown", None, TRUNCATED_THINKING)
    if math_grading.is_truncated(finish_reason):
        return Verdict("unknown", None, "truncated")
    return grade_answer(grader, text, key, thinking)


def grade_answers(
    grader: Grader, texts: Sequence[str], key: str, thinking: ThinkingMarkers | None = None
) -> list[Verdict]:
    """`grade_answer` of each text, in order; a grader that runs programs (`code`) runs them at once in
    its bounded pool (`grade_many`), the others one by one."""
    out: list[Verdict | None] = [None] * len(texts)
    pending: list[tuple[int, str]] = []
    for i, text in enumerate(texts):
        if thinking is not None:
            answer = thinking.answer_section(text)
            if answer is None:
                out[i] = Verdict("unknown", None, TRUNCATED_THINKING)
                continue
            text = answer
        pending.append((i, text))
    many = getattr(grader, "grade_many", None)
    answers = [t for _, t in pending]
    verdicts = many(answers, key) if many is not None else [grader.grade(t, key) for t in answers]
    for (i, _), verdict in zip(pending, verdicts, strict=True):
        out[i] = verdict
    return [v for v in out if v is not None]


def grade_completions(
    grader: Grader, completions: Sequence[tuple[str, str | None]], key: str, thinking: ThinkingMarkers | None = None
) -> list[Verdict]:
    """`grade_completion` of each (text, finish reason), in order, graded together (`grade_answers`)."""
    out: list[Verdict | None] = [None] * len(completions)
    pending: list[tuple[int, str]] = []
    for i, (text, finish_reason) in enumerate(completions):
        if thinking is not None and thinking.answer_section(text) is None:
            out[i] = Verdict("unknown", None, TRUNCATED_THINKING)
        elif math_grading.is_truncated(finish_reason):
            out[i] = Verdict("unknown", None, "truncated")
        else:
            pending.append((i, text))
    verdicts = grade_answers(grader, [t for _, t in pending], key, thinking)
    for (i, _), verdict in zip(pending, verdicts, strict=True):
        out[i] = verdict
    return [v for v in out if v is not None]
