"""What sampling hands the labeler (and the canaries, and a labeler's evaluation): a problem's sampled
solutions, split into steps and graded, and the grade of an answer (`Verdict`, grading/math.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prm_synth.records.schema import Problem, RejectedRecord, VerdictStatus


@dataclass(frozen=True)
class Verdict:
    status: VerdictStatus
    extracted: str | None
    reason: str | None  # how it was decided (numeric, math_verify) or why it is unknown


def solution_id(problem_id: str, index: int) -> str:
    """The stable id of a problem's index-th sampled solution (the row id, and its rejection's)."""
    return f"{problem_id}-s{index}"


@dataclass
class Solution:
    """One sampled solution, split into steps (losslessly) and graded."""

    problem: Problem
    index: int
    steps: list[str]
    verdict: Verdict
    tokens: int  # its share of the sampling request's tokens (generated + prompt / n)
    generated_tokens: int = 0  # the tokens the policy generated for it (a rollout's length is judged by it)
    given_id: str | None = None  # a given solution's own id (problems.kind solutions), kept as its row's

    @property
    def id(self) -> str:
        return self.given_id if self.given_id is not None else solution_id(self.problem.id, self.index)


@dataclass
class Sampled:
    solutions: list[Solution] = field(default_factory=list)
    rejected: list[RejectedRecord] = field(default_factory=list)
    tokens: int = 0  # prompt + generated tokens of every sampling request
    completions: int = 0  # solutions drawn, split or not

    def __iadd__(self, other: Sampled) -> Sampled:
        self.solutions += other.solutions
        self.rejected += other.rejected
        self.tokens += other.tokens
        self.completions += other.completions
        return self
