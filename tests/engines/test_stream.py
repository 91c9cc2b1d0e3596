"""The engine stream, its adapters, the continuous-batching time model, and the barrier-free scheduler on it.

Timing claims are made on the modelled clock of `TimedEngine` (one time unit per decode step), never
on the wall clock.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from _rounds import SCHEDULERS, RoundsScheduler
from _timed_engine import LengthEngine, TimedEngine, always_correct, scripted
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.protocol import Probe
from prm_synth.annotate.scheduler import JobsAfter, ProbeScheduler, SolutionJob
from prm_synth.annotate.search import binary_search
from prm_synth.config import BinaryConfig, SimulatedPolicyConfig
from prm_synth.engines.adapters import BatchAdapter, FutureAdapter
from prm_synth.engines.base import (
    Completion,
    EngineError,
    GenerationRequest,
    GenerationResult,
    SamplingOptions,
    StreamingEngine,
)
from prm_synth.engines.stream import GenerationStream, as_streaming, stream_for
from prm_synth.grading.math import grade
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.prompting.steps import split_steps
from prm_synth.records.labels import apply_rule
from prm_synth.simulated.arithmetic import generate as make_chain
from prm_synth.simulated.engines import SimulatedPolicy


def job(key: str, rounds: list[list[Probe]], problem: str | None = None, log: list | None = None) -> SolutionJob:
    return SolutionJob(key, problem or key, "Q", "1", scripted(rounds, log))


# ---------------------------------------------------------------- the time model
def test_timed_engine_runs_capacity_sequences_per_step_and_fills_free_slots():
    timed = TimedEngine(LengthEngine(lambda p: int(p)), capacity=2)
    assert isinstance(timed, StreamingEngine)
    for i, prefix in enumerate(["3", "5", "2"]):
        timed.add(i, GenerationRequest("Q", prefix))
    assert timed.running() == 2
    assert [rid for rid, _ in timed.step()] == [0] and timed.clock() == 3
    # the third sequence took the free slot at t=3 and needs 2 steps; the second has 2 left as well
    assert sorted(rid for rid, _ in timed.step()) == [1, 2] and timed.clock() == 5
    assert timed.running() == 0 and timed.step() == []


def test_timed_engine_in_real_time_runs_every_sequence_its_own_steps_whatever_the_driver_does():
    """Real time (a GPU beside its driver): the slot time used is exactly the sequences' lengths, and
    the work cannot finish sooner than capacity allows, however late or often `step` is called."""
    timed = TimedEngine(LengthEngine(lambda p: int(p)), capacity=2, seconds_per_step=1e-4)
    for i, prefix in enumerate(["3", "5", "2"]):
        timed.add(i, GenerationRequest("Q", prefix))
    finished: list[int] = []
    while timed.running():
        finished += [rid for rid, _ in timed.step()]
    assert sorted(finished) == [0, 1, 2] and finished[-1] != 0  # 0 (3 steps) ends before 1 (5 steps)
    assert timed.busy == pytest.approx(3 + 5 + 2)
    assert timed.clock() >= 5 - 1e-9 and 0 < timed.occupancy() <= 1


def test_a_request_finishes_with_its_last_sample():
    timed = TimedEngine(LengthEngine(lambda p: 4), capacity=1)
    timed.add(7, GenerationRequest("Q", "p", n=3))
    assert timed.step() == [] and timed.step() == []
    ((rid, result),) = timed.step()
    assert rid == 7 and len(result.completions) == 3 and timed.clock() == 12


# ---------------------------------------------------------------- the stream
def test_stream_futures_resolve_and_telemetry_counts_tokens_and_occupancy():
    timed = TimedEngine(LengthEngine(lambda p: int(p)), capacity=4)
    stream = GenerationStream(timed)
    futures = stream.submit_all(GenerationRequest("Q", str(n)) for n in (2, 4, 4, 8))
    assert stream.wait(futures[:1])
    assert futures[0].done() and not futures[3].done()
    stream.wait(futures, all_of=True)
    assert [f.result().generated_tokens for f in futures] == [2, 4, 4, 8]
    totals = stream.telemetry.totals()
    assert totals.tokens == 18 and totals.sequences == 4 and totals.t == 8
    # running: 4 sequences for 2 units, 3 for 2, 1 for 4 = 18 sequence-units of 4 x 8 possible
    assert totals.busy == pytest.approx(18)


def test_a_failing_engine_fails_the_futures_with_an_engine_error():
    class Broken(LengthEngine):
        def generate(self, requests):
            raise RuntimeError("device lost")

    stream = GenerationStream(BatchAdapter(Broken()))
    (future,) = stream.submit_all([GenerationRequest("Q")])
    stream.wait([future])
    with pytest.raises(EngineError, match="device lost"):
        future.result()


def test_future_adapter_returns_requests_as_they_complete():
    release = threading.Event()

    class PerRequest(LengthEngine):
        def __init__(self) -> None:
            super().__init__()
            self.pool = ThreadPoolExecutor(2)

        def submit(self, request: GenerationRequest) -> Future[GenerationResult]:
            def work() -> GenerationResult:
                if request.assistant_prefix == "slow":
                    release.wait(30)
                return self.generate([request])[0]

            return self.pool.submit(work)

    engine = PerRequest()
    adapted = as_streaming(engine, capacity=8)
    assert isinstance(adapted, FutureAdapter)
    stream = GenerationStream(adapted)
    slow, fast = stream.submit_all([GenerationRequest("Q", "slow"), GenerationRequest("Q", "fast")])
    assert stream.wait([fast], timeout=30)
    assert not slow.done()  # the fast request came back on its own
    release.set()
    assert stream.wait([slow], timeout=30)
    engine.pool.shutdown()


def test_threads_share_one_stream_per_engine():
    engine = TimedEngine(LengthEngine(lambda p: len(p) + 1), capacity=8)
    assert stream_for(engine) is stream_for(engine)
    results: dict[int, list[int]] = {}

    def worker(i: int) -> None:
        sched = ProbeScheduler(engine, SamplingOptions(), grader=always_correct)
        jobs = [job(f"t{i}-{j}", [[Probe("a" * j, 2)], [Probe("b" * j, 3)]]) for j in range(10)]
        results[i] = [len(log) for _, log in sched.run(jobs)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {i: [2] * 10 for i in range(3)}


# ---------------------------------------------------------------- the scheduler on the stream
def test_an_annotator_resumes_while_another_ones_long_rollout_still_runs():
    lengths = {"long": 100, "a": 5, "ab": 5, "abc": 5}
    engine = TimedEngine(LengthEngine(lambda p: lengths[p]), capacity=8)
    sched = ProbeScheduler(engine, SamplingOptions(), grader=always_correct)
    jobs = [job("slow", [[Probe("long", 1)]]), job("quick", [[Probe("a", 1)], [Probe("ab", 1)], [Probe("abc", 1)]])]
    order = [j.key for j, _ in sched.run(jobs)]
    assert order == ["quick", "slow"]
    assert engine.clock() == 100  # the quick annotator's three rounds ran beside the long rollout

    rounds = TimedEngine(LengthEngine(lambda p: lengths[p]), capacity=8)
    list(RoundsScheduler(rounds, SamplingOptions(), grader=always_correct).run(jobs_again(lengths)))
    assert rounds.clock() == 110  # round one waits for the long rollout, then two more rounds


def jobs_again(lengths: dict[str, int]) -> list[SolutionJob]:
    return [job("slow", [[Probe("long", 1)]]), job("quick", [[Probe("a", 1)], [Probe("ab", 1)], [Probe("abc", 1)]])]


def test_a_prefix_in_flight_is_waited_on_not_sampled_again():
    engine = LengthEngine(lambda p: 3)
    timed = TimedEngine(engine, capacity=8)
    sched = ProbeScheduler(timed, SamplingOptions(), grader=always_correct)
    first: list = []
    second: list = []
    jobs = [
        job("a", [[Probe("shared", 4)]], problem="p", log=first),
        job("b", [[Probe("shared", 3)]], problem="p", log=second),
        job("c", [[Probe("shared", 6)]], problem="p"),
    ]
    assert len(list(sched.run(jobs))) == 3
    # a asks 4; b is covered by a's request in flight; c asks only the 2 that are still missing
    assert [(r.n, r.first_sample_index) for r in engine.requests] == [(4, 0), (2, 4)]
    assert sched.stats.probes_shared == 1 and sched.stats.rollouts == 6
    assert second[0][1][0].total >= 3


def test_jobs_after_sampling_start_as_their_own_problem_is_sampled():
    """Sampling requests and annotation share the stream: a problem's annotators start when its own
    solutions are back, while the other problems' sampling still runs."""
    engine = TimedEngine(LengthEngine(lambda p: 50 if p == "" else 5), capacity=8)
    sched = ProbeScheduler(engine, SamplingOptions(), grader=always_correct)
    sampling = sched.submit([GenerationRequest(f"problem {i}", n=1) for i in range(3)])
    started_at: dict[str, float] = {}

    def jobs_of(i: int):
        def make(result: GenerationResult) -> list[SolutionJob]:
            started_at[f"p{i}"] = engine.clock()
            return [job(f"p{i}-s{j}", [[Probe(f"{i}{j}", 2)]], problem=f"p{i}") for j in range(len(result.completions))]

        return make

    source = [JobsAfter(sampling[i], jobs_of(i)) for i in range(3)]
    done = [j.key for j, _ in sched.run(source, total=3)]
    assert sorted(done) == ["p0-s0", "p1-s0", "p2-s0"]
    assert engine.clock() == 55  # 50 steps of sampling, then one 5-step round of probes for all three


def test_progress_is_reported_during_the_run_and_at_the_end():
    engine = TimedEngine(LengthEngine(lambda p: 2), capacity=4)
    seen = []
    sched = ProbeScheduler(
        engine, SamplingOptions(), grader=always_correct, on_progress=seen.append, progress_interval_s=0.0
    )
    jobs = [job(f"j{i}", [[Probe("a", 2)], [Probe("ab", 2)]], problem=f"p{i}") for i in range(5)]
    assert len(list(sched.run(jobs, total=5))) == 5
    assert len(seen) >= 3 and seen[-1].finished and not seen[0].finished
    assert [s.rollouts for s in seen] == sorted(s.rollouts for s in seen)
    last = seen[-1]
    assert (last.annotators_done, last.annotators_total, last.rollouts) == (5, 5, 20)
    assert "annotated 5/5" in last.line()


def test_an_engine_error_ends_the_run():
    class Broken(LengthEngine):
        def generate(self, requests):
            raise EngineError("server gone")

    sched = ProbeScheduler(Broken(), SamplingOptions(), grader=always_correct)
    with pytest.raises(EngineError, match="server gone"):
        list(sched.run([job("j", [[Probe("a", 1)]])]))


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=8, max_size=8),
    rounds=st.lists(st.integers(1, 5), min_size=6, max_size=12),
)
def test_streaming_never_takes_longer_than_rounds(lengths, rounds):
    """On the modelled clock, with any mix of rollout lengths: resuming annotators as their own
    probes return is never slower than waiting for whole rounds (no request waits on another's)."""

    def jobs() -> list[SolutionJob]:
        return [job(f"j{i}", [[Probe(f"{i}:{r}", 1)] for r in range(n)], problem=f"p{i}") for i, n in enumerate(rounds)]

    def length(prefix: str) -> int:
        i, r = map(int, prefix.split(":"))
        return lengths[(i + r) % len(lengths)]

    clocks = {}
    for mode in ("stream", "rounds"):
        engine = TimedEngine(LengthEngine(length), capacity=len(rounds))  # every annotator fits the batch
        list(SCHEDULERS[mode](engine, SamplingOptions(), grader=always_correct).run(jobs()))
        clocks[mode] = engine.clock()
    assert clocks["stream"] <= clocks["rounds"]


# ---------------------------------------------------------------- binary search on the simulated policy
def simulated_jobs(policy: SimulatedPolicy, count: int) -> list[SolutionJob]:
    config = BinaryConfig(method="binary", search_test="sprt", probe_batch=2)
    jobs = []
    for i in range(count):
        chain = make_chain(random.Random(f"stream-test:{i}"), 4, 12)
        user = policy_user_prompt(chain.question())
        (result,) = policy.generate([GenerationRequest(user, n=1, first_sample_index=0)])
        for j, completion in enumerate(result.completions):
            steps = split_steps(completion.text, "line")
            status = grade(completion.text, str(chain.answer)).status
            key = f"q{i}-s{j}"
            jobs.append(SolutionJob(key, f"q{i}", user, str(chain.answer), binary_search(steps, status, config)))
    return jobs


def test_binary_search_keeps_the_engine_fuller_and_finishes_sooner_than_rounds():
    """The issue's claim on the simulated policy: solutions of 4 to 12 steps, binary search asking
    2 rollouts at a time, rollouts as long as what is left of the solution. Same labels either way:
    one solution a problem, so no annotator's probe can find more rollouts than it asked for (which
    depends on timing when solutions share prefixes)."""
    policy = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.2, seed=3))
    outcome = {}
    for mode in ("stream", "rounds"):
        engine = TimedEngine(policy, capacity=32)
        sched = SCHEDULERS[mode](engine, SamplingOptions(), max_in_flight=24)
        labels = {
            j.key: (apply_rule(ann, "hard").labels, ann.label_source)
            for j, ann in sched.run(simulated_jobs(policy, 40))
        }
        window = sched.stats.engine
        assert window is not None
        outcome[mode] = (engine.clock(), window.occupancy, labels, sched.stats.rollouts)
    stream, rounds = outcome["stream"], outcome["rounds"]
    assert stream[0] < 0.8 * rounds[0]  # fewer modelled time units
    assert stream[1] > rounds[1] + 0.1  # a fuller engine
    assert len(stream[2]) == len(rounds[2]) == 40
    assert stream[2] == rounds[2]  # the same labels (and label sources) for every solution


# ---------------------------------------------------------------- the progress watchdog
class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_watchdog_warns_once_per_period_of_no_progress_and_progress_resets_it(caplog):
    from prm_synth.engines.stream import ProgressWatchdog

    clock = FakeClock()
    dog = ProgressWatchdog(after_s=60, clock=clock)
    said: list[str] = []

    def waiting() -> str:
        said.append("asked")
        return "2 request(s) in the engine (fake at http://server/v1)"

    clock.now = 59.9
    assert not dog.check(waiting)
    clock.now = 60
    with caplog.at_level("WARNING"):
        assert dog.check(waiting)
    assert (
        "no progress for 60 s" in caplog.text and "2 request(s) in the engine (fake at http://server/v1)" in caplog.text
    )
    clock.now = 119
    assert not dog.check(waiting)  # at most once per period
    clock.now = 120
    assert dog.check(waiting) and dog.warnings == 2
    dog.progressed()
    clock.now = 179
    assert not dog.check(waiting)
    assert len(said) == 2  # what it waits on is worked out only when it is said
    dog.after_s = 0
    clock.now = 10_000
    assert not dog.check(waiting)  # off


class NeverAnswers:
    """An engine with per-request futures that never resolve: a server that accepts and never replies."""

    model_name = "silent"
    capacity = 4

    def __init__(self) -> None:
        self.futures: list[Future[GenerationResult]] = []

    def submit(self, request: GenerationRequest) -> Future[GenerationResult]:
        future: Future[GenerationResult] = Future()
        self.futures.append(future)
        return future

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        raise NotImplementedError


def test_a_stream_whose_engine_never_answers_says_what_it_waits_on(caplog):
    engine = NeverAnswers()
    stream = GenerationStream(FutureAdapter(engine, engine.capacity, poll_s=0.01))
    stream.watchdog.after_s = 0.2
    futures = stream.submit_all([GenerationRequest("a"), GenerationRequest("b")])
    deadline = 60.0  # generous: the condition, not the time, ends the wait
    start = time.monotonic()
    with caplog.at_level("WARNING", logger="prm_synth.engines.stream"):
        while not stream.watchdog.warnings and time.monotonic() - start < deadline:
            assert not stream.wait(futures, timeout=0.05)
    assert stream.watchdog.warnings >= 1
    lines = [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
    assert lines and "2 request(s) in the engine (silent)" in lines[0]
    engine.futures[0].set_result(GenerationResult((Completion("x", 1),), 1))
    assert stream.wait(futures, timeout=deadline)  # an answer is progress: the stream goes on
    assert futures[0].result().completions[0].text == "x"


class BlocksInGenerate:
    """A batch-only engine whose `generate` blocks until released (in-process vLLM's batch call stuck)."""

    model_name = "blocking"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.entered.set()
        self.release.wait(120)
        return [GenerationResult((Completion("x", 1),) * r.n, 1) for r in requests]

    def close(self) -> None:
        self.release.set()


def test_a_stall_inside_a_blocking_generate_is_reported_by_the_monitor_thread(caplog):
    """The only thread there is drives the engine and is stuck in `generate`: nobody else waits, so the
    waiters' own checks cannot fire; the stream's monitor thread reports the stall all the same."""
    engine = BlocksInGenerate()
    stream = stream_for(engine)
    stream.watchdog.after_s = 0.2
    worker = ThreadPoolExecutor(1)
    with caplog.at_level("WARNING", logger="prm_synth.engines.stream"):
        done = worker.submit(stream.generate, [GenerationRequest("a"), GenerationRequest("b", n=2)])
        assert engine.entered.wait(60)
        deadline = time.monotonic() + 60  # generous: the condition, not the time, ends the wait
        while not stream.watchdog.warnings and time.monotonic() < deadline:
            time.sleep(0.02)
    engine.release.set()
    assert stream.watchdog.warnings >= 1
    lines = [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
    assert lines and "2 request(s) in the engine (blocking)" in lines[0]
    assert [len(r.completions) for r in done.result(timeout=60)] == [1, 2]  # released, it goes on
    worker.shutdown()


def test_a_stop_fails_every_request_at_once_and_every_later_one_without_reaching_the_engine():
    from prm_synth.engines.base import RunStopped

    engine = NeverAnswers()
    stream = GenerationStream(FutureAdapter(engine, engine.capacity, poll_s=0.05))
    futures = stream.submit_all([GenerationRequest("a"), GenerationRequest("b")])
    assert not stream.wait(futures, timeout=0.2)  # both in the engine, unanswered
    assert len(engine.futures) == 2
    waiter = ThreadPoolExecutor(1)
    waiting = waiter.submit(stream.wait, futures, None, True)  # a shard's thread, waiting without a timeout
    stream.stop(RunStopped("the run is stopping (SIGTERM)"))
    assert waiting.result(timeout=60) is True  # released at once, not after the engine
    assert all(isinstance(f.exception(), RunStopped) for f in futures)
    stream.wait([Future()], timeout=0.1)  # whoever drives next aborts them in the engine
    assert all(f.cancelled() for f in engine.futures)
    later = stream.submit(GenerationRequest("c"))
    assert isinstance(later.exception(timeout=0), RunStopped)
    stream.wait([Future()], timeout=0.1)
    assert len(engine.futures) == 2  # the later request never reached the engine
    waiter.shutdown()
