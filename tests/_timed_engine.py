"""`TimedEngine`: a model of continuous batching over an instant engine (the simulated policy); a test
instrument, so it lives with the tests.

A real engine runs up to `capacity` sequences at once; each step generates one token for every
running sequence, a finished sequence frees its slot and a waiting one takes it at the next step.
`TimedEngine` replays that on a modelled clock (one time unit per step, whatever the batch size:
the regime of a GPU, where a decode step costs about the same for 1 or 64 sequences), with the
completions and token counts of the wrapped engine. It makes the cost of waiting visible without a
model: a scheduler that lets the running batch drain pays for it in time units, and the stream's
telemetry (engines/stream.py) shows the occupancy.

Each of a request's `n` samples is its own sequence (vLLM fans `n` out the same way); a request is
finished when its last sample is. Time advances only in `step`, straight to the next completion.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from prm_synth.engines.base import Completion, Engine, GenerationRequest, GenerationResult


@dataclass
class _Request:
    result: GenerationResult
    left: int  # samples not finished yet


@dataclass
class _Sequence:
    request_id: int
    remaining: int  # steps (tokens) still to generate


@dataclass(eq=False)  # identity, not value: engines key the stream registry
class TimedEngine:
    """A `StreamingEngine` (and a plain `Engine`) over an instant engine; see the module docstring.

    `min_steps`: the least steps a sequence takes (an empty completion still costs its prefill).
    """

    engine: Engine
    capacity: int = 64
    min_steps: int = 1
    now: float = 0.0
    _requests: dict[int, _Request] = field(default_factory=dict)
    _waiting: deque[_Sequence] = field(default_factory=deque)
    _running: list[_Sequence] = field(default_factory=list)

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """The instant path (no modelled time): what the wrapped engine returns."""
        return self.engine.generate(requests)

    def close(self) -> None:
        self.engine.close()

    # ------------------------------------------------------------ StreamingEngine
    def add(self, request_id: int, request: GenerationRequest) -> None:
        (result,) = self.engine.generate([request])
        self._requests[request_id] = _Request(result, len(result.completions))
        if not result.completions:
            self._requests[request_id].left = 1  # still one step to answer an n = 0 request
            self._waiting.append(_Sequence(request_id, self.min_steps))
        for completion in result.completions:
            self._waiting.append(_Sequence(request_id, self._steps(completion)))

    def step(self) -> list[tuple[int, GenerationResult]]:
        while self._waiting and len(self._running) < self.capacity:
            self._running.append(self._waiting.popleft())
        if not self._running:
            return []
        elapsed = min(s.remaining for s in self._running)
        self.now += elapsed
        finished: list[tuple[int, GenerationResult]] = []
        still = []
        for seq in self._running:
            seq.remaining -= elapsed
            if seq.remaining > 0:
                still.append(seq)
                continue
            request = self._requests[seq.request_id]
            request.left -= 1
            if request.left == 0:
                finished.append((seq.request_id, self._requests.pop(seq.request_id).result))
        self._running = still
        return finished

    def abort(self, request_ids: Iterable[int]) -> None:
        drop = set(request_ids)
        for request_id in drop:
            self._requests.pop(request_id, None)
        self._waiting = deque(s for s in self._waiting if s.request_id not in drop)
        self._running = [s for s in self._running if s.request_id not in drop]

    def running(self) -> int:
        """Sequences that run in the next step (the waiting ones take free slots at its start)."""
        return min(self.capacity, len(self._running) + len(self._waiting))

    def clock(self) -> float:
        return self.now

    def _steps(self, completion: Completion) -> int:
        return max(self.min_steps, completion.generated_tokens)
