"""How solutions are sampled, split into steps, and how rollouts are sampled (prm_synth/sampling/)."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from prm_synth.config.base import MAX_SAMPLES, MAX_TEMPERATURE, MAX_TOKENS, Strict


def compile_steps_pattern(pattern: str) -> re.Pattern[str]:
    """`steps.pattern` compiled, or a ValueError naming the problem (checked when the config loads; the
    step splitter compiles it the same way, prm_synth/prompting/steps.py)."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"invalid steps pattern {pattern!r}: {e}") from None


class SamplingConfig(Strict):
    """How solutions are sampled from the policy."""

    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"top_k": None}  # added later; None samples as before

    samples_per_problem: int = Field(4, ge=1, le=MAX_SAMPLES, strict=True)
    """Solutions sampled per problem (each becomes a row)."""
    max_tokens: int = Field(512, ge=1, le=MAX_TOKENS)
    """Tokens a solution may take."""
    temperature: float = Field(0.7, ge=0.0, le=MAX_TEMPERATURE)
    """Sampling temperature of the solutions."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling's probability mass."""
    top_k: int | None = Field(None, ge=1, le=1_000_000)
    """Sample from the k likeliest tokens only (None: all of them); reasoning models ask for it (Qwen3: 20)."""


class StepsConfig(Strict):
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"min_chars": 0, "max_steps": None}  # added later, "as before"

    strategy: Literal["paragraph", "line", "step-marker", "regex", "thinking", "code", "code-whole"] = "line"
    """How a solution is split into steps: one a line, one a paragraph, at "Step N" markers, at the end of
    each match of `pattern`, or `thinking`: the paragraphs of a thinking trace, then the answer after its
    close marker as the last step (the policy's `thinking` markers)."""
    pattern: str | None = None
    """The regular expression steps are split at (required by `strategy: regex`)."""
    min_chars: int = Field(0, ge=0, le=100_000)
    """strategy thinking: a paragraph shorter than this many characters is merged into the next one."""
    max_steps: int | None = Field(None, ge=2, le=100_000)
    """At most this many steps a solution: neighbours are merged evenly (None: no limit). With thinking,
    the answer section stays the last step of its own."""

    @model_validator(mode="after")
    def _pattern(self) -> StepsConfig:
        if self.strategy == "regex" and not self.pattern:
            raise ValueError("steps.pattern is required when steps.strategy is 'regex'")
        if self.pattern is not None:
            compile_steps_pattern(self.pattern)  # a bad pattern fails here, not in every shard
        return self


class RolloutConfig(Strict):
    """How rollouts from a prefix are sampled (the solutions themselves follow `sampling`)."""

    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"top_k": None}  # added later; None samples as before

    max_tokens: int = Field(512, ge=1, le=MAX_TOKENS)
    """Tokens a rollout may take."""
    temperature: float = Field(0.7, ge=0.0, le=MAX_TEMPERATURE)
    """Sampling temperature of the rollouts."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling's probability mass for rollouts."""
    top_k: int | None = Field(None, ge=1, le=1_000_000)
    """Sample from the k likeliest tokens only (None: all of them)."""
