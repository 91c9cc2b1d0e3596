"""Adapters that give an engine the streaming interface (`StreamingEngine`): a blocking batch engine
(`BatchAdapter`, one batch in flight), an engine that takes requests one at a time with futures
(`FutureAdapter`). prm_synth/engines/stream.py chooses and wraps them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from typing import Any

from prm_synth.engines.base import (
    Engine,
    EngineError,
    GenerationRequest,
    GenerationResult,
    Outcome,
    RequestRefused,
)


class BatchAdapter:
    """A blocking `generate` engine as a `StreamingEngine`: each step is one `generate` call.

    A call that raises `RequestRefused` does not say which request was refused: the step then asks
    for each request on its own, so only the refused one fails."""

    def __init__(self, engine: Engine, capacity: int = 256) -> None:
        self.engine = engine
        self._capacity = capacity
        self._queued: list[tuple[int, GenerationRequest]] = []

    @property
    def capacity(self) -> int:
        return self._capacity

    def add(self, request_id: int, request: GenerationRequest) -> None:
        self._queued.append((request_id, request))

    def step(self) -> list[tuple[int, Outcome]]:
        batch, self._queued = self._queued, []
        if not batch:
            return []
        try:
            results: list[Outcome] = list(self._generate([r for _, r in batch]))
        except RequestRefused as refused:
            if len(batch) == 1:
                return [(batch[0][0], refused)]
            results = [self._one(r) for _, r in batch]
        return [(rid, res) for (rid, _), res in zip(batch, results, strict=True)]

    def _generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        results = self.engine.generate(requests)
        if len(results) != len(requests):
            raise EngineError(f"engine returned {len(results)} results for {len(requests)} requests")
        return results

    def _one(self, request: GenerationRequest) -> Outcome:
        try:
            return self._generate([request])[0]
        except RequestRefused as refused:
            return refused

    def abort(self, request_ids: Iterable[int]) -> None:
        drop = set(request_ids)
        self._queued = [(rid, r) for rid, r in self._queued if rid not in drop]

    def running(self) -> int:
        return min(self._capacity, sum(r.n for _, r in self._queued))

    def clock(self) -> float:
        return time.perf_counter()


class FutureAdapter:
    """An engine with per-request futures (`submit(request) -> Future[GenerationResult]`) as a
    `StreamingEngine`: a step waits until at least one submitted request is back. A request whose
    future fails is reported as that request's outcome; the others go on. `abort` cancels the
    request's future (the OpenAI-compatible engine then cancels its HTTP request)."""

    def __init__(self, engine: Any, capacity: int, poll_s: float = 0.5) -> None:
        self.engine = engine
        self._capacity = capacity
        self.poll_s = poll_s
        self._inflight: dict[Future[GenerationResult], tuple[int, int]] = {}

    @property
    def capacity(self) -> int:
        return self._capacity

    def add(self, request_id: int, request: GenerationRequest) -> None:
        self._inflight[self.engine.submit(request)] = (request_id, request.n)

    def step(self) -> list[tuple[int, Outcome]]:
        done, _ = wait_futures(list(self._inflight), timeout=self.poll_s, return_when=FIRST_COMPLETED)
        finished: list[tuple[int, Outcome]] = []
        for future in sorted(done, key=lambda f: self._inflight[f][0]):
            request_id, _ = self._inflight.pop(future)
            if future.cancelled():
                continue
            error = future.exception()
            if error is None:
                finished.append((request_id, future.result()))
            else:
                wrapped = error if isinstance(error, EngineError) else EngineError(f"request failed: {error!r}")
                finished.append((request_id, wrapped))
        return finished

    def abort(self, request_ids: Iterable[int]) -> None:
        drop = set(request_ids)
        for future, (request_id, _) in list(self._inflight.items()):
            if request_id in drop:
                future.cancel()
                del self._inflight[future]

    def running(self) -> int:
        return min(self._capacity, sum(n for _, n in self._inflight.values()))

    def clock(self) -> float:
        return time.perf_counter()
