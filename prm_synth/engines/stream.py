"""One request stream per engine: submit requests from any thread, get a future back per request.

The probe scheduler of every shard, the solution sampling of the next shard and the judge of a
finished one all feed the same stream, so the engine keeps its running batch full across stages and
shards instead of draining at the end of every `generate` call.

Whoever waits on a future drives the engine (there is no background thread): the waiting thread
that gets the drive lock moves newly submitted requests into the engine, runs one `step`, and
resolves the futures of the requests that finished; other waiting threads sleep until it is done.
With one scheduler thread (tests, the simulated engine) everything happens in that thread, in a
deterministic order.

Engines come in three shapes, each made a `StreamingEngine`:
- streaming engines (vLLM in process, the simulated policy) are used as they are;
- engines with per-request futures (`submit(request) -> Future`, the OpenAI-compatible client) go
  through `FutureAdapter`;
- engines with only a blocking `generate` go through `BatchAdapter`: a step generates everything
  submitted since the last one, as one call (the old round-based behaviour, but never waiting for
  more than what is already asked).
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from typing import Any

from prm_synth.engines.base import Engine, EngineError, GenerationRequest, GenerationResult, StreamingEngine
from prm_synth.telemetry import EngineTelemetry

# How long a waiting thread sleeps before it looks again whether it should drive the engine.
_IDLE_WAIT_S = 0.05


class BatchAdapter:
    """A blocking `generate` engine as a `StreamingEngine`: each step is one `generate` call."""

    def __init__(self, engine: Engine, capacity: int = 256) -> None:
        self.engine = engine
        self._capacity = capacity
        self._queued: list[tuple[int, GenerationRequest]] = []

    @property
    def capacity(self) -> int:
        return self._capacity

    def add(self, request_id: int, request: GenerationRequest) -> None:
        self._queued.append((request_id, request))

    def step(self) -> list[tuple[int, GenerationResult]]:
        batch, self._queued = self._queued, []
        results = self.engine.generate([r for _, r in batch])
        if len(results) != len(batch):
            raise EngineError(f"engine returned {len(results)} results for {len(batch)} requests")
        return [(rid, res) for (rid, _), res in zip(batch, results, strict=True)]

    def running(self) -> int:
        return min(self._capacity, sum(r.n for _, r in self._queued))

    def clock(self) -> float:
        return time.perf_counter()


class FutureAdapter:
    """An engine with per-request futures (`submit(request) -> Future[GenerationResult]`) as a
    `StreamingEngine`: a step waits until at least one submitted request is back."""

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

    def step(self) -> list[tuple[int, GenerationResult]]:
        done, _ = wait_futures(list(self._inflight), timeout=self.poll_s, return_when=FIRST_COMPLETED)
        finished = []
        for future in sorted(done, key=lambda f: self._inflight[f][0]):
            request_id, _ = self._inflight.pop(future)
            finished.append((request_id, future.result()))  # an engine error fails the step
        return finished

    def running(self) -> int:
        return min(self._capacity, sum(n for _, n in self._inflight.values()))

    def clock(self) -> float:
        return time.perf_counter()


class GenerationStream:
    """Futures over a `StreamingEngine`, safe to use from many threads; see the module docstring."""

    def __init__(self, engine: StreamingEngine) -> None:
        self.engine = engine
        self.telemetry = EngineTelemetry()
        self._ids = itertools.count()
        self._submit_lock = threading.Lock()
        self._submitted: list[tuple[int, GenerationRequest, Future[GenerationResult]]] = []
        self._drive_lock = threading.Lock()
        self._stepped = threading.Condition()
        self._inflight: dict[int, tuple[GenerationRequest, Future[GenerationResult]]] = {}
        self._running = 0  # sequences in the engine during the last interval (for telemetry)

    @property
    def capacity(self) -> int:
        return self.engine.capacity

    def running(self) -> int:
        return self._running

    def submit(self, request: GenerationRequest) -> Future[GenerationResult]:
        """Queue one request; it enters the engine at the next step of whoever drives it."""
        future: Future[GenerationResult] = Future()
        future.set_running_or_notify_cancel()
        with self._submit_lock:
            self._submitted.append((next(self._ids), request, future))
        return future

    def submit_all(self, requests: Iterable[GenerationRequest]) -> list[Future[GenerationResult]]:
        return [self.submit(r) for r in requests]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """The blocking engine protocol over the stream (what `VLLMEngine.generate` uses)."""
        futures = self.submit_all(requests)
        self.wait(futures, all_of=True)
        return [f.result() for f in futures]

    def wait(self, futures: Iterable[Future[Any]], timeout: float | None = None, all_of: bool = False) -> bool:
        """Drive the engine until one of `futures` (all of them with `all_of`) is done, or `timeout`
        seconds have passed. Returns whether the condition holds. Futures from elsewhere may be
        mixed in: while this stream has nothing to run, the caller just waits for them."""
        futures = list(futures)
        deadline = None if timeout is None else time.monotonic() + timeout
        check = all if all_of else any
        first = True  # the engine always gets one step, however short the timeout
        while not (check(f.done() for f in futures) if futures else True):
            if not first and deadline is not None and time.monotonic() >= deadline:
                return False
            first = False
            if self._drive_lock.acquire(blocking=False):
                try:
                    stepped = self._drive_once()
                finally:
                    self._drive_lock.release()
                with self._stepped:
                    self._stepped.notify_all()
                if stepped:
                    continue
            with self._stepped:  # someone else drives (or nothing of ours runs): wait for news
                self._stepped.wait(_IDLE_WAIT_S)
        return True

    # ------------------------------------------------------------ internals
    def _drive_once(self) -> bool:
        """Move submitted requests into the engine, run one step, resolve what finished.
        Returns False when there was nothing to run. Called with the drive lock held."""
        with self._submit_lock:
            new, self._submitted = self._submitted, []
        engine = self.engine
        for request_id, request, future in new:
            try:
                engine.add(request_id, request)
            except Exception as e:  # this request is refused; the others go on
                future.set_exception(e if isinstance(e, EngineError) else EngineError(f"request refused: {e}"))
                continue
            self._inflight[request_id] = (request, future)
        if not self._inflight:
            self._record(0, 0, 0)
            return False
        self._record(0, 0, engine.running())  # the engine starts this step with what was just added
        try:
            finished = engine.step()
        except Exception as e:
            self._fail_all(e)
            return True
        tokens = sequences = 0
        for request_id, result in finished:
            _, future = self._inflight.pop(request_id)
            tokens += result.generated_tokens
            sequences += len(result.completions)
            future.set_result(result)
        self._record(tokens, sequences, engine.running())
        return True

    def _record(self, tokens: int, sequences: int, running_after: int) -> None:
        self.telemetry.advance(self.engine.clock(), self._running, self.engine.capacity, tokens, sequences)
        self._running = running_after

    def _fail_all(self, error: Exception) -> None:
        """An engine failure fails every request in flight (their shards fail and are redone)."""
        wrapped = error if isinstance(error, EngineError) else EngineError(f"engine step failed: {error}")
        for _, future in self._inflight.values():
            future.set_exception(wrapped)
        self._inflight.clear()
        self._running = 0


_streams: weakref.WeakKeyDictionary[Any, GenerationStream] = weakref.WeakKeyDictionary()
_streams_lock = threading.Lock()


def as_streaming(engine: Any, capacity: int = 256) -> StreamingEngine:
    """The engine itself when it streams, else the adapter that fits it."""
    if isinstance(engine, StreamingEngine):
        return engine
    if callable(getattr(engine, "submit", None)):
        return FutureAdapter(engine, int(getattr(engine, "capacity", None) or capacity))
    return BatchAdapter(engine, capacity)


def stream_for(engine: Any) -> GenerationStream:
    """The process's one stream for this engine (made on first use; every caller shares it)."""
    with _streams_lock:
        stream = _streams.get(engine)
        if stream is None:
            stream = _streams[engine] = GenerationStream(as_streaming(engine))
        return stream


def streams_now() -> list[tuple[Any, GenerationStream]]:
    """Every engine of this process that has a stream, with it (for a run's telemetry)."""
    with _streams_lock:
        return list(_streams.items())
