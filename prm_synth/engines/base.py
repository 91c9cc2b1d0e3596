"""The engine protocol: one call, many requests, every completion back with token counts.

Every engine (simulated, vLLM in-process, OpenAI-compatible server) implements `Engine`.
Annotators never call an engine themselves; the probe scheduler batches their requests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from prm_synth.errors import PrmSynthError


@dataclass(frozen=True)
class SamplingOptions:
    """How to sample; mirrors the subset of vLLM's SamplingParams we rely on."""

    max_tokens: int = 512
    temperature: float = 0.7
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    top_k: int | None = None  # None: every token is a candidate


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt, `n` samples.

    The engine renders the prompt with the model's chat template: optional `system`, the `user`
    turn, then the assistant turn opened and followed by exactly `assistant_prefix`, so the
    model continues a partial solution (a continuation prompt is the templated question plus
    exactly the text of steps 0..i).
    """

    user: str
    assistant_prefix: str = ""
    system: str | None = None
    n: int = 1
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    # How many samples of this same prompt were drawn before: engines that derive randomness per
    # sample (the simulated policy) continue the sequence instead of repeating it.
    first_sample_index: int = 0


def sample_seed(request: GenerationRequest, engine_seed: int = 0) -> int:
    """The sampling seed of the request's first sample; sample i of the request takes this + i.

    Derived from the prompt (system, user turn, assistant prefix) and the sample's index among all
    samples of that prompt, never from arrival order: the same config gives the same samples at any
    `max_in_flight` or batch size, however the scheduler groups a prefix's samples into requests.
    "+ i" is vLLM's own rule for the samples of one request with n > 1 (`ParentRequest`: child i is
    seeded `seed + i`), so n samples asked of a vLLM server at once get the seeds they would get one
    by one. Below 2**62, so it fits the int64 engines take.
    """
    h = hashlib.blake2b(digest_size=8)
    for part in (engine_seed, request.system, request.user, request.assistant_prefix):
        h.update(repr(part).encode())
        h.update(b"\x00")
    return (int.from_bytes(h.digest(), "big") >> 2) + request.first_sample_index


@dataclass(frozen=True)
class Completion:
    """One sampled continuation (the text after `assistant_prefix`, not including it)."""

    text: str
    generated_tokens: int
    finish_reason: str | None = None


@dataclass(frozen=True)
class GenerationResult:
    """All `n` completions of one request, in request order."""

    completions: tuple[Completion, ...]
    prompt_tokens: int

    @property
    def generated_tokens(self) -> int:
        return sum(c.generated_tokens for c in self.completions)


@runtime_checkable
class Engine(Protocol):
    """A text generator. `generate` returns one result per request, in the same order."""

    @property
    def model_name(self) -> str: ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]: ...

    def close(self) -> None: ...


class EngineError(PrmSynthError, RuntimeError):
    """An engine could not produce results (after its own retries). The shard fails and is redone."""


class RequestRefused(EngineError):
    """The engine works but refuses this one request for what it asks (e.g. HTTP 400 "context length
    exceeded", a prompt vLLM rejects): repeating it cannot help, and it says nothing about the other
    requests. The pipeline rejects the solution (or problem) it belonged to, with the message, and goes
    on; any other `EngineError` means the engine failed, and the shard fails (and is redone on resume)."""


class RequestAbandoned(EngineError):
    """The caller gave the request up (its shard failed or stopped) before it finished."""


class RunStopped(EngineError):
    """The run is stopping (SIGINT/SIGTERM): this request was cancelled, or never sent (engines.stop_engines)."""


# What a streaming engine's step reports per finished request: its result, or why it failed.
Outcome = GenerationResult | EngineError


@runtime_checkable
class StreamingEngine(Protocol):
    """An engine that keeps a running batch and takes new requests while it works (continuous batching).

    Driven from one thread at a time (the `GenerationStream` in engines/stream.py serializes access):
    `add` hands a request in (raising when the engine refuses it; then nothing of it stays in the
    engine), `step` advances the engine until at least one request has finished (or a short while has
    passed) and returns the finished ones with their outcome: the result, or the `EngineError` of
    that request alone (a `step` that raises means the whole engine failed). `abort` drops requests
    the caller gave up on (ids the engine does not hold are ignored). `capacity` is how many
    sequences the engine runs at once, `running` how many it runs now, and `clock` the engine's time
    (wall seconds for a real engine, modelled time for the simulated one), used for telemetry.
    """

    @property
    def capacity(self) -> int: ...

    def add(self, request_id: int, request: GenerationRequest) -> None: ...

    def step(self) -> list[tuple[int, Outcome]]: ...

    def abort(self, request_ids: Iterable[int]) -> None: ...

    def running(self) -> int: ...

    def clock(self) -> float: ...
