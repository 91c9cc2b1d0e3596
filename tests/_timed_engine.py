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

With `seconds_per_step` set, the model runs in real time instead, like a GPU beside the Python thread
that drives it (vLLM's engine core is its own process): the modelled clock follows the wall clock at
one step per `seconds_per_step`, sequences already added keep decoding and waiting ones take freed
slots while the driver is busy elsewhere (labeling), and `step` catches up to now, or sleeps until
the next completion when none is due. What the driver has not added yet cannot run, so a driver
that labels too slowly leaves slots empty: `occupancy()` is the share of slot time used.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from prm_synth.annotate.protocol import Annotator, Probe
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
    seconds_per_step: float | None = None  # real time (see the module docstring); None: modelled only
    now: float = 0.0
    busy: float = 0.0  # slot-steps used: sum over time of the running sequences
    _origin: float | None = None  # wall time of modelled time 0 (real time only)
    _done: list[tuple[int, GenerationResult]] = field(default_factory=list)  # finished, not yet returned
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
        if self.seconds_per_step is not None:  # what ran before this request arrived ran without it
            self._catch_up(self._target())
        (result,) = self.engine.generate([request])
        self._requests[request_id] = _Request(result, len(result.completions))
        if not result.completions:
            self._requests[request_id].left = 1  # still one step to answer an n = 0 request
            self._waiting.append(_Sequence(request_id, self.min_steps))
        for completion in result.completions:
            self._waiting.append(_Sequence(request_id, self._steps(completion)))

    def step(self) -> list[tuple[int, GenerationResult]]:
        if self.seconds_per_step is None:
            self._admit()
            return self._advance(min((s.remaining for s in self._running), default=0))
        return self._real_time_step()

    def _admit(self) -> None:
        while self._waiting and len(self._running) < self.capacity:
            self._running.append(self._waiting.popleft())

    def _advance(self, elapsed: float) -> list[tuple[int, GenerationResult]]:
        """Run the running sequences `elapsed` steps (none finishes before its end); what finished."""
        if not self._running:
            return []
        self.now += elapsed
        self.busy += elapsed * len(self._running)
        finished: list[tuple[int, GenerationResult]] = []
        still = []
        for seq in self._running:
            seq.remaining -= elapsed
            if seq.remaining > 1e-9:
                still.append(seq)
                continue
            request = self._requests[seq.request_id]
            request.left -= 1
            if request.left == 0:
                finished.append((seq.request_id, self._requests.pop(seq.request_id).result))
        self._running = still
        return finished

    def _target(self) -> float:
        """Modelled time now (real time only)."""
        assert self.seconds_per_step is not None
        wall = time.perf_counter()
        if self._origin is None:
            self._origin = wall - self.now * self.seconds_per_step
        return (wall - self._origin) / self.seconds_per_step

    def _catch_up(self, target: float) -> float | None:
        """Run what was in the engine up to `target`, keeping what finished for the next `step`;
        the time of the next completion (None when nothing runs)."""
        while True:
            self._admit()
            if not self._running:
                self.now = max(self.now, target)  # idle: nothing was there to run
                return None
            due = self.now + min(s.remaining for s in self._running)
            if due > target:
                self._done += self._advance(target - self.now)
                return due
            self._done += self._advance(due - self.now)

    def _real_time_step(self) -> list[tuple[int, GenerationResult]]:
        assert self.seconds_per_step is not None
        due = self._catch_up(self._target())
        if not self._done and due is not None:  # nothing finished yet: block until the next completion
            time.sleep(max(0.0, due - self._target()) * self.seconds_per_step)
            self._catch_up(max(due, self._target()))
        finished, self._done = self._done, []
        return finished

    def occupancy(self, since_now: float = 0.0, since_busy: float = 0.0) -> float:
        """Share of slot time used since (`since_now`, `since_busy`) readings of `now` and `busy`."""
        span = self.now - since_now
        return (self.busy - since_busy) / (span * self.capacity) if span > 0 else 0.0

    def abort(self, request_ids: Iterable[int]) -> None:
        drop = set(request_ids)
        for request_id in drop:
            self._requests.pop(request_id, None)
        self._waiting = deque(s for s in self._waiting if s.request_id not in drop)
        self._running = [s for s in self._running if s.request_id not in drop]
        self._done = [(rid, r) for rid, r in self._done if rid not in drop]

    def running(self) -> int:
        """Sequences that run in the next step (the waiting ones take free slots at its start)."""
        return min(self.capacity, len(self._running) + len(self._waiting))

    def clock(self) -> float:
        return self.now

    def _steps(self, completion: Completion) -> int:
        return max(self.min_steps, completion.generated_tokens)


# An instant engine to time, and a scripted annotator (the stream tests and the progress report tests)
class LengthEngine:
    """Instant; every completion of a prompt is as long as `length(prefix)` tokens; records requests."""

    model_name = "length"

    def __init__(self, length=lambda prefix: 10) -> None:
        self.length = length
        self.requests: list[GenerationRequest] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.requests += requests
        return [
            GenerationResult(tuple(Completion("x", self.length(r.assistant_prefix)) for _ in range(r.n)), 1)
            for r in requests
        ]

    def close(self) -> None:
        pass


def always_correct(text: str, gold: str) -> str:
    return "correct"


def scripted(rounds: list[list[Probe]], log: list | None = None) -> Annotator[list]:
    log = [] if log is None else log
    for probes in rounds:
        log.append((probes, (yield probes)))
    return log
