"""The simulated engines' settings (`policy: {kind: simulated}`, `judge.engine: {kind: simulated-judge}`), each
field marked as changing the rows or as transport, like every engine's (prm_synth/config/engine_fields.py).

They are read by prm_synth/simulated/ alone, but live here: the config's engine unions (engines.py) name
them, and a config section inside simulated/ would make the config package and the simulated room import
each other (importing any module of a package runs the package's `__init__`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from prm_synth.config.base import Strict
from prm_synth.config.engine_fields import EngineFields, ThinkingConfig


class SimulatedPolicyConfig(EngineFields):
    ROW_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "kind",
            "step_error",
            "recover",
            "seed",
            "step_error_range",
            "recover_in_sample",
            "step_format",
            "model_name",
            "thinking",
            "recover_range",
            "recover_choices",
            "hard_step_error",
            "ungradable",
            "step_drift",
            "recent_recover",
            "repair",
            "repair_goes_on",
            "correlation",
        }
    )
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"thinking": None, "repair_goes_on": False}

    kind: Literal["simulated"] = "simulated"
    """A simulated arithmetic policy whose every step's truth is known (no model, no GPU)."""
    step_error: float = Field(0.1, ge=0.0, le=1.0)
    """Probability that a written step is a fresh error."""
    recover: float = Field(0.05, ge=0.0, le=1.0)
    """Probability that a continuation of a wrong prefix still reaches the right answer (luck)."""
    seed: int = 0
    """Seed of the simulated policy."""
    step_error_range: tuple[float, float] | None = None
    """Per-problem difficulty: each problem's step error drawn uniformly from [lo, hi] (None: step_error)."""
    recover_in_sample: bool = False
    """True: a freshly written error is also recovered from within the same completion (at `recover`),
    so sampled solutions can reach the right answer by luck; False: only continuations of a prefix do."""
    step_format: Literal["line", "paragraph"] = "line"
    """How steps are written: one a line, or one a paragraph."""
    model_name: str = "simulated-arithmetic"
    """The model name written to rows and the manifest."""
    thinking: ThinkingConfig | None = None
    """Write each solution as a thinking trace (one paragraph a step) closed by the close marker, then
    the answer; rollouts continue it as a thinking model would (None: plain solutions)."""
    # Worlds that break one assumption of a labeler's model each (benchmarks/fidelity.py); all off by default.
    recover_range: tuple[float, float] | None = None
    """Per-problem luck: each problem's `recover` drawn uniformly from [lo, hi] (None: recover)."""
    recover_choices: tuple[float, ...] | None = None
    """Luck populations: each problem's `recover` drawn from these values, each as likely (None: recover
    or recover_range). Two values make a shard whose luck has two modes, which no range gives."""
    hard_step_error: float | None = Field(None, ge=0.0, le=1.0)
    """One hard step per problem (its position drawn per problem): fresh errors there at this rate."""
    ungradable: float = Field(0.0, ge=0.0, le=1.0)
    """Share of completions (rollouts and samples) that cannot be graded: half cut off at max_tokens
    (finish reason "length"), half ending without an answer."""
    step_drift: float = Field(0.0, ge=0.0, le=1.0)
    """Per written step: with probability step_drift / 2 two operations go on one line (a skipped
    step), with step_drift / 2 a line without an equation follows (an extra step)."""
    recent_recover: float = Field(0.0, ge=0.0, le=1.0)
    """Luck that depends on where the prefix ends: a continuation of a wrong prefix also notices and
    fixes the error with probability recent_recover * 0.5 ** d, d = steps written after the error."""
    repair: float = Field(0.0, ge=0.0, le=1.0)
    """Repaired slips: a fresh error in the first half of the chain is noticed and repaired on the next
    step with this probability (the wrong equation stays in the text, the chain goes on from the right
    value), so a solution can hold a wrong step and still end on the gold answer. A continuation of a
    prefix that ends on such a slip repairs it at the same rate."""
    repair_goes_on: bool = False
    """With `repair`: a repaired slip leaves the chain clean, so the policy goes on writing fresh errors at
    its usual rate after it (wrong-answer solutions hold repaired slips as often as right ones), and a
    continuation of a prefix whose running value was put right (the slip repaired) goes on as one of a
    clean prefix: rollouts from after the slip reach the answer about as often as from a clean prefix.
    Any fresh slip in the first half may be repaired, not only the solution's first (False: a repaired
    slip is the solution's last error, as before)."""
    correlation: float = Field(0.0, ge=0.0, le=5.0)
    """Correlated rollouts: all continuations of one prefix share a factor exp(correlation * z), z ~ N(0, 1)
    drawn per prefix, on their step error and on the odds of their luck."""

    @field_validator("step_error_range", "recover_range")
    @classmethod
    def _range(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not 0.0 <= v[0] <= v[1] <= 1.0:
            raise ValueError("a range must be [lo, hi] with 0 <= lo <= hi <= 1")
        return v

    @field_validator("recover_choices")
    @classmethod
    def _choices(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if v is not None and (not v or not all(0.0 <= x <= 1.0 for x in v)):
            raise ValueError("recover_choices must be one or more rates, each between 0 and 1")
        return v

    @model_validator(mode="after")
    def _one_luck_rule(self) -> SimulatedPolicyConfig:
        if self.recover_range is not None and self.recover_choices is not None:
            raise ValueError("set recover_range or recover_choices, not both: each draws a problem's luck")
        return self


class JudgeErrorProfile(Strict):
    """How a simulated judge errs, like the judges ProcessBench measures (simulated/engines.py, SimulatedJudge).

    On a solution with an error it flags one (names a step, not -1) with `recall_wrong_answer` when the
    final answer is wrong and with `recall_right_answer` when it is right anyway (real judges are swayed by
    a right answer, and those are the rows rollouts cannot see); a flagged step is 1..`max_offset` steps off
    the true one with `off_by`. On a clean solution it names a step (a false alarm) with `false_alarm`.
    Any answer is unreadable (no box) with `format_failure`.
    """

    # added later: at 0 a profile errs as it did before they existed
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"early_miss": 0.0, "vote_correlation": 0.0}

    recall_wrong_answer: float = Field(0.9, ge=0.0, le=1.0)
    """Probability of flagging an error in a solution whose final answer is wrong."""
    recall_right_answer: float = Field(0.9, ge=0.0, le=1.0)
    """Probability of flagging an error in a solution whose final answer is right anyway."""
    off_by: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a flagged step is 1..`max_offset` steps off the true first error."""
    max_offset: int = Field(2, ge=1, le=100)
    """The largest distance of an off-by flag."""
    false_alarm: float = Field(0.0, ge=0.0, le=1.0)
    """Probability of naming a step in a clean solution."""
    format_failure: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that an answer is unreadable (no box)."""
    early_miss: float = Field(0.0, ge=0.0, le=1.0)
    """Extra chance to miss an error in the first half of the solution: where the simulated policy's
    `repair` repairs slips, so rollouts from the prefixes after it still reach the answer (their blind
    spot). The judge's misses then fall where the rollouts' do, as a right answer's do already."""
    vote_correlation: float = Field(0.0, ge=0.0, le=1.0)
    """The chance a vote repeats the row's one reading (a draw of this error model shared by every vote
    of the row: one misreading repeated) instead of reading the row afresh."""


class SimulatedJudgeConfig(EngineFields):
    """A judge that knows the truth recomputed from the step text: it names it with `accuracy` (another
    index uniformly otherwise), or errs as `errors` describes (then `accuracy` is not read, and refused)."""

    ROW_FIELDS: ClassVar[frozenset[str]] = frozenset({"kind", "accuracy", "errors", "seed", "model_name"})
    # without an error profile it writes what it wrote before profiles existed
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"errors": None}

    kind: Literal["simulated-judge"] = "simulated-judge"
    """A simulated judge that reads the truth from the step text and errs at set rates."""
    accuracy: float = Field(0.8, ge=0.0, le=1.0)
    """Probability of naming the true first error (another index uniformly otherwise)."""
    errors: JudgeErrorProfile | None = None
    """An error profile like the judges ProcessBench measures (then `accuracy` is not read)."""
    seed: int = 0
    """Seed of the simulated judge."""
    model_name: str = "simulated-judge"
    """The model name written to rows and the manifest."""

    @model_validator(mode="after")
    def _one_error_model(self) -> SimulatedJudgeConfig:
        # a stored config holds every field: only a value off its default is a setting
        if self.errors is not None and self.accuracy != type(self).model_fields["accuracy"].default:
            raise ValueError("give either `accuracy` (uniform errors) or `errors` (an error profile), not both")
        return self

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        data = super().fingerprint_part(transport)
        if self.errors is not None:
            data["errors"] = self.errors.without_added(data["errors"])
        return data
