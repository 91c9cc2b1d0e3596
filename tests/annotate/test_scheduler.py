from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future

import pytest
from _rounds import SCHEDULERS
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.protocol import Annotator, Probe, ProbeResult, Wait
from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
from prm_synth.engines.base import Completion, GenerationRequest, GenerationResult, SamplingOptions


class CountingEngine:
    """Answers "correct" for prefixes whose text contains 'good'; records every request."""

    model_name = "counting"

    def __init__(self) -> None:
        self.calls: list[list[GenerationRequest]] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.calls.append(list(requests))
        return [GenerationResult(tuple(Completion("ok", 1) for _ in range(r.n)), prompt_tokens=1) for r in requests]

    def close(self) -> None:
        pass


def grader(text: str, gold: str) -> str:
    return "correct" if text.split("|")[-2].startswith("good") else "incorrect"


def scripted(rounds: list[list[Probe]], log: list) -> Annotator[list]:
    for probes in rounds:
        results = yield probes
        log.append((probes, results))
    return log


STEPS = [("good" if i % 2 == 0 else "bad") + f"{i}|" for i in range(6)]
probe_st = st.builds(lambda step, k: Probe.of_steps(STEPS, step, k), st.integers(0, 5), st.integers(1, 6))
job_st = st.tuples(st.integers(0, 2), st.lists(st.lists(probe_st, max_size=4), max_size=4))


@settings(max_examples=60, deadline=None)
@given(
    jobs=st.lists(job_st, min_size=1, max_size=12),
    in_flight=st.integers(1, 5),
    batch=st.integers(1, 7),
    mode=st.sampled_from(["stream", "rounds"]),
)
def test_every_probe_is_answered_once_in_order_and_duplicates_are_estimated_once(jobs, in_flight, batch, mode):
    engine = CountingEngine()
    sched = SCHEDULERS[mode](
        engine, SamplingOptions(), max_batch_requests=batch, max_in_flight=in_flight, grader=grader
    )
    logs = [[] for _ in jobs]
    specs = [
        SolutionJob(f"j{i}", f"p{problem}", "Q", "1", scripted(rounds, logs[i]))
        for i, (problem, rounds) in enumerate(jobs)
    ]
    finished = dict((job.key, value) for job, value in sched.run(specs))
    assert set(finished) == {f"j{i}" for i in range(len(jobs))}
    for i, (_problem, rounds) in enumerate(jobs):
        assert finished[f"j{i}"] is logs[i]
        asked = [probes for probes, _ in logs[i]]
        assert asked == rounds  # every round answered, in order, reaching the annotator that asked
        for probes, results in logs[i]:
            assert [r.step for r in results] == [p.step for p in probes]
            for p, r in zip(probes, results, strict=True):
                assert r.total >= p.k
                assert r.correct == (r.total if p.step % 2 == 0 else 0)
    # Rollouts spent on a prefix of a problem = the largest k any probe asked for it, never more.
    biggest: Counter = Counter()
    for problem, rounds in jobs:
        for probes in rounds:
            for p in probes:
                key = (f"p{problem}", p.prefix)
                biggest[key] = max(biggest[key], p.k)
    assert all(len(call) <= batch for call in engine.calls)
    total = sum(r.n for call in engine.calls for r in call)
    assert total == sum(biggest.values()) == sched.stats.rollouts


@pytest.mark.parametrize("mode", ["stream", "rounds"])
def test_probes_of_many_problems_share_one_engine_call(mode):
    engine = CountingEngine()
    sched = SCHEDULERS[mode](engine, SamplingOptions(), max_batch_requests=100, max_in_flight=50, grader=grader)
    rounds = [[Probe.of_steps(STEPS, 0, 2)], [Probe.of_steps(STEPS, 1, 2)]]
    specs = [SolutionJob(f"j{i}", f"p{i}", "Q", "1", scripted(rounds, [])) for i in range(30)]
    assert len(list(sched.run(specs))) == 30
    assert len(engine.calls) == 2  # round one of all 30 annotators, then round two
    assert all(len(call) == 30 for call in engine.calls)


@pytest.mark.parametrize("mode", ["stream", "rounds"])
def test_more_rollouts_on_a_known_prefix_only_samples_the_missing_ones(mode):
    engine = CountingEngine()
    sched = SCHEDULERS[mode](engine, SamplingOptions(), grader=grader)
    log: list = []
    rounds = [[Probe.of_steps(STEPS, 0, k)] for k in (4, 10, 3)]
    spec = SolutionJob("j", "p", "Q", "1", scripted(rounds, log))
    list(sched.run([spec]))
    assert [r.n for call in engine.calls for r in call] == [4, 6]
    assert [call[0].first_sample_index for call in engine.calls] == [0, 4]
    assert [res[0].total for _, res in log] == [4, 10, 3]  # exactly the first k samples: order-free rows
    assert sched.stats.probes_reused == 1


@settings(max_examples=40, deadline=None)
@given(waiters=st.integers(1, 6), others=st.integers(0, 4), in_flight=st.integers(1, 4), batch=st.integers(1, 5))
def test_a_waiting_annotator_resumes_with_the_futures_result_and_does_not_hold_a_slot(
    waiters, others, in_flight, batch
):
    engine = CountingEngine()
    sched = ProbeScheduler(engine, SamplingOptions(), max_batch_requests=batch, max_in_flight=in_flight, grader=grader)
    ready: Future[str] = Future()
    got: dict[str, object] = {}

    def waiter(key: str) -> Annotator[str]:
        yield [Probe.of_steps(STEPS, 0, 2)]
        got[key] = yield Wait(ready)
        (result,) = yield [Probe.of_steps(STEPS, 1, 2)]
        return f"{key}:{result.total}"

    def resolver() -> Annotator[str]:
        yield [Probe.of_steps(STEPS, 2, 3)]
        ready.set_result("pooled")  # e.g. the last member of a shard's first phase
        return "resolver"

    # the waiters come first: with one slot, the resolver only runs because waiting frees the slot
    specs = [SolutionJob(f"w{i}", "p", "Q", "1", waiter(f"w{i}")) for i in range(waiters)]
    specs += [SolutionJob("r", "p", "Q", "1", resolver())]
    specs += [
        SolutionJob(f"o{i}", f"p{i}", "Q", "1", scripted([[Probe.of_steps(STEPS, 0, 1)]], [])) for i in range(others)
    ]
    finished = dict((job.key, value) for job, value in sched.run(specs))
    assert got == {f"w{i}": "pooled" for i in range(waiters)}
    assert {finished[f"w{i}"] for i in range(waiters)} == {f"w{i}:2" for i in range(waiters)} and finished[
        "r"
    ] == "resolver"
    assert len(finished) == waiters + 1 + others
    assert sched.stats.annotators_waited == waiters


def test_annotators_waiting_on_a_future_nobody_resolves_fail_the_run_loudly():
    never: Future[str] = Future()

    def waiter() -> Annotator[str]:
        yield Wait(never)
        return "unreachable"

    sched = ProbeScheduler(CountingEngine(), SamplingOptions(), grader=grader)
    with pytest.raises(RuntimeError, match="1 annotator.*wait on futures nobody will resolve"):
        list(sched.run([SolutionJob("w", "p", "Q", "1", waiter())]))


def test_annotator_that_asks_nothing_finishes():
    def nothing() -> Annotator[str]:
        return "done"
        yield []  # pragma: no cover

    sched = ProbeScheduler(CountingEngine(), SamplingOptions(), grader=grader)
    spec = SolutionJob("j", "p", "Q", "1", nothing())
    assert [v for _, v in sched.run([spec])] == ["done"]


def test_probe_result_mc():
    assert ProbeResult(0, 3, 4).mc == 0.75
    assert ProbeResult(0).mc is None
