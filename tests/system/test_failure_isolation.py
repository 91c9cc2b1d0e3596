"""One failing request fails only itself: the engine stream, the scheduler, the labeler and the judge.

Fault-injecting fakes throughout; nothing waits for a set time (every wait is on a condition, with a
generous deadline).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from _timed_engine import TimedEngine
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.labeler import make_labeler
from prm_synth.annotate.scheduler import JobsAfter, Probe, ProbeScheduler, Refused, SolutionJob
from prm_synth.config import JudgeConfig, SimulatedJudgeConfig, validate_config
from prm_synth.engines.adapters import BatchAdapter, FutureAdapter
from prm_synth.engines.base import (
    Completion,
    EngineError,
    GenerationRequest,
    GenerationResult,
    Outcome,
    RequestAbandoned,
    RequestRefused,
    SamplingOptions,
    StreamingEngine,
)
from prm_synth.engines.stream import GenerationStream, as_streaming
from prm_synth.judge.ask import judge_records
from prm_synth.pipeline import ShardInput, iter_shards, process_shard
from prm_synth.simulated.engines import SimulatedJudge, SimulatedPolicy
from prm_synth.store.summary import _reconciles

WAIT_S = 60.0  # a generous deadline: a wait that needs it has failed


def ok(text: str = "x") -> GenerationResult:
    return GenerationResult((Completion(text, 1),), prompt_tokens=1)


# ---------------------------------------------------------------- the reproduction (../shared/repro)
class PerRequest:
    """An engine with per-request futures: "bad" fails with an EngineError, "slow..." waits for the gate."""

    model_name = "fake"
    capacity = 8

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(4)
        self.gate = threading.Event()

    def submit(self, request: GenerationRequest) -> Future[GenerationResult]:
        def work() -> GenerationResult:
            if request.user == "bad":
                raise EngineError("HTTP 400: prompt too long")
            if request.user.startswith("slow"):
                self.gate.wait(WAIT_S)
            return ok(request.user)

        return self.pool.submit(work)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        raise NotImplementedError

    def close(self) -> None:
        self.gate.set()
        self.pool.shutdown()


def test_the_reproduction_one_failed_request_fails_only_itself():
    """The issue's reproduction: a request that fails while another is slow. Before: every request in
    flight failed, a later wait raised KeyError on the stale result and the retry never resolved."""
    engine = PerRequest()
    try:
        stream = GenerationStream(as_streaming(engine))
        slow, bad = stream.submit_all([GenerationRequest("slow"), GenerationRequest("bad")])
        assert stream.wait([bad], timeout=WAIT_S)
        with pytest.raises(EngineError, match="prompt too long"):
            bad.result()
        assert not slow.done()  # the slow request was not failed along with the bad one
        (retry,) = stream.submit_all([GenerationRequest("slow-retry")])
        assert not stream.wait([retry], timeout=0.01)  # the retry enters the engine, nothing is back yet
        engine.gate.set()
        assert stream.wait([slow, retry], timeout=WAIT_S, all_of=True)
        assert slow.result().completions[0].text == "slow" and retry.result().completions[0].text == "slow-retry"
    finally:
        engine.close()


# ---------------------------------------------------------------- the stream over a scripted engine
class Scripted:
    """A `StreamingEngine` whose steps return what the test queued; records adds and aborts."""

    capacity = 4

    def __init__(self) -> None:
        self.added: list[int] = []
        self.aborted: list[int] = []
        self.steps: list[list[tuple[int, Outcome]] | Exception] = []

    def add(self, request_id: int, request: GenerationRequest) -> None:
        if request.user == "refuse":
            raise RequestRefused("refused at the door")
        self.added.append(request_id)

    def step(self) -> list[tuple[int, Outcome]]:
        if not self.steps:
            return []
        out = self.steps.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    def abort(self, request_ids: Iterable[int]) -> None:
        self.aborted += list(request_ids)

    def running(self) -> int:
        return len(self.added)

    def clock(self) -> float:
        return 0.0


def test_a_failed_outcome_fails_its_own_future_and_a_stale_result_is_dropped():
    engine = Scripted()
    assert isinstance(engine, StreamingEngine)
    stream = GenerationStream(engine)
    a, b = stream.submit_all([GenerationRequest("a"), GenerationRequest("b")])
    engine.steps = [[(1, RequestRefused("HTTP 400: too long")), (99, ok())], [(0, ok("a"))]]
    assert stream.wait([b], timeout=WAIT_S)  # id 99 is no request of this stream: dropped, no KeyError
    with pytest.raises(RequestRefused, match="too long"):
        b.result()
    assert not a.done()
    assert stream.wait([a], timeout=WAIT_S) and a.result().completions[0].text == "a"


def test_a_request_refused_at_the_door_fails_alone():
    engine = Scripted()
    stream = GenerationStream(engine)
    refused, fine = stream.submit_all([GenerationRequest("refuse"), GenerationRequest("fine")])
    engine.steps = [[(1, ok())]]
    assert stream.wait([refused, fine], timeout=WAIT_S, all_of=True)
    assert isinstance(refused.exception(), RequestRefused) and fine.result() is not None
    assert engine.added == [1]


def test_an_engine_that_fails_fails_what_is_in_flight_and_aborts_it():
    engine = Scripted()
    stream = GenerationStream(engine)
    futures = stream.submit_all([GenerationRequest("a"), GenerationRequest("b")])
    engine.steps = [RuntimeError("device lost")]
    assert stream.wait(futures, timeout=WAIT_S, all_of=True)
    for future in futures:
        with pytest.raises(EngineError, match="device lost"):
            future.result()
    assert sorted(engine.aborted) == [0, 1]
    # a late result for an aborted request is dropped; the stream serves the next request
    (later,) = stream.submit_all([GenerationRequest("c")])
    engine.steps = [[(0, ok()), (2, ok("c"))]]
    assert stream.wait([later], timeout=WAIT_S) and later.result().completions[0].text == "c"


def test_given_up_requests_fail_at_once_and_are_aborted_at_the_next_drive():
    engine = Scripted()
    stream = GenerationStream(engine)
    kept, dropped, queued = stream.submit_all([GenerationRequest(u) for u in ("kept", "dropped", "queued")])
    assert not stream.wait([kept], timeout=0.01)  # all three are in the engine now
    stream.give_up([dropped])
    with pytest.raises(RequestAbandoned):
        dropped.result()
    engine.steps = [[(1, ok("late")), (0, ok("kept"))]]
    assert stream.wait([kept], timeout=WAIT_S)
    assert engine.aborted == [1] and kept.result().completions[0].text == "kept"
    # given up before it entered the engine: it never does
    (never,) = stream.submit_all([GenerationRequest("never")])
    stream.give_up([never])
    stream.give_up([never])  # twice is harmless
    engine.steps = [[(2, ok())]]
    assert stream.wait([queued], timeout=WAIT_S)
    assert 3 not in engine.added


def test_waiting_without_a_timeout_on_a_future_nobody_resolves_raises_instead_of_hanging():
    stream = GenerationStream(Scripted())
    foreign: Future[Any] = Future()
    with pytest.raises(RuntimeError, match="does not hold"):
        stream.wait([foreign])
    assert stream.wait([foreign], timeout=0.05) is False


def test_a_batch_engine_that_refuses_one_request_fails_only_that_one():
    class Refusing(SimulatedPolicy):
        def generate(self, requests):
            if any(r.user == "too long" for r in requests):
                raise RequestRefused("context length exceeded")
            return super().generate(requests)

    stream = GenerationStream(BatchAdapter(Refusing()))
    futures = stream.submit_all([GenerationRequest(u) for u in ("a", "too long", "b")])
    assert stream.wait(futures, timeout=WAIT_S, all_of=True)
    assert [f.exception() is None for f in futures] == [True, False, True]
    assert isinstance(futures[1].exception(), RequestRefused)


def test_the_future_adapter_cancels_an_aborted_request():
    engine = PerRequest()
    try:
        adapter = as_streaming(engine)
        assert isinstance(adapter, FutureAdapter)
        adapter.add(0, GenerationRequest("slow"))
        adapter.add(1, GenerationRequest("fast"))
        adapter.abort([0])
        assert adapter.running() == 1
        engine.gate.set()
        finished = []
        while not finished:
            finished = adapter.step()
        assert [rid for rid, _ in finished] == [1]
    finally:
        engine.close()


# ---------------------------------------------------------------- the scheduler
class RefusePrefixes:
    """Instant engine: a request whose prefix is listed is refused, one whose prefix is "gone" fails the
    engine; every other request gets `n` completions "x"."""

    model_name = "refusing"

    def __init__(self, refused: set[str], gone: str | None = None) -> None:
        self.refused = refused
        self.gone = gone

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        for r in requests:
            if r.assistant_prefix == self.gone:
                raise EngineError("server gone")
            if r.assistant_prefix in self.refused:
                raise RequestRefused(f"HTTP 400: prefix {r.assistant_prefix!r} too long")
        return [GenerationResult(tuple(Completion("x", 1) for _ in range(r.n)), 1) for r in requests]

    def close(self) -> None:
        pass


def two_probes(first: str, second: str) -> Any:
    results = yield [Probe(first, 2)]
    results += yield [Probe(second, 2)]
    return [r.total for r in results]


def test_a_refused_probe_ends_only_the_annotators_that_need_it():
    engine = RefusePrefixes({"long"})
    sched = ProbeScheduler(engine, SamplingOptions(), grader=lambda text, gold: "correct")
    jobs = [
        SolutionJob("a", "p", "Q", "1", two_probes("s", "long")),
        SolutionJob("b", "p", "Q", "1", two_probes("long", "t")),  # shares the refused prefix
        SolutionJob("c", "q", "Q", "1", two_probes("s", "t")),
    ]
    out = dict((job.key, value) for job, value in sched.run(jobs))
    assert out["c"] == [2, 2]
    assert isinstance(out["a"], Refused) and isinstance(out["b"], Refused)
    assert "'long' too long" in out["a"].message
    assert sched.stats.annotators_refused == 2 and sched.stats.annotators_done == 1
    assert sched.stats.requests_refused >= 1


def test_a_refused_sampling_request_is_reported_and_makes_no_jobs():
    engine = RefusePrefixes({"refused"})
    sched = ProbeScheduler(engine, SamplingOptions(), grader=lambda text, gold: "correct")
    told: list[str] = []
    sampling = sched.submit([GenerationRequest("Q", "refused"), GenerationRequest("Q", "fine")])

    def make(result: GenerationResult) -> list[SolutionJob]:
        return [SolutionJob("fine-s0", "fine", "Q", "1", two_probes("a", "b"))]

    source = [JobsAfter(sampling[0], make, lambda e: told.append(str(e))), JobsAfter(sampling[1], make)]
    done = [job.key for job, _ in sched.run(source)]
    assert done == ["fine-s0"] and len(told) == 1 and "too long" in told[0]


def test_an_engine_that_is_gone_ends_the_run_and_gives_up_what_is_out():
    engine = Scripted()
    sched = ProbeScheduler(engine, SamplingOptions(), grader=lambda text, gold: "correct")  # type: ignore[arg-type]
    jobs = [SolutionJob(k, k, "Q", "1", two_probes("a", "b")) for k in ("j0", "j1")]
    engine.steps = [[(0, EngineError("server gone"))]]
    with pytest.raises(EngineError, match="server gone"):
        list(sched.run(jobs))
    assert engine.aborted == [1]  # the other job's request, still out, was given up and aborted


@settings(max_examples=40, deadline=None)
@given(
    rounds=st.lists(st.lists(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=3), max_size=3), max_size=8),
    refused=st.sets(st.sampled_from("abcdefg")),
    in_flight=st.integers(1, 4),
    batch=st.integers(1, 4),
    timed=st.booleans(),
)
def test_whatever_is_refused_every_job_ends_once_refused_exactly_when_it_needed_a_refused_prefix(
    rounds, refused, in_flight, batch, timed
):
    """Jobs of one problem share prefixes; any set of them is refused (in a step, or at the door of a
    streaming engine). Every job is yielded exactly once: `Refused` when one of its rounds asked for a
    refused prefix, its annotation otherwise. The run always ends."""

    def scripted(job_rounds: list[list[str]]) -> Any:
        for prefixes in job_rounds:
            yield [Probe(prefix, 2) for prefix in prefixes]
        return "done"

    plain = RefusePrefixes(set(refused))
    engine: Any = TimedEngine(plain, capacity=3) if timed else plain
    sched = ProbeScheduler(
        engine, SamplingOptions(), max_batch_requests=batch, max_in_flight=in_flight, grader=lambda t, g: "correct"
    )
    jobs = [SolutionJob(f"j{i}", "p", "Q", "1", scripted(r)) for i, r in enumerate(rounds)]
    out: dict[str, Any] = {}
    for job, value in sched.run(jobs):
        assert job.key not in out
        out[job.key] = value
    assert set(out) == {job.key for job in jobs}
    for i, job_rounds in enumerate(rounds):
        needs_refused = any(prefix in refused for prefixes in job_rounds for prefix in prefixes)
        assert isinstance(out[f"j{i}"], Refused) == needs_refused


# ---------------------------------------------------------------- the pipeline: rows, rejections, counts
def simulated_config(**overrides: Any) -> Any:
    data: dict[str, Any] = {
        "problems": {"kind": "builtin", "count": 6, "seed": 0, "min_ops": 2, "max_ops": 4},
        "policy": {"kind": "simulated", "step_error": 0.3, "seed": 0, "step_format": "line"},
        "sampling": {"samples_per_problem": 2},
        "steps": {"strategy": "line"},
        "annotate": {"method": "binary"},
        "output": {"shard_size": 6},
    }
    return validate_config(data | overrides, check_paths=False)


class RefusingPolicy(SimulatedPolicy):
    """The simulated policy behind a server that refuses some prompts (refused(request) -> bool)."""

    def __init__(self, config: Any, refused: Any) -> None:
        super().__init__(config)
        self.refused = refused

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if any(self.refused(r) for r in requests):
            raise RequestRefused("HTTP 400: This model's maximum context length is 2048 tokens")
        return super().generate(requests)


def run_shard(config: Any, engine: Any) -> Any:
    (shard,) = list(iter_shards(config))
    return shard, process_shard(engine, config, ShardInput(shard.index, shard.items), "fp")


@pytest.mark.parametrize("method", ["binary", "mc", "omegaprm"])
def test_a_problem_whose_every_request_is_refused_is_rejected_and_the_shard_goes_on(method):
    annotate = (
        {"method": method}
        | ({"k": 4} if method != "binary" else {})
        | ({"rollout_budget": 40} if method == "omegaprm" else {})
    )
    config = simulated_config(annotate=annotate)
    (shard,) = list(iter_shards(config))
    victim = shard.items[2]
    engine = RefusingPolicy(config.policy, lambda r: victim.question in r.user)
    _, out = run_shard(config, engine)
    refused = [r for r in out.rejected if r.reason == "engine_refused"]
    assert refused and {r.problem_id for r in refused} == {victim.id}
    assert all("maximum context length" in (r.detail or "") for r in refused)
    others = {p.id for p in shard.items} - {victim.id}
    labeled = {r.problem_id for r in out.records}
    assert victim.id not in labeled
    # omegaprm screens some questions out (all rollouts right or all wrong): rejected, not refused
    assert labeled == others if method != "omegaprm" else labeled and labeled <= others
    assert out.stats.requests_refused >= 1 and out.stats.rejected_by_reason["engine_refused"] == len(refused)
    stats, rows, rejected = out.stats, len(out.records), len(out.rejected)
    assert _reconciles(config.model_dump(mode="json"), stats, rows, rejected, 2)


def test_a_refused_rollout_rejects_its_solution_and_the_others_are_labeled():
    config = simulated_config()
    first = {"n": 0}

    def refuse_one_prefix(r: GenerationRequest) -> bool:
        # the first prefix of the run that is probed: every later request for it is refused too
        if r.assistant_prefix and not first["n"]:
            first["n"] = r.assistant_prefix
        return bool(r.assistant_prefix) and r.assistant_prefix == first["n"]

    engine = RefusingPolicy(config.policy, refuse_one_prefix)
    shard, out = run_shard(config, engine)
    refused = [r for r in out.rejected if r.reason == "engine_refused"]
    assert refused and all(r.stage == "annotate" for r in refused)
    assert len(out.records) + len(out.rejected) == len(shard.items) * 2
    assert {r.id for r in out.records}.isdisjoint(r.id for r in refused)


def test_a_shard_whose_engine_is_gone_gives_up_its_sampling_requests_not_yet_read():
    """The scheduler reads problems only as far as max_in_flight allows: when the shard fails, the
    sampling requests of the problems it never reached are given up too (none runs for nobody)."""
    config = simulated_config(run={"max_in_flight": 1})
    (shard,) = list(iter_shards(config))
    engine = Scripted()
    engine.steps = [[(0, EngineError("server gone"))]]  # the first problem's sampling request
    with pytest.raises(EngineError, match="server gone"):
        make_labeler(config).label(engine, list(shard.items))  # type: ignore[arg-type]
    assert sorted(engine.aborted) == list(range(1, len(shard.items)))


def test_a_refused_judge_request_rejects_that_row_only():
    config = simulated_config()
    _, out = run_shard(config, SimulatedPolicy(config.policy))
    records = out.records
    victim = records[1]

    class RefusingJudge(SimulatedJudge):
        def generate(self, requests):
            if any(victim.steps[0] in r.user and victim.question in r.user for r in requests):
                raise RequestRefused("HTTP 400: judge prompt too long")
            return super().generate(requests)

    judge = JudgeConfig(engine=SimulatedJudgeConfig(), samples=3)
    kept, rejected, stats = judge_records(RefusingJudge(judge.engine), records, judge, max_batch_requests=4)
    assert victim.id in {r.id for r in rejected} and all(r.stage == "judge" for r in rejected)
    assert len(kept) + len(rejected) == len(records) and stats.refused == len(rejected)
    assert all(r.judge_votes for r in kept)


# ---------------------------------------------------------------- vLLM: an add that fails part-way
@pytest.mark.slow  # imports vLLM (half a minute on two cores)
def test_vllm_add_that_fails_on_the_second_sample_aborts_the_first():
    pytest.importorskip("vllm")
    from prm_synth.config import VLLMConfig
    from prm_synth.engines.vllm import VLLMEngine

    class Tokenizer:
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            return " ".join(m["content"] for m in messages)

        def __call__(self, text, **kwargs):
            return type("Encoded", (), {"input_ids": list(range(len(text.split())))})()

    class LLMEngine:
        def __init__(self) -> None:
            self.model_config = type("M", (), {"max_model_len": 1024})()
            self.vllm_config = type("V", (), {"scheduler_config": type("S", (), {"max_num_seqs": 8})()})()
            self.requests: list[str] = []
            self.aborted: list[str] = []

        def add_request(self, request_id, prompt, params):
            if request_id.endswith(".1"):
                raise ValueError("the prompt is too long for this sampling setting")
            self.requests.append(request_id)

        def abort_request(self, request_ids, internal=False):
            self.aborted += request_ids

        def step(self):
            return []

    class LLM:
        def __init__(self) -> None:
            self.llm_engine = LLMEngine()

        def get_tokenizer(self):
            return Tokenizer()

    llm = LLM()
    engine = VLLMEngine(VLLMConfig(model="fake"), llm=llm)
    with pytest.raises(RequestRefused, match="too long"):
        engine.add(0, GenerationRequest("q", n=3))
    assert llm.llm_engine.aborted == ["0.0"]  # the sample already added does not run for nobody
    assert engine.running() == 0 and engine.step() == []
    # through the stream: that request fails alone, and the engine is still usable
    engine.add(5, GenerationRequest("q", n=1))
    engine.abort([5])
    assert llm.llm_engine.aborted == ["0.0", "5.0"] and engine.running() == 0


class ShortContextLLM:
    """A stand-in for `vllm.LLM` whose context holds `max_model_len` whitespace tokens; it never runs a
    request (every test prompt is longer), so no vLLM is needed."""

    def __init__(self, max_model_len: int) -> None:
        self.added: list[str] = []
        context = type("M", (), {"max_model_len": max_model_len})()
        scheduler = type("V", (), {"scheduler_config": type("S", (), {"max_num_seqs": 8})()})()
        test = self

        class LLMEngine:
            model_config, vllm_config = context, scheduler

            def add_request(self, request_id, prompt, params):
                test.added.append(request_id)

            def step(self):
                return []

        self.llm_engine = LLMEngine()

    def get_tokenizer(self):
        class Tokenizer:
            def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
                return " ".join(m["content"] for m in messages)

            def __call__(self, text, **kwargs):
                return type("Encoded", (), {"input_ids": text.split()})()

        return Tokenizer()


def test_in_process_vllm_refuses_a_prompt_over_the_context_and_the_problem_is_rejected_with_the_reason():
    """vLLM in process, as a vLLM server over HTTP: a prompt that leaves no room to generate is a refused
    request, so its problem becomes `engine_refused` rows naming the context, never an empty completion
    graded as evidence (issue 28 item 7, issue 29 item 6)."""
    from prm_synth.config import VLLMConfig
    from prm_synth.engines.vllm import VLLMEngine, check_prompt_fits

    check_prompt_fits(9, 10, "m")  # one token of room is room
    with pytest.raises(RequestRefused, match="maximum context length is 10 tokens.*10 tokens"):
        check_prompt_fits(10, 10, "m")
    llm = ShortContextLLM(max_model_len=4)  # every question of the shard is longer
    engine = VLLMEngine(VLLMConfig(model="fake"), llm=llm)
    config = simulated_config()
    (shard,) = list(iter_shards(config))
    out = process_shard(engine, config, ShardInput(shard.index, shard.items), "fp")
    assert out.records == [] and llm.added == []  # nothing ran
    assert {r.reason for r in out.rejected} == {"engine_refused"}
    assert {r.problem_id for r in out.rejected} == {p.id for p in shard.items}
    assert all("maximum context length is 4 tokens" in (r.detail or "") for r in out.rejected)
    assert out.stats.requests_refused == len(shard.items)
    assert "split" not in {r.stage for r in out.rejected}  # not "the policy produced no text"


# ---------------------------------------------------------------- a real `prm-synth run` over HTTP
@pytest.mark.slow
def test_a_run_against_a_server_that_refuses_one_problem_rejects_it_and_labels_the_rest(tmp_path):
    """The issue's measurement, small: an OpenAI-compatible server answers HTTP 400 (context length
    exceeded) to every prompt of one problem. The run ends with exit 0, that problem rejected naming
    the server's message, every other problem labeled, the counts reconciled."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml
    from fault_proxy import SimulatedCompletionsServer

    from prm_synth.config import SimulatedPolicyConfig
    from prm_synth.problems.sources import iter_problems
    from prm_synth.store.readers import iter_tables

    root = Path(__file__).resolve().parents[2]
    problems = {"kind": "builtin", "count": 12, "seed": 0, "min_ops": 2, "max_ops": 5}
    victim = list(iter_problems(validate_config({"problems": problems, "policy": {"kind": "simulated"}}).problems))[5]
    policy = SimulatedPolicyConfig(step_error=0.2, seed=0, step_format="line")
    with SimulatedCompletionsServer(refuse=victim.question, config=policy) as server:
        config = {
            "name": "refused",
            "problems": problems,
            "policy": {"kind": "openai", "model": "simulated", "base_url": f"{server.url}/v1", "max_retries": 2},
            "sampling": {"samples_per_problem": 2},
            "steps": {"strategy": "line"},
            "output": {"shard_size": 4},
        }
        path = tmp_path / "pipeline.yaml"
        path.write_text(yaml.safe_dump(config))
        env = os.environ | {"PYTHONPATH": str(root), "PREFECT_HOME": str(tmp_path / "prefect")}
        cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(path), "--out", str(tmp_path / "out"), "--json"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["reconciles"] is True and summary["shards_failed"] == []
    assert summary["rejected_by_reason"] == {"engine_refused": 2} and summary["requests_refused"] == 1
    assert summary["problems_labeled"] == 11 and summary["rows"] == 22
    rejected = [row for table in iter_tables(tmp_path / "out", "rejected") for row in table.to_pylist()]
    assert {r["problem_id"] for r in rejected} == {victim.id}
    assert all(r["stage"] == "sample" and "maximum context length is 2048" in r["detail"] for r in rejected)
    assert server.refused == 1
