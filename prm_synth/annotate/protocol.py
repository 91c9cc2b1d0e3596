"""The annotator protocol: what an annotation algorithm and the probe scheduler say to each other.

An annotator is a generator. It yields a list of `Probe`s (prefix text, rollouts wanted) and is sent
back one `ProbeResult` per probe, in the same order; when it returns, its return value is the
annotation. It may also yield a `Wait` (a future): it is sent the future's result once it is done,
e.g. priors pooled from the first phase of a shard's other searches. This module is all an algorithm
needs to import: it knows nothing of engines or grading, which stay in the scheduler (`scheduler.py`).
"""

from __future__ import annotations

from collections.abc import Generator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from prm_synth.records import VerdictStatus

T = TypeVar("T")

# One rollout of a prefix: (completion text, verdict status, generated tokens).
Rollout = tuple[str, VerdictStatus, int]


@dataclass(frozen=True)
class Probe:
    """Estimate `prefix` (the assistant text so far) with its first `k` rollouts (samples 0..k-1).

    `step` is the annotator's own tag (e.g. the index of the prefix's last step), echoed back.
    """

    prefix: str
    k: int
    step: int = -1

    @classmethod
    def of_steps(cls, steps: list[str], step: int, k: int) -> Probe:
        """The prefix made of steps 0..step exactly (step −1: the empty prefix, the question alone)."""
        return cls("".join(steps[: step + 1]), k, step)


@dataclass(frozen=True)
class ProbeResult:
    """The answer to one probe: the first k samples of its prefix, exactly (shared with other probes of it, never more: rows must not depend on who asked first)."""

    step: int
    correct: int = 0
    total: int = 0
    unknown: int = 0  # rollouts whose answer could not be graded: in total, never correct, not evidence
    tokens: int = 0  # generated tokens of all rollouts behind this estimate
    # The rollouts themselves, for tree search.
    rollouts: tuple[Rollout, ...] = ()

    @property
    def graded(self) -> int:
        """Rollouts with a verdict: the evidence (an ungradable rollout is unknown, not a failure)."""
        return self.total - self.unknown

    @property
    def mc(self) -> float | None:
        return self.correct / self.graded if self.graded else None


@dataclass(frozen=True)
class Wait:
    """What an annotator yields to wait for something other annotators make (not for rollouts): it is
    sent `future.result()` when the future is done. A waiting annotator does not count against the
    scheduler's `max_in_flight`: what it waits for may need other annotators to run first."""

    future: Future[Any]


# An annotator yields probe lists (or a `Wait`), receives result lists (or the future's result), and
# returns its annotation.
Annotator = Generator[list[Probe] | Wait, Any, T]
