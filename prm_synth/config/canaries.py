"""The `canaries` section: planted errors whose first step is known, to measure the labels on the run's own model.

Each shard takes a share of its own solutions (right-answer ones whose rollouts found no error) and plants
one error in a chosen step, in the solution's own text: one number or one operator of that step changed,
nothing added (prm_synth/shard/canaries.py). The canaries go through the same labeler and the same judge
with the same prompts; they are written apart (OUT/canaries/), never to the data, and what they measure
(the rollouts' and the judge's recall of a known first error, by answer class) is what the consensus
reads the judge's accuracy from and what `estimated_precision` rests on.

Cost: a canary is labeled and judged like a row, so a share s costs about s more rollouts and judge
requests per shard (the default 0.1 with at least 12 a shard: about 10% on shards of 120 rows or more,
more on small shards).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from prm_synth.config.base import Strict


class CanariesConfig(Strict):
    """Planted-error canaries: how many per shard, how planted, and from which seed they are drawn."""

    # added with canaries the policy continues (issue 57): at these values a config hashes as before
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"planter": "continued", "control_share": 0.5}

    enabled: bool = True
    """Plant canaries in every shard (off: the judge's accuracy on right answers reads the pinned rows and
    the prior only, and `estimated_precision` has no planted errors to rest on)."""
    share: float = Field(0.1, ge=0.0, le=1.0)
    """The share of a shard's solutions planted with an error (at least `min_per_shard`, at most all the
    eligible ones: graded solutions with a plantable step the rollouts found clean before; `in_place`:
    right-answer solutions whose rollouts found no error)."""
    min_per_shard: int = Field(12, ge=0, le=100_000)
    """The fewest canaries a shard plants, where it has that many eligible solutions."""
    wrong_answer_share: float = Field(0.3, ge=0.0, le=1.0)
    """`in_place` only: the share of canaries planted in the step that states the final answer (the answer
    turns wrong); the others are planted in an earlier step, so the final answer stays right and hides the
    error. (A continued canary's answer is the policy's.)"""
    planter: Literal["continued", "in_place"] = "continued"
    """How an error is planted. `continued`: a row of either answer class is cut at a step where a natural
    error could stand (one that states a result not given by the question), drawn where the shard's own
    first errors stand and before the row's first bad label; that result is changed and the POLICY writes
    the rest (one sampled continuation, as a rollout), carrying the error on or repairing it as it does
    its own slips; the canary's graded final answer decides its answer class. `in_place`: the former
    planter, one number or operator changed with the rest as written, in right-answer rows only (the
    rollouts then never face the policy's own recovery from an error)."""
    control_share: float = Field(0.5, ge=0.0, le=10.0)
    """Clean controls per canary (`continued` only): right-answer rows the rollouts found clean (every step
    labeled good, every prefix at p_good >= 0.9), judged with every sample like the canaries, so the
    judge's false alarms are measured too. Cost: each is `judge.samples` judge requests, less the votes
    the judge stage then reads back instead of asking again (a control is a data row)."""
    seed: int = 0
    """The seed of the draw (which solutions, which step, which change): a resumed run plants the same."""
