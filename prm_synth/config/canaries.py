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

from pydantic import Field

from prm_synth.config.base import Strict


class CanariesConfig(Strict):
    """Planted-error canaries: how many per shard, and from which seed they are drawn."""

    enabled: bool = True
    """Plant canaries in every shard (off: the judge's accuracy on right answers reads the pinned rows and
    the prior only, and `estimated_precision` has no planted errors to rest on)."""
    share: float = Field(0.1, ge=0.0, le=1.0)
    """The share of a shard's solutions planted with an error (at least `min_per_shard`, at most all the
    eligible ones: right-answer solutions whose rollouts found no error)."""
    min_per_shard: int = Field(12, ge=0, le=100_000)
    """The fewest canaries a shard plants, where it has that many eligible solutions."""
    wrong_answer_share: float = Field(0.3, ge=0.0, le=1.0)
    """The share of canaries planted in the step that states the final answer (the answer turns wrong);
    the others are planted in an earlier step, so the final answer stays right and hides the error."""
    seed: int = 0
    """The seed of the draw (which solutions, which step, which change): a resumed run plants the same."""
