"""The probe scheduler: many sequential annotators, one engine kept full.

Annotators speak the protocol of `protocol.py` (they yield `Probe`s and are sent `ProbeResult`s).
Binary search and MCTS stay plain sequential code, while the scheduler keeps many
solutions in flight, estimates each distinct prefix of a problem once (a later probe of the same
prefix reuses and, if it wants more rollouts, extends the earlier estimate; a probe of a prefix that
is being sampled right now waits for that estimate instead of sampling it again), grades the
rollouts, and resumes each annotator.

Every probe's request goes into the engine's stream (engines/stream.py) at once, and an annotator
resumes as soon as the rollouts of its own probes are back and graded. The engine holds up to its
capacity of sequences the whole time; nothing waits for the slowest rollout of a round. Jobs may
also arrive while the scheduler runs (`JobsAfter`: the annotators of a problem whose solutions are
still being sampled), so sampling and annotation share the engine. A request the engine refuses
(`RequestRefused`: e.g. a prefix longer than the model's context) ends the annotators that wait on
it: each is yielded with `Refused` instead of its annotation, and the others go on. Any other engine
error ends the run (the shard fails and is redone), and the requests still out are given up, so the
engine stops running them. A per-job token budget (`max_rollout_tokens`) is enforced here, where every
method's probes pass, by the run's `TokenLedger` (token_ledger.py): a job out of tokens gets no new
rollouts, its later probes are answered from what is measured already, and it is listed in
`out_of_tokens` (its row's undecided steps say `token_budget`). What the scheduler is handed and
hands back (the jobs, `Refused`, its stats) is in jobs.py. (A scheduler that sends every pending probe
as one batch and waits for all of it, the former behaviour, is kept in benchmarks/ as the baseline
this one is measured against.)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from prm_synth.annotate.jobs import JobsAfter, ProgressCallback, Refused, SchedulerStats, SolutionJob
from prm_synth.annotate.prefix_estimate import PrefixEstimate, PrefixKey
from prm_synth.annotate.protocol import Probe, ProbeResult, Wait
from prm_synth.annotate.token_cost import NO_TOKEN_BUDGET, TokenBudget
from prm_synth.annotate.token_ledger import Need, Spend, TokenLedger
from prm_synth.engines.base import Engine, GenerationRequest, GenerationResult, RequestRefused, SamplingOptions
from prm_synth.engines.stream import GenerationStream, stream_for
from prm_synth.grading.math import grade, is_truncated
from prm_synth.telemetry import EngineTelemetry, ProgressSnapshot

T = TypeVar("T")


@dataclass
class _Pending:
    job: SolutionJob[Any]
    probes: list[Probe]
    need: dict[PrefixKey, int] = field(default_factory=dict)  # prefixes still short of rollouts -> k wanted


@dataclass
class _Sent:
    """One request of the scheduler's in the engine."""

    key: PrefixKey
    job: SolutionJob[Any]  # the annotator whose probe caused it (its spend)
    n: int
    first: int  # the first sample index it asked for
    held: int = 0  # tokens of the job's budget its rollouts may write at most (n x their max_tokens)


class ProbeScheduler:
    """Drives annotators in flight; see the module docstring.

    max_in_flight: annotators running at once. max_batch_requests: requests in one engine call
    in the engine at once for this scheduler. on_progress: called at least
    every `progress_interval_s` seconds while work is going on, and once at the end.
    """

    def __init__(
        self,
        engine: Engine,
        sampling: SamplingOptions,
        max_batch_requests: int = 256,
        max_in_flight: int = 64,
        grader: Callable[[str, str], str] | None = None,
        *,
        on_progress: ProgressCallback | None = None,
        progress_interval_s: float = 2.0,
        label: str = "annotate",
        budget: TokenBudget = NO_TOKEN_BUDGET,
        grade_batch: Callable[[list[str], str], list[str]] | None = None,
    ) -> None:
        self.engine = engine
        self.stream: GenerationStream = stream_for(engine)
        self.sampling = sampling
        self.max_batch_requests = max_batch_requests
        self.max_in_flight = max_in_flight
        self.grader = grader or (lambda text, gold: grade(text, gold).status)
        # a request's rollouts graded together (`code`: their programs run at once, grading/code.py)
        self.grade_batch = grade_batch or (lambda texts, gold: [self.grader(t, gold) for t in texts])
        self.on_progress = on_progress
        self.progress_interval_s = progress_interval_s
        self.label = label
        self.budget = budget
        # per-job spend (`spend`) and the token budget kept (`out_of_tokens`)
        self.ledger = TokenLedger(budget, sampling.max_tokens)
        self.stats = SchedulerStats()
        # (problem_key, prefix text) -> accumulated estimate; lives for one run of the scheduler.
        self._estimates: dict[PrefixKey, PrefixEstimate] = {}
        # samples asked and not back yet, who waits for which prefix, requests out
        self._inflight: dict[PrefixKey, int] = {}
        self._waiters: dict[PrefixKey, list[_Pending]] = {}
        self._sent: dict[Future[GenerationResult], _Sent] = {}
        self._unsent: deque[tuple[GenerationRequest, _Sent]] = deque()
        self._resumable: deque[_Pending] = deque()
        self._deferred: dict[Future[Any], JobsAfter] = {}
        self._refused: deque[tuple[SolutionJob[Any], Refused]] = deque()  # ended, not yet yielded
        self._failed: set[str] = set()  # keys of jobs ended by a refused request
        self._total: int | None = None
        self._started = self._last_report = 0.0

    @property
    def spend(self) -> dict[str, Spend]:
        """Per job key: the rollouts and tokens its probes caused."""
        return self.ledger.spend

    @property
    def out_of_tokens(self) -> set[str]:
        """Keys of jobs whose token budget is spent."""
        return self.ledger.out_of_tokens

    @property
    def telemetry(self) -> EngineTelemetry:
        return self.stream.telemetry

    def submit(self, requests: Sequence[GenerationRequest]) -> list[Future[GenerationResult]]:
        """Plain requests (e.g. a shard's solution sampling) into the same engine stream; one future
        each. They run beside the probes, so the engine does not drain between stages."""
        return self.stream.submit_all(requests)

    def run(
        self, jobs: Iterable[SolutionJob[T] | JobsAfter], total: int | None = None
    ) -> Iterator[tuple[SolutionJob[T], T | Refused]]:
        """Yield (job, annotation) as annotators finish, (job, Refused) for those the engine refused;
        at most max_in_flight run at once.

        total: how many jobs to expect (for progress only)."""
        self._total = total
        self._started = self._last_report = time.perf_counter()
        engine_start = self.telemetry.totals()
        try:
            yield from self._drive(iter(jobs))
        finally:
            # a run that ends early (an engine error, a consumer that stops) leaves requests out
            self.stream.give_up([*self._sent, *self._deferred])
            self.ledger.settle((est.read_by, est.asked_by) for est in self._estimates.values())
            self.stats.seconds = time.perf_counter() - self._started
            self.stats.engine = EngineTelemetry.window(engine_start, self.telemetry.totals())
            self._report(finished=True)

    # ------------------------------------------------------------ the stream
    def _drive(self, source: Iterator[SolutionJob[T] | JobsAfter]) -> Iterator[tuple[SolutionJob[T], T | Refused]]:
        ready: deque[SolutionJob[Any]] = deque()  # jobs made by a resolved JobsAfter
        deferred = self._deferred
        waiting: list[tuple[SolutionJob[Any], Wait]] = []  # annotators that yielded a Wait (not in flight)
        exhausted = False
        in_flight = 0

        def hold(job: SolutionJob[Any], value: Any) -> None:
            nonlocal in_flight
            if isinstance(value, Wait):
                waiting.append((job, value))
                in_flight -= 1
            else:
                self._register(_Pending(job, value))

        while True:
            while in_flight + len(deferred) < self.max_in_flight and (ready or not exhausted):
                if ready:
                    job = ready.popleft()
                else:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    if isinstance(item, JobsAfter):
                        deferred[item.future] = item
                        continue
                    job = item
                in_flight += 1
                done, value = self._start(job)
                if done:
                    in_flight -= 1
                    yield job, value
                else:
                    hold(job, value)
            while self._refused:
                in_flight -= 1
                yield self._refused.popleft()
            while self._resumable:
                pending = self._resumable.popleft()
                if pending.job.key in self._failed:
                    continue
                results = [self._result(pending.job, probe) for probe in pending.probes]
                done, value = self._advance(pending.job, results)
                if done:
                    in_flight -= 1
                    yield pending.job, value
                else:
                    hold(pending.job, value)
            woken = [pair for pair in waiting if pair[1].future.done()]  # done by what just ran
            for pair in woken:
                waiting.remove(pair)
                job, wait = pair
                in_flight += 1
                done, value = self._advance(job, wait.future.result())
                if done:
                    in_flight -= 1
                    yield job, value
                else:
                    hold(job, value)
            if woken or (in_flight + len(deferred) < self.max_in_flight and (ready or not exhausted)):
                continue  # room for more annotators before waiting on the engine
            self._send()
            if not self._sent and not deferred:
                if in_flight == 0 and exhausted and not ready and not waiting:
                    return
                what = f"{len(waiting)} wait on futures nobody will resolve" if in_flight == 0 else "wait on nothing"
                raise RuntimeError(f"{in_flight + len(waiting)} annotator(s) {what}: a scheduler or annotator bug")
            self._wait_stream(deferred, ready)

    def _start(self, job: SolutionJob[Any]) -> tuple[bool, Any]:
        self.ledger.open(job.key)
        self.stats.annotators_started += 1
        return self._advance(job, None)

    def _advance(self, job: SolutionJob[Any], results: Any) -> tuple[bool, Any]:
        """Resume the annotator with its probes' results (None: start it; or what its `Wait` waited for):
        (True, its annotation) when it finished, else (False, its new probes or its `Wait`)."""
        try:
            probes = next(job.annotator) if results is None else job.annotator.send(results)
        except StopIteration as stop:
            self.stats.annotators_done += 1
            return True, stop.value
        if isinstance(probes, Wait):
            self.stats.annotators_waited += 1
            return False, probes
        for probe in probes:
            if probe.k < 1:
                raise ValueError(f"annotator of {job.key} asked for an invalid probe {probe}")
        self.stats.probes_asked += len(probes)
        return False, probes

    def _register(self, pending: _Pending) -> None:
        """Ask the engine for what no estimate (done or in flight) of each prefix covers."""
        job = pending.job
        # each new rollout may write only its share of what is left of the job's token budget
        cap = self.ledger.admit(job.key, job.length, self._needs(job, pending.probes))
        if job.key in self.out_of_tokens:  # no new rollouts: answered from what is measured
            for probe in pending.probes:
                self._estimates.setdefault((job.problem_key, probe.prefix), PrefixEstimate())
            self._resumable.append(pending)
            return
        for probe in pending.probes:
            key = (job.problem_key, probe.prefix)
            est = self._estimates.get(key)
            have = est.total if est else 0
            if have >= probe.k:
                self.stats.probes_reused += 1
                continue
            coming = self._inflight.get(key, 0)
            if have + coming >= probe.k:
                self.stats.probes_shared += 1
            else:
                n = probe.k - have - coming
                self._inflight[key] = coming + n
                request = self._request(job, key[1], n, have + coming, cap)
                self._unsent.append((request, _Sent(key, job, n, have + coming, n * cap)))
                self.ledger.hold(job.key, n * cap)
            if pending.need.get(key, 0) < probe.k:
                if key not in pending.need:
                    self._waiters.setdefault(key, []).append(pending)
                pending.need[key] = probe.k
        if not pending.need:
            self._resumable.append(pending)

    def _needs(self, job: SolutionJob[Any], probes: list[Probe]) -> list[Need]:
        """Per probe: its prefix and the rollouts it needs beyond those done or in flight."""
        needs = []
        for probe in probes:
            key = (job.problem_key, probe.prefix)
            est = self._estimates.get(key)
            needs.append((probe.prefix, probe.k - (est.total if est else 0) - self._inflight.get(key, 0)))
        return needs

    def _send(self) -> None:
        """Hand queued requests to the stream, up to max_batch_requests of ours in the engine."""
        if not self._unsent or len(self._sent) >= self.max_batch_requests:
            return
        self.stats.engine_calls += 1
        while self._unsent and len(self._sent) < self.max_batch_requests:
            request, sent = self._unsent.popleft()
            self._sent[self.stream.submit(request)] = sent
            self.stats.requests += 1

    def _wait_stream(self, deferred: dict[Future[Any], JobsAfter], ready: deque[SolutionJob[Any]]) -> None:
        timeout = None
        if self.on_progress is not None:
            timeout = max(0.0, self._last_report + self.progress_interval_s - time.perf_counter())
        self.stream.wait([*self._sent, *deferred], timeout=timeout)
        done = [f for f in self._sent if f.done()]  # dicts keep submission order: deterministic
        for future in done:
            sent = self._sent.pop(future)
            self._inflight[sent.key] -= sent.n
            error = future.exception()
            if isinstance(error, RequestRefused):  # nobody waiting on this prefix can be answered
                self.stats.requests_refused += 1
                for pending in self._waiters.pop(sent.key, []):
                    self._fail(pending.job, error)
                continue
            if error is not None:
                raise error
            self._absorb(sent, future.result())
            still = []
            for pending in self._waiters.pop(sent.key, []):
                if pending.job.key in self._failed:
                    continue
                if self._estimates[sent.key].ready() >= pending.need[sent.key]:
                    del pending.need[sent.key]
                    if not pending.need:
                        self._resumable.append(pending)
                else:
                    still.append(pending)
            if still:
                self._waiters[sent.key] = still
        for future in [f for f in deferred if f.done()]:
            after = deferred.pop(future)
            error = future.exception()
            if isinstance(error, RequestRefused) and after.refused is not None:
                self.stats.requests_refused += 1
                after.refused(error)
            elif error is not None:
                raise error
            else:
                ready.extend(after.make(future.result()))
        self._report()

    def _fail(self, job: SolutionJob[Any], error: RequestRefused) -> None:
        """End a job whose annotator needs a refused request: it is yielded with `Refused`."""
        if job.key in self._failed:
            return
        self._failed.add(job.key)
        job.annotator.close()
        self.stats.annotators_refused += 1
        self._refused.append((job, Refused(str(error))))

    # ------------------------------------------------------------ shared
    def _request(
        self, job: SolutionJob[Any], prefix: str, n: int, first_sample_index: int, cap: int
    ) -> GenerationRequest:
        # `cap`: each rollout's max_tokens, cut to the job's token budget (`TokenLedger.admit`)
        sampling = self.sampling if cap == self.sampling.max_tokens else replace(self.sampling, max_tokens=cap)
        return GenerationRequest(
            user=job.user_prompt,
            assistant_prefix=prefix,
            system=job.system_prompt,
            n=n,
            sampling=sampling,
            first_sample_index=first_sample_index,
        )

    def _absorb(self, sent: _Sent, result: GenerationResult) -> None:
        """Grade a request's rollouts into the prefix's estimate; charge them to the job that asked."""
        key, job = sent.key, sent.job
        if len(result.completions) != sent.n:
            raise RuntimeError(f"engine returned {len(result.completions)} completions, asked {sent.n}")
        est = self._estimates.setdefault(key, PrefixEstimate())
        live = [key[1] + c.text for c in result.completions if not is_truncated(c.finish_reason)]
        graded = iter(self.grade_batch(live, job.gold))
        for i, completion in enumerate(result.completions):
            truncated = is_truncated(completion.finish_reason)  # cut by max_tokens: never correct
            status = "unknown" if truncated else next(graded)
            self.stats.unknown_rollouts += status == "unknown"
            est.samples[sent.first + i] = (completion.text, status, completion.generated_tokens)
            est.asked_by[sent.first + i] = job.key
        self.stats.rollouts += len(result.completions)
        self.stats.generated_tokens += result.generated_tokens
        self.stats.prompt_tokens += result.prompt_tokens
        self.ledger.charge(job.key, sent.held, key[1], result)

    def _result(self, job: SolutionJob[Any], probe: Probe) -> ProbeResult:
        est = self._estimates[(job.problem_key, probe.prefix)]
        est.read_by[job.key] = max(est.read_by.get(job.key, 0), probe.k)
        return est.answer(probe.step, probe.k)

    def snapshot(self, finished: bool = False) -> ProgressSnapshot:
        elapsed = time.perf_counter() - self._started if self._started else 0.0
        tokens = (
            self.stats.generated_tokens + self.stats.prompt_tokens
        )  # every token processed (docs/reference/output-schema.md)
        return ProgressSnapshot(
            label=self.label,
            elapsed_s=elapsed,
            annotators_done=self.stats.annotators_done,
            annotators_started=self.stats.annotators_started,
            annotators_total=self._total,
            rollouts=self.stats.rollouts,
            tokens=tokens,
            tokens_per_s=tokens / elapsed if elapsed > 0 else 0.0,
            engine_running=self.stream.running(),
            engine_capacity=self.stream.capacity,
            finished=finished,
        )

    def _report(self, finished: bool = False) -> None:
        if self.on_progress is None:
            return
        now = time.perf_counter()
        if finished or now - self._last_report >= self.progress_interval_s:
            self._last_report = now
            self.on_progress(self.snapshot(finished))
