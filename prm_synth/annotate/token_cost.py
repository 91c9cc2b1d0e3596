"""What a probe is expected to cost in tokens, and its worth per expected token.

A rollout from prefix j writes the steps left, j..n-1, and then the answer: at hundreds of steps a
probe near the start of a trace costs many times one near its end. With a token budget
(`annotate.max_rollout_tokens`) the change-point search ranks its candidate probes by expected bits
per expected token instead of per rollout. The cost is read as the steps left to write, which is
what a rollout's length grows with; scaled so that a probe from the middle of the solution keeps its
gain per rollout, the search's thresholds (bits a rollout must be worth) keep their meaning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def expected_cost(prefixes: Sequence[int], n: int) -> np.ndarray:
    """A rollout's expected length from each prefix, in steps left to write (the answer counts as one)."""
    return np.maximum(1.0, n - np.asarray(prefixes, dtype=float) + 1.0)


def per_expected_token(gains: np.ndarray, prefixes: Sequence[int], n: int, weighted: bool) -> np.ndarray:
    """`gains` (bits per rollout of each candidate prefix) as bits per expected token, in units of a
    rollout from the middle of an n-step solution; unchanged when not `weighted` (no token budget)."""
    if not weighted:
        return gains
    middle = (n + 3) / 2.0  # the mean of expected_cost over the prefixes a search probes, 0..n-1
    return np.asarray(gains, dtype=float) * middle / expected_cost(prefixes, n)


@dataclass(frozen=True)
class TokenBudget:
    """`annotate.max_rollout_tokens`, read once (`of`) and handed to the scheduler, which enforces it, and
    to the search, which ranks its probes per expected token when it is set."""

    max_tokens: int | None = None  # tokens one job's rollouts may generate in all (None: no limit)

    @classmethod
    def of(cls, annotate: Any) -> TokenBudget:
        """The budget an annotate section sets (every method declares `max_rollout_tokens`)."""
        return cls(annotate.max_rollout_tokens)

    @property
    def limited(self) -> bool:
        return self.max_tokens is not None

    def rollout_cap(self, spent: int, n: int, sampling_max: int) -> int:
        """The `max_tokens` each of `n` new rollouts may write so that the job's rollouts never generate
        more than the budget in all, whatever each writes (`spent`: generated, or held by requests in
        flight at their own cap); 0 when not one token is left for each."""
        if self.max_tokens is None:
            return sampling_max
        return max(0, min(sampling_max, (self.max_tokens - spent) // max(n, 1)))


NO_TOKEN_BUDGET = TokenBudget()
