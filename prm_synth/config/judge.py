"""The judge, consensus and verify sections (prm_synth/judge/)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from prm_synth.config.base import MAX_SAMPLES, MAX_TEMPERATURE, MAX_TOKENS, Strict
from prm_synth.config.engines import JudgeEngineConfig
from prm_synth.prompting.prompts import VERIFY_PROMPT_VERSION, JudgePromptVersion, VerifyPromptVersion

# "Pinned": the rollouts put a row's first error at this probability or more, so no vote is needed on
# it and the judge's accuracy is measured on it (prm_synth/judge/accuracy.py: one definition, one level)
PINNED = 0.99


class JudgeConfig(Strict):
    # Fields added with judge selection: read by the `soft` policy only, so hashed only under it (under any
    # other policy they change no row, and configs stored before they existed hash as they did).
    SOFT_ONLY: ClassVar[tuple[str, ...]] = ("select", "skip_confidence", "calibrate")

    engine: JudgeEngineConfig
    """The judge model: `simulated-judge`, `vllm` or `openai` (same keys as a policy engine)."""
    samples: int = Field(1, ge=1, le=MAX_SAMPLES, strict=True)
    """Judge samples per solution; their first-error indexes are combined by majority vote."""
    temperature: float = Field(0.7, ge=0.0, le=MAX_TEMPERATURE)
    """Sampling temperature of the judge."""
    max_tokens: int = Field(1024, ge=1, le=MAX_TOKENS)
    """Tokens a judge answer may take."""
    prompt_version: JudgePromptVersion = "v1"
    """The judge prompt's version (hashed into the fingerprint)."""
    select: Literal["needed", "all"] = "needed"
    """Which rows the judge is asked about under the `soft` consensus policy. `needed`: only rows where a
    vote can change a label (right-answer rows, rows whose first error the rollouts left open), votes asked
    one at a time until the posterior over the first error reaches `consensus.confidence` (at most
    `samples`); `all`: every row, `samples` votes at once. Other policies (and no consensus) judge every row."""
    skip_confidence: float = Field(PINNED, gt=0.0, le=1.0)
    """The level at which the rollouts pin a first error. Under `select: needed`, a wrong-answer row is not
    sent when the rollouts alone put its first error at this probability or more (never below
    `consensus.confidence`): they pinned it, and no vote is needed. The judge's accuracy is measured on the
    rows pinned at this level."""
    calibrate: float = Field(0.1, ge=0.0, le=1.0)
    """Under `select: needed`, the share of wrong-answer rows whose first error the rollouts pinned that the
    judge is still asked about (one vote each, chosen by row id): the rows its accuracy on wrong answers is
    measured on. 0 asks none (that class then reads `consensus.prior_accuracy`)."""


class ConsensusConfig(Strict):
    """How the judge's index and the rollouts' labels are combined (prm_synth/judge/consensus.py).

    `agree`: kept where the judge's index falls in the interval the labels leave open (`tolerance` steps
    wider), which it then completes; `judge-only`: labels follow the judge; `mc-only`: labels as measured;
    `soft` (the default): labels follow the posterior over the first error (p_good and the votes under the
    judge's accuracy measured in the shard per answer class, `prior_accuracy` weighing `prior_votes`
    votes), kept where its most likely first error has probability >= `confidence`.
    """

    # added with per-class accuracy (JudgeConfig), and with canaries (#49)
    SOFT_ONLY: ClassVar[tuple[str, ...]] = ("class_min_votes", "target_precision")

    # `agree` before: a folder made under that default resumes with it (identity.with_former_defaults)
    policy: Literal["agree", "judge-only", "mc-only", "soft"] = "soft"
    """How the judge's first-error index and the rollouts' labels are combined (see above)."""
    tolerance: int = Field(0, ge=0)
    """`agree`: steps the agreement interval is widened by (-1, "no error", never agrees with a step)."""
    confidence: float = Field(0.9, gt=0.0, le=1.0)
    """`soft`: a row is kept when its most likely first error has at least this probability."""
    prior_accuracy: float = Field(0.7, gt=0.0, lt=1.0)
    """`soft`: the judge's accuracy assumed before the shard's own measurement."""
    prior_votes: float = Field(4.0, ge=0.0, le=1e6)
    """`soft`: how many votes `prior_accuracy` weighs against the shard's measurement."""
    target_precision: float = Field(0.97, gt=0.0, lt=1.0)
    """`soft`: the precision the kept labels must reach: rows are kept from the surest down while a shard's
    kept good labels and kept bad labels each stay at this precision (under the posterior, one standard
    error towards the pessimistic end of the judge's measured rates, with one standard deviation of the
    wrong-label count to spare); a row that misses it keeps only its labels that reach it on their own,
    its other steps unlabeled (`below_target`). Votes are asked while they can still move a row across it.
    0.97: the step precision the issue that set it (#49) holds PRM training data to; the run reports what
    it reached (`estimated_precision`)."""
    class_min_votes: int = Field(20, ge=0, le=1_000_000)
    """`soft`: the judge's accuracy on one answer class (right-answer or wrong-answer rows) is measured from
    the readable votes on that class's rows the rollouts pinned; with fewer votes than this, the class reads
    the stated prior (`prior_accuracy`) instead."""

    @model_validator(mode="after")
    def _soft_knobs_only_for_soft(self) -> ConsensusConfig:
        # a stored config holds every field: only a value off its default is a setting
        changed = {name for name, f in type(self).model_fields.items() if getattr(self, name) != f.default}
        unused = {"confidence", "prior_accuracy", "prior_votes", "class_min_votes", "target_precision"} & changed
        if self.policy != "soft" and unused:
            raise ValueError(f"{sorted(unused)} are read by the `soft` policy only, not by `{self.policy}`")
        if self.policy == "soft" and "tolerance" in changed:
            raise ValueError("`tolerance` is not read by the `soft` policy")
        return self


class VerifyConfig(Strict):
    """Verification chains (ThinkPRM / GenPRM-style data for generative verifiers), see prm_synth/judge/verify.py.

    `votes` chains per row; a chain is kept when its step verdicts agree with the row's labels under
    `rule`: `every-step` allows at most `tolerance` disagreeing steps (0: every labeled step up to the
    first error agrees), `first-error` wants the chain's first incorrect step within `tolerance` steps
    of the labels' first error. With `min_confidence` > 0 only labels whose p_good clears it are compared.
    """

    engine: JudgeEngineConfig
    """The model that writes verification chains: `simulated-judge`, `vllm` or `openai`."""
    votes: int = Field(4, ge=1, le=MAX_SAMPLES, strict=True)
    """Verification chains sampled per row."""
    temperature: float = Field(0.7, ge=0.0, le=MAX_TEMPERATURE)
    """Sampling temperature of the chains."""
    max_tokens: int = Field(2048, ge=1, le=MAX_TOKENS)
    """Tokens a chain may take."""
    prompt_version: VerifyPromptVersion = VERIFY_PROMPT_VERSION
    """The verifier prompt's version (hashed into the fingerprint)."""
    rule: Literal["every-step", "first-error"] = "every-step"
    """When a chain is kept: its step verdicts agree with the labels (`every-step`) or its first error does."""
    tolerance: int = Field(0, ge=0, le=1000)
    """Disagreeing steps (`every-step`) or steps of first-error distance (`first-error`) a kept chain may have."""
    min_confidence: float = Field(0.0, ge=0.0, le=1.0)
    """Only labels whose p_good (or 1 - p_good) clears this are compared (0: every label)."""
