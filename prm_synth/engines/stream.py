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

A watchdog (`ProgressWatchdog`) says, in one warning line repeated at most every `stall_warning_s`
seconds, when requests are in the engine and for that long none has finished and none has entered
it: what it waits on (how many requests, the engine, its server) instead of a silent hang. It is
checked by the waiting threads and by a monitor thread of its own (`_StallMonitor`), so a stall inside
a step that never returns (a blocking `generate`, in-process vLLM's batch call) is reported too.

A stop (a signal: `stop_streams`) fails every request of every stream at once with `RunStopped`, and
every request submitted later fails as it comes: no waiter waits on an engine after a stop, and nothing
new reaches an engine (the engines cancel what they hold themselves: engines.stop_engines).

Failure is per request: a request the engine refuses or fails alone fails its own future, and the
stream goes on serving the others. Only a `step` that raises (the engine itself failed) fails every
request in flight; those are then aborted in the engine, as are requests their callers give up
(`give_up`), and a result that still comes back for a request the stream no longer holds is dropped.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any

from prm_synth.engines.adapters import BatchAdapter, FutureAdapter
from prm_synth.engines.base import (
    Engine,
    EngineError,
    GenerationRequest,
    GenerationResult,
    RequestAbandoned,
    RunStopped,
    StreamingEngine,
)
from prm_synth.telemetry import EngineTelemetry

log = logging.getLogger(__name__)


# How long a waiting thread sleeps before it looks again whether it should drive the engine.
_IDLE_WAIT_S = 0.05


# No request finished or entered the engine for this long while some are in it: say so (run.stall_warning_s).
STALL_WARNING_S = 300.0


# Set by `stop_streams` (a signal): every stream refuses new requests from then on, those made later too.
STOPPING = threading.Event()


_stop_reason = ["the run is stopping"]


class ProgressWatchdog:
    """Notices a stream that makes no progress: requests in the engine, and for `after_s` seconds none
    finished and none entered it. Then `check` logs one warning naming what the stream waits on, and
    again at most every `after_s` seconds while it lasts. An idle stream (nothing in flight) is not
    stalled. `after_s <= 0` turns it off."""

    def __init__(self, after_s: float = STALL_WARNING_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.after_s = after_s
        self.clock = clock
        self.warnings = 0  # warnings given (for tests and stats)
        self._lock = threading.Lock()
        self._last_progress = clock()
        self._last_warned: float | None = None

    def progressed(self) -> None:
        """A request finished or entered the engine (or nothing is in flight): the clock starts again."""
        with self._lock:
            self._last_progress = self.clock()
            self._last_warned = None

    def check(self, waiting_on: Callable[[], str]) -> bool:
        """Warn (True) when the stall has lasted `after_s` since the last progress or the last warning."""
        if self.after_s <= 0:
            return False
        with self._lock:
            now = self.clock()
            since = now - self._last_progress
            if since < self.after_s or (self._last_warned is not None and now - self._last_warned < self.after_s):
                return False
            self._last_warned = now
            self.warnings += 1
        log.warning(
            "no progress for %.0f s: no request finished and none entered the engine; waiting on %s",
            since,
            waiting_on(),
        )
        return True


def describe_engine(engine: Any) -> str:
    """The engine as a user knows it: its model, and its server where it has one (never a key)."""
    inner = getattr(engine, "engine", engine)  # an adapter wraps the engine
    name = getattr(inner, "model_name", None) or type(inner).__name__
    url = getattr(getattr(inner, "config", None), "base_url", None)
    return f"{name} at {url}" if url else str(name)


class RoundBased:
    """An engine seen through its blocking `generate` alone, so its stream is a `BatchAdapter`: each
    step sends everything asked since the last one as one call and waits for all of it. A scheduler
    on it runs in rounds, every annotator waiting for the round's slowest rollout: the round-based
    baseline the benchmarks measure streaming against (benchmarks/run_efficiency.py). The engine
    itself is not owned: closing the view leaves it running."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return stream_for(self.engine).generate(requests)  # the engine's own stream: its telemetry sees the rounds

    def close(self) -> None:
        pass


class GenerationStream:
    """Futures over a `StreamingEngine`, safe to use from many threads; see the module docstring."""

    def __init__(self, engine: StreamingEngine) -> None:
        self.engine = engine
        self.telemetry = EngineTelemetry()
        self._ids = itertools.count()
        self._submit_lock = threading.Lock()
        self._submitted: list[tuple[int, GenerationRequest, Future[GenerationResult]]] = []
        self._given_up: set[Future[Any]] = set()  # given up while in the engine: to abort
        self._drive_lock = threading.Lock()
        self._stepped = threading.Condition()
        self._inflight: dict[int, tuple[GenerationRequest, Future[GenerationResult]]] = {}
        self._running = 0  # sequences in the engine during the last interval (for telemetry)
        self.watchdog = ProgressWatchdog()
        self._stopped: RunStopped | None = None  # `stop` was called: every request fails with this

    @property
    def capacity(self) -> int:
        return self.engine.capacity

    def running(self) -> int:
        return self._running

    def submit(self, request: GenerationRequest) -> Future[GenerationResult]:
        """Queue one request; it enters the engine at the next step of whoever drives it. After a stop
        (`stop_streams`) it fails at once with `RunStopped`: nothing new is sent."""
        future: Future[GenerationResult] = Future()
        future.set_running_or_notify_cancel()
        with self._submit_lock:
            stopped = self._stopped or (RunStopped(_stop_reason[0]) if STOPPING.is_set() else None)
            if stopped is None:
                self._submitted.append((next(self._ids), request, future))
                return future
        future.set_exception(stopped)
        return future

    def stop(self, error: RunStopped) -> None:
        """Fail every request of this stream at once with `error`: queued ones never enter the engine,
        those in it are given up (aborted now if nobody drives, else by whoever drives next), and every
        later request fails as it comes. Never waits for the engine: safe from a signal's thread while a
        driver is blocked in a step."""
        with self._submit_lock:
            self._stopped = error
            queued, self._submitted = self._submitted, []
            for _, future in list(self._inflight.values()):
                if _settle(future, error=error):
                    self._given_up.add(future)
        for _, _, future in queued:
            _settle(future, error=error)
        self._abort_now_or_later()

    def submit_all(self, requests: Iterable[GenerationRequest]) -> list[Future[GenerationResult]]:
        return [self.submit(r) for r in requests]

    def give_up(self, futures: Iterable[Future[Any]]) -> None:
        """The caller no longer wants these requests (its shard failed or stopped): each unresolved
        one fails at once with `RequestAbandoned`, a queued one never enters the engine, and one in
        the engine is aborted (now, or by whoever drives next) instead of spending its capacity. A
        result that comes back for it later is dropped."""
        abandoned = RequestAbandoned("the request was given up by its caller")
        with self._submit_lock:
            for future in futures:
                if _settle(future, error=abandoned):
                    self._given_up.add(future)
            self._submitted = [entry for entry in self._submitted if entry[2] not in self._given_up]
        self._abort_now_or_later()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """The blocking engine protocol over the stream (what `VLLMEngine.generate` uses)."""
        futures = self.submit_all(requests)
        self.wait(futures, all_of=True)
        return [f.result() for f in futures]

    def wait(self, futures: Iterable[Future[Any]], timeout: float | None = None, all_of: bool = False) -> bool:
        """Drive the engine until one of `futures` (all of them with `all_of`) is done, or `timeout`
        seconds have passed. Returns whether the condition holds.

        Every request of this stream resolves: with its result, its own error, the engine's error
        when the engine fails, or `RequestAbandoned`. A future the stream does not hold can resolve
        only by someone else's hand: waiting for one without a timeout while the stream has nothing
        left to run would never end, so it raises `RuntimeError` (a caller's bug) instead."""
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
                    idle = not stepped and self._nothing_submitted()  # the lock held: nothing in between
                finally:
                    self._drive_lock.release()
                with self._stepped:
                    self._stepped.notify_all()
                self.watchdog.check(self._waiting_on)
                if stepped:
                    continue
                waiting = sum(1 for f in futures if not f.done())
                if idle and deadline is None and waiting:
                    raise RuntimeError(f"waiting without a timeout on {waiting} request(s) this stream does not hold")
            else:  # the driver may be stuck in a step that never returns: a waiter says so
                self.watchdog.check(self._waiting_on)
            with self._stepped:  # someone else drives (or nothing of ours runs): wait for news
                self._stepped.wait(_IDLE_WAIT_S)
        return True

    # ------------------------------------------------------------ internals
    def _waiting_on(self) -> str:
        with self._submit_lock:
            queued = len(self._submitted)
        return (
            f"{len(self._inflight)} request(s) in the engine ({describe_engine(self.engine)})"
            + (f", {queued} more queued" if queued else "")
            + " (a server that does not answer? a stuck engine?)"
        )

    def _nothing_submitted(self) -> bool:
        with self._submit_lock:
            return not self._submitted

    def _drive_once(self) -> bool:
        """Abort what was given up, move submitted requests into the engine, run one step, resolve
        what finished. Returns False when there was nothing to run. Called with the drive lock held."""
        self._abort_given_up()
        with self._submit_lock:
            new, self._submitted = self._submitted, []
        engine = self.engine
        if new or not self._inflight:  # a request enters the engine (or nothing waits): progress
            self.watchdog.progressed()
        for request_id, request, future in new:
            try:
                engine.add(request_id, request)
            except Exception as e:  # this request is refused; the others go on
                _settle(future, error=e if isinstance(e, EngineError) else EngineError(f"request refused: {e}"))
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
        tokens = sequences = prompt_tokens = 0
        if finished:
            self.watchdog.progressed()
        for request_id, outcome in finished:
            entry = self._inflight.pop(request_id, None)
            if entry is None:  # given up (or failed) earlier: nobody waits for it any more
                continue
            if isinstance(outcome, BaseException):
                _settle(entry[1], error=outcome)
                continue
            tokens += outcome.generated_tokens
            prompt_tokens += outcome.prompt_tokens
            sequences += len(outcome.completions)
            _settle(entry[1], result=outcome)
        self._record(tokens, sequences, engine.running(), prompt_tokens)
        return True

    def _abort_now_or_later(self) -> None:
        """Abort what was given up now if nobody drives (else whoever drives next does), then wake the
        waiters so they see their futures settled. Never blocks on the drive lock."""
        if self._drive_lock.acquire(blocking=False):
            try:
                self._abort_given_up()
            finally:
                self._drive_lock.release()
        with self._stepped:
            self._stepped.notify_all()

    def _abort_given_up(self) -> None:
        """Take the requests given up by their callers out of the engine. Called with the drive lock held."""
        with self._submit_lock:
            given_up, self._given_up = self._given_up, set()
        if given_up:
            dropped = [rid for rid, (_, future) in self._inflight.items() if future in given_up]
            for rid in dropped:
                del self._inflight[rid]
            self._abort(dropped)

    def _record(self, tokens: int, sequences: int, running_after: int, prompt_tokens: int = 0) -> None:
        self.telemetry.advance(
            self.engine.clock(), self._running, self.engine.capacity, tokens, sequences, prompt_tokens
        )
        self._running = running_after

    def _fail_all(self, error: Exception) -> None:
        """The engine itself failed: every request in flight fails with its error (their shards fail
        and are redone) and is aborted, so a later step cannot hand back a result nobody holds."""
        wrapped = error if isinstance(error, EngineError) else EngineError(f"engine step failed: {error}")
        for _, future in self._inflight.values():
            _settle(future, error=wrapped)
        ids = list(self._inflight)
        self._inflight.clear()
        self._running = 0
        self._abort(ids)

    def _abort(self, request_ids: list[int]) -> None:
        if not request_ids:
            return
        try:
            self.engine.abort(request_ids)
        except Exception as e:  # a broken engine cannot abort; its later results are dropped anyway
            log.warning("aborting %d request(s) failed: %s", len(request_ids), e)


def _settle(future: Future[Any], *, result: Any = None, error: BaseException | None = None) -> bool:
    """Resolve a future unless it already is (a request given up by its caller); True if this did."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        return False
    return True


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
            _StallMonitor.ensure()
        return stream


def stop_streams(reason: str) -> None:
    """A stop (SIGINT/SIGTERM): every request of every stream fails now with `RunStopped(reason)`, and so
    does every request submitted from now on, in any stream. Never waits for an engine."""
    _stop_reason[0] = reason
    STOPPING.set()
    error = RunStopped(reason)
    for _, stream in streams_now():
        stream.stop(error)


class _StallMonitor:
    """One daemon thread that checks every stream's watchdog while requests are in its engine, whatever
    its threads do: a driver blocked in a step that never returns cannot check it, and may be the only
    thread there is. A stream with nothing in the engine is idle, not stalled."""

    _thread: threading.Thread | None = None
    _lock = threading.Lock()
    MAX_POLL_S = 1.0

    @classmethod
    def ensure(cls) -> None:
        with cls._lock:
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(target=cls._run, name="prm-synth-stall-monitor", daemon=True)
                cls._thread.start()

    @classmethod
    def _run(cls) -> None:
        while True:
            time.sleep(cls._poll_s())
            for _, stream in streams_now():
                if stream._inflight:  # requests in the engine: its last progress is when one entered or ended
                    stream.watchdog.check(stream._waiting_on)

    @classmethod
    def _poll_s(cls) -> float:
        """A quarter of the shortest warning delay in use (so a warning is at most that late), at most 1 s."""
        delays = [s.watchdog.after_s for _, s in streams_now() if s.watchdog.after_s > 0]
        return min(cls.MAX_POLL_S, max(0.02, min(delays) / 4)) if delays else cls.MAX_POLL_S


def streams_now() -> list[tuple[Any, GenerationStream]]:
    """Every engine of this process that has a stream, with it (for a run's telemetry)."""
    with _streams_lock:
        return list(_streams.items())
