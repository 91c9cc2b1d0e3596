"""Every choice of the change-point search that changes a row, in one frozen object.

Each field says what it trades; why it has its value, and what removing it does, is in the tuning
table (docs/design/changepoint-tuning.md, one row per field), never here. Constants that are pure
numerics (guards against log(0), table sizes, cache sizes) stay in their modules; the table's intro
names them.

The search's, pooling's and the label rules' choices, read per labeler: `of(config)` sets the two a
pipeline file may set (`confidence`, `changepoint_max_rollouts`). The model's constants (its grids and
hazards, which its tables are built from once, at import) are not settings: they live in
engine/model.py. Whether a token budget is set is the labeler's `TokenBudget` (annotate/token_cost.py),
handed to the search beside these. Every function takes the settings it reads as an argument (no
parameter defaults to these defaults).

Like vLLM's config hash, a field that changes rows is a labeling choice: changing its default changes
rows, so it needs a new `LABELER_REVISIONS` entry (tests/annotate/test_golden_rows.py fails without one).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

TUNING = "docs/design/changepoint-tuning.md"


@dataclass(frozen=True)
class ChangepointSettings:
    """The change-point search's settings (defaults: the labeler's); `of(config)` reads a binary config."""

    # ---- labels
    confidence: float = 0.9
    """p_good a good label needs (and P(bad) a bad label right after a good one): precision against coverage."""
    bad_confidence: float = 0.95
    """P(bad) a lone bad label needs: bad-label precision against located errors."""

    # ---- budget
    max_rollouts: int = 56
    """Rollouts a solution may take while no first error is being pinned: coverage of easy rows against cost."""
    localize_max_rollouts: int = 128
    """Rollouts a solution may take in all (pinning included; `changepoint_max_rollouts` sets it): located errors against cost."""
    batch: int = 4
    """Rollouts a probe (and a checked early prefix) asks for: fewer decisions against finer stopping."""
    localize_cap: int = 32
    """Graded rollouts one prefix may take while pinning the first error: located errors against cost."""

    # ---- when a probe is worth its rollouts
    min_gain: float = 0.01
    """Bits of first-error uncertainty a rollout must be expected to remove: cost against coverage."""
    localize_min_gain: float = 0.006
    """The same while the first error is not pinned, first phase: located errors against cost."""
    second_phase_localize_min_gain: float = 0.0085
    """The same under the shard's pooled priors: rollouts spent on hopeless rows against located errors."""
    probe_levels: tuple[float, ...] = (0.8, 0.5, 0.2)
    """P(prefix clean) levels whose prefixes are candidate probes: decision cost against probe choice."""
    ambiguous_clean: tuple[float, float] = (0.05, 0.95)
    """A probed prefix with P(clean) inside this band is a candidate again: re-probing against cost."""

    prefix_batch_min: int = 3
    """Rollouts OmegaPRM's bisection asks of a prefix at a time, at least (else `probe_batch`): decisions against stopping sooner."""

    # ---- two phases and pooling
    pool_after: int = 16
    """Rollouts a search spends under the default priors before waiting for the shard's pooled ones: pooling's evidence against its delay."""
    pool_rounds: int = 8
    """EM rounds of the shard's pooled priors: convergence against time."""
    pool_strength: float = 8.0
    """Solutions' worth of the default priors in the pooled ones: a small shard's stability against its own reading."""
    recent_share_prior: float = 0.1
    """Share of errors read with a fresh error's extra luck before the shard says otherwise."""
    k_choices: tuple[float, ...] = (60.0, 12.0, 400.0)
    """Overdispersion k of a prefix's rollouts a shard's pooling may choose (the searches start at the default's first): fit against caution."""
    recent_choices: tuple[float, ...] = (0.5,)
    """A fresh error's extra luck r the shard's relabeling may read errors with (none: never): a noticed error against a hard step."""

    # ---- right answers after a wrong step
    check_correct: float = 0.25
    """Share of correct-answer solutions whose early prefixes are tested first: measuring hidden errors against cost."""
    check_prefixes: int = 8
    """Early prefixes a checked solution tests at most, at any length: power of the check against cost."""
    slip_significance: float = 0.05
    """Family-wise level of the dip test that finds a repaired slip: found slips against false ones."""
    slip_min_later: int = 8
    """Graded rollouts after a prefix the dip test needs before it reads the prefix: power against false slips."""
    process_error_odds: float = 0.5
    """P(error) from which a tested right answer counts as holding a process error: the measured rate's bias."""
    tested_share_prior: tuple[float, float] = (0.5, 4.5)
    """Beta prior of the shares measured on tested right answers: a small shard's caution against its own reading."""

    # ---- a lone bad label under the shard's main luck mode
    mode_rise: float = 1.5
    """A luck weight this many times its neighbour's starts another mode: how readily the luck prior splits."""

    def __post_init__(self) -> None:
        # the decision memo hashes the settings at every decision: hashed once (the object is frozen)
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self))))

    @classmethod
    def of(cls, config: Any) -> ChangepointSettings:
        """A binary config's settings: its confidence (bad labels at least `bad_confidence`), and
        `changepoint_max_rollouts` bounding a solution's rollouts (the budget outside pinning too)."""
        bound = config.changepoint_max_rollouts
        return cls(
            confidence=config.confidence,
            bad_confidence=max(config.confidence, cls.bad_confidence),
            max_rollouts=min(cls.max_rollouts, bound),
            localize_max_rollouts=bound,
        )

    @classmethod
    def of_bisection(cls, config: Any) -> ChangepointSettings:
        """OmegaPRM's bisection with the posterior: its config's confidence, the other settings the default's."""
        return cls(confidence=config.confidence)

    def __hash__(self) -> int:
        return self.__dict__["_hash"]

    def second_phase(self) -> ChangepointSettings:
        """The settings a search goes on under once it has the shard's pooled priors (one object per
        settings object, so the searches of a shard share one memo table and compare by identity)."""
        second = self.__dict__.get("_second")
        if second is None:
            second = replace(self, localize_min_gain=self.second_phase_localize_min_gain)
            object.__setattr__(self, "_second", second)
        return second

    def most_rollouts(self) -> int:
        """The most rollouts one solution's search may ask for (a checked solution's early prefixes included)."""
        return self.localize_max_rollouts


DEFAULTS = ChangepointSettings()
FIELDS = tuple(f.name for f in fields(ChangepointSettings))
