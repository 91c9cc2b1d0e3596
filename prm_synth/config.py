"""The pipeline config: a pydantic model loaded from YAML. Unknown keys and wrong types fail early,
with the field named, before any work starts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- problems
class FieldMapping(Strict):
    """Which columns hold the question and the gold answer, and how to read the answer."""

    question: str = "question"
    answer: str = "answer"
    id: str | None = None
    # gsm8k: the answer column ends with "#### 72"; boxed: take the last \boxed{}; plain: as is.
    answer_format: Literal["plain", "gsm8k", "boxed"] = "plain"


PRESETS: dict[str, FieldMapping] = {
    "gsm8k": FieldMapping(question="question", answer="answer", answer_format="gsm8k"),
    "math": FieldMapping(question="problem", answer="answer", id="unique_id", answer_format="plain"),
}


class BuiltinSource(Strict):
    kind: Literal["builtin"] = "builtin"
    count: int = Field(100, ge=1)
    seed: int = 0
    min_ops: int = Field(2, ge=1, le=40)
    max_ops: int = Field(8, ge=1, le=40)

    @model_validator(mode="after")
    def _ops_range(self) -> BuiltinSource:
        if self.min_ops > self.max_ops:
            raise ValueError("min_ops must be <= max_ops")
        return self


class _MappedSource(Strict):
    preset: Literal["gsm8k", "math"] | None = None
    fields: FieldMapping | None = None

    def mapping(self) -> FieldMapping:
        if self.fields is not None:
            return self.fields
        return PRESETS[self.preset] if self.preset else FieldMapping()


class FileSource(_MappedSource):
    kind: Literal["file"] = "file"
    path: Path

    @field_validator("path")
    @classmethod
    def _exists(cls, v: Path) -> Path:
        if not v.exists():
            raise ValueError(f"problem file not found: {v}")
        return v


class HFSource(_MappedSource):
    kind: Literal["hf"] = "hf"
    path: str
    name: str | None = None
    split: str = "test"
    streaming: bool = True


ProblemSource = Annotated[BuiltinSource | FileSource | HFSource, Field(discriminator="kind")]


# ---------------------------------------------------------------- engines
class SimulatedPolicyConfig(Strict):
    kind: Literal["simulated"] = "simulated"
    step_error: float = Field(0.1, ge=0.0, le=1.0)
    recover: float = Field(0.05, ge=0.0, le=1.0)
    seed: int = 0
    step_format: Literal["line", "paragraph"] = "line"
    model_name: str = "simulated-arithmetic"


class VLLMConfig(Strict):
    kind: Literal["vllm"] = "vllm"
    model: str  # a local path or a Hub name
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = None  # None: float32 on CPU
    max_model_len: int | None = 2048
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)  # None: 0.25 on CPU, 0.9 on GPU
    seed: int = 0
    tensor_parallel_size: int = Field(1, ge=1)
    enforce_eager: bool | None = None  # None: True on CPU (no 220 s compile)
    enable_prefix_caching: bool = True
    system_prompt: str | None = None
    demo: bool = False  # True: `model` is ignored, the PyPI demo model is prepared and used


class OpenAIConfig(Strict):
    kind: Literal["openai"] = "openai"
    model: str
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable, never from the file
    max_concurrency: int = Field(16, ge=1)
    max_retries: int = Field(6, ge=0)
    timeout_s: float = Field(120.0, gt=0)
    system_prompt: str | None = None
    # completions endpoint: the prompt is rendered with this tokenizer's chat template (None: model)
    tokenizer: str | None = None


EngineConfig = Annotated[SimulatedPolicyConfig | VLLMConfig | OpenAIConfig, Field(discriminator="kind")]


class SimulatedJudgeConfig(Strict):
    """A judge that knows the truth recomputed from the step text and names it with `accuracy`."""

    kind: Literal["simulated-judge"] = "simulated-judge"
    accuracy: float = Field(0.8, ge=0.0, le=1.0)
    seed: int = 0
    model_name: str = "simulated-judge"


JudgeEngineConfig = Annotated[SimulatedJudgeConfig | VLLMConfig | OpenAIConfig, Field(discriminator="kind")]


class JudgeConfig(Strict):
    engine: JudgeEngineConfig
    samples: int = Field(1, ge=1)  # m judge samples per solution, majority vote
    temperature: float = Field(0.7, ge=0.0)
    max_tokens: int = Field(1024, ge=1)
    prompt_version: str = "v1"


class ConsensusConfig(Strict):
    policy: Literal["agree", "judge-only", "mc-only"] = "agree"
    tolerance: int = Field(0, ge=0)  # |judge - mc| <= tolerance counts as agreement (both -1 always agree)


# ---------------------------------------------------------------- stages
class SamplingConfig(Strict):
    samples_per_problem: int = Field(4, ge=1)
    max_tokens: int = Field(512, ge=1)
    temperature: float = Field(0.7, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)


class StepsConfig(Strict):
    strategy: Literal["paragraph", "line", "step-marker", "regex"] = "line"
    pattern: str | None = None  # for strategy: regex

    @model_validator(mode="after")
    def _pattern(self) -> StepsConfig:
        if self.strategy == "regex" and not self.pattern:
            raise ValueError("steps.pattern is required when steps.strategy is 'regex'")
        return self


class AnnotateConfig(Strict):
    method: Literal["mc", "binary", "omegaprm"] = "mc"
    k: int = Field(8, ge=1)
    stop_at_first_zero: bool = False  # per-step MC: stop probing after the first prefix with MC 0
    rollout_max_tokens: int = Field(512, ge=1)
    rollout_temperature: float = Field(0.7, ge=0.0)
    # binary search: the test that decides whether a prefix is still good.
    #   fixed: k rollouts, good when MC > 0 (plain bisection, the OmegaPRM paper's rule)
    #   sprt:  Wald's sequential test of H_bad (MC <= bad_rate) against H_good (MC >= good_rate),
    #          sampling `probe_batch` rollouts at a time, at most `probe_max_rollouts`
    search_test: Literal["sprt", "fixed"] = "sprt"
    bad_rate: float = Field(0.05, gt=0.0, lt=1.0)
    good_rate: float = Field(0.3, gt=0.0, lt=1.0)
    sprt_error: float = Field(0.1, gt=0.0, lt=0.5)  # both error probabilities of each test
    probe_batch: int = Field(2, ge=1)
    probe_max_rollouts: int = Field(32, ge=1)
    recheck: bool = True  # re-test the boundary more strictly and search again if it does not hold
    verify_correct: float = Field(0.0, ge=0.0, le=1.0)  # share of correct solutions checked by per-step MC
    # OmegaPRM (Luo et al. 2024): paper defaults; lengths are measured in generated tokens.
    omega_alpha: float = Field(0.5, gt=0.0, le=1.0)
    omega_beta: float = Field(0.9, gt=0.0, le=1.0)
    omega_length: int = Field(500, ge=1)  # L, tokens
    omega_c_puct: float = Field(0.125, ge=0.0)
    omega_k: int = Field(16, ge=1)  # rollouts per state
    omega_search_limit: int = Field(100, ge=1)  # selections (MCTS iterations) per question
    omega_rollout_budget: int = Field(400, ge=1)  # hard cap on rollouts per question
    # How the bisection inside OmegaPRM decides a prefix: `fixed` is the paper (omega_k rollouts,
    # MC > 0 good); `sprt` uses the sequential test of `binary` (bad_rate / good_rate above).
    omega_search_test: Literal["fixed", "sprt"] = "fixed"
    omega_screen: bool = False  # keep a question only if its first rollouts are neither all right nor all wrong
    save_trees: bool = False  # write each question's tree (JSON node-link) next to the shards
    max_batch_requests: int = Field(256, ge=1)  # requests per engine call
    max_in_flight: int = Field(64, ge=1)  # solutions whose annotators run concurrently

    @model_validator(mode="after")
    def _rates(self) -> AnnotateConfig:
        if self.bad_rate >= self.good_rate:
            raise ValueError("annotate.bad_rate must be below annotate.good_rate")
        return self


class LabelConfig(Strict):
    rule: Literal["hard", "soft", "relative"] = "hard"
    significance: float = Field(0.05, gt=0.0, lt=1.0)  # for rule: relative


class OutputConfig(Strict):
    shard_size: int = Field(64, ge=1)  # problems per shard (one Prefect task each)


class RunConfig(Strict):
    """How a run is executed; none of it changes the rows (so it is not in the fingerprint)."""

    max_parallel_shards: int = Field(2, ge=1)  # shard tasks in flight (bounds memory)
    gpu_concurrency_limit: str | None = None  # name of a Prefect global concurrency limit (one slot per GPU)
    ray_num_gpus: float | None = Field(None, ge=0)  # GPUs a shard task asks Ray for (None: from the engine)


class PipelineConfig(Strict):
    name: str = "prm-synth"
    problems: ProblemSource
    policy: EngineConfig
    sampling: SamplingConfig = SamplingConfig()
    steps: StepsConfig = StepsConfig()
    annotate: AnnotateConfig = AnnotateConfig()
    labels: LabelConfig = LabelConfig()
    judge: JudgeConfig | None = None
    consensus: ConsensusConfig | None = None
    output: OutputConfig = OutputConfig()
    run: RunConfig = RunConfig()

    @model_validator(mode="after")
    def _consensus_needs_a_judge(self) -> PipelineConfig:
        if self.consensus is not None and self.consensus.policy != "mc-only" and self.judge is None:
            raise ValueError(f"consensus.policy {self.consensus.policy!r} needs a judge section")
        return self

    def fingerprint(self) -> str:
        """Hash of everything that changes the rows; run-time knobs (parallelism) are left out."""
        data = self.model_dump(mode="json", exclude={"run": True, "annotate": {"max_batch_requests", "max_in_flight"}})
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class ConfigError(ValueError):
    """A pipeline file that cannot be used; the message names the field."""


def format_validation_error(err: ValidationError, where: str) -> str:
    lines = [f"invalid pipeline config {where}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {loc}: {e['msg']}")
    return "\n".join(lines)


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> PipelineConfig:
    """Read and validate a YAML pipeline file; relative paths inside it resolve against its folder."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"pipeline file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"pipeline file {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"pipeline file {path} must hold a mapping at the top level")
    src = data.get("problems")
    if isinstance(src, dict) and src.get("kind") == "file" and "path" in src:
        p = Path(str(src["path"])).expanduser()
        if not p.is_absolute():  # like other config files: relative to the file that names it
            src["path"] = str((path.parent / p).resolve())
    return validate_config(data | (overrides or {}), where=str(path))


def validate_config(data: dict[str, Any], where: str = "") -> PipelineConfig:
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, where)) from None
