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
method's probes pass: a job gets no new rollouts once its rollouts have generated that many tokens, or
once the rollouts a probe asks for would take it past the budget (each expected as long as the rest of
the solution after the probe's prefix, and as the longest of this job's rollouts from a prefix no
longer than the probe's: a rollout from a longer prefix writes less), and each rollout sent may write
only its share of what is left (its `max_tokens` cut to it), so no job's rollouts ever generate more
than the budget, however long each runs; its later probes are answered from what is measured already, and the job is listed in
`out_of_tokens` (its row's undecided steps say `token_budget`). (A scheduler that sends every pending probe as one batch and waits for
all of it, the former behaviour, is kept in benchmarks/ as the baseline this one is measured against.)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from prm_synth.annotate.protocol import Annotator, Probe, ProbeResult, Rollout, Wait
from prm_synth.annotate.token_cost import NO_TOKEN_BUDGET, TokenBudget
from prm_synth.engines.base import Engine, GenerationRequest, GenerationResult, RequestRefused, SamplingOptions
from prm_synth.engines.stream import GenerationStream, stream_for
from prm_synth.grading.math import grade, is_truncated
from prm_synth.telemetry import EngineTelemetry, ProgressSnapshot, WindowSummary

T = TypeVar("T")


@dataclass
class SolutionJob(Generic[T]):
    """One solution to annotate: where its prefixes come from and the annotator that drives it."""

    key: str
    problem_key: str  # prefixes are shared (and estimated once) among solutions of one problem
    user_prompt: str
    gold: str
    annotator: Annotator[T]
    system_prompt: str | None = None
    # (characters, generated tokens) of the solution: a rollout from a prefix is expected to write about
    # the rest of it (the token budget's estimate before any of the job's rollouts is back)
    length: tuple[int, int] | None = None


@dataclass
class JobsAfter:
    """Jobs that exist once `future` is done (e.g. a problem's solutions, still being sampled):
    `make(future.result())` builds them. Put it in the job source of `ProbeScheduler.run`; the
    scheduler admits those jobs as soon as the future resolves. Until then it counts as one job in
    flight, so `max_in_flight` bounds how far ahead the source is read. When the future's request
    is refused, `refused(error)` is told and no job comes of it (without `refused`, the run fails)."""

    future: Future[Any]
    make: Callable[[Any], Iterable[SolutionJob[Any]]]
    refused: Callable[[RequestRefused], None] | None = None


@dataclass(frozen=True)
class Refused:
    """What `ProbeScheduler.run` yields for a job whose annotator could not finish: the engine
    refused a request it needed. `message` is the engine's (the server's words)."""

    message: str


@dataclass
class SchedulerStats:
    engine_calls: int = 0  # batches of requests handed to the engine
    requests: int = 0
    rollouts: int = 0
    unknown_rollouts: int = 0  # of `rollouts`, those that could not be graded (left out of the evidence)
    generated_tokens: int = 0
    prompt_tokens: int = 0
    probes_asked: int = 0
    probes_reused: int = 0  # answered from an earlier estimate of the same prefix, no new rollouts
    probes_shared: int = 0  # waited on an estimate another annotator had in flight, no new rollouts
    annotators_started: int = 0
    annotators_done: int = 0
    annotators_refused: int = 0  # ended by a request the engine refused (yielded with `Refused`)
    annotators_waited: int = 0  # times an annotator waited on a future (`Wait`: e.g. a shard's pooled priors)
    requests_refused: int = 0
    seconds: float = 0.0  # wall time of run()
    # The engine over the same time (all of its users: other shards' work shares the engine).
    engine: WindowSummary | None = None


@dataclass
class Spend:
    """What one job's probes caused: rollouts, and tokens (generated and prompt)."""

    rollouts: int = 0
    tokens: int = 0
    generated: int = 0  # of `tokens`, those the rollouts generated (what the token budget counts)


@dataclass
class _Estimate:
    """Everything measured of one prefix so far, by sample index (the accumulator).

    A probe for k rollouts is answered with samples 0..k-1 exactly, whatever else other annotators
    have asked of the same prefix and in whatever order the requests came back: with a
    deterministic policy, a row then does not depend on max_in_flight, batch sizes or timing."""

    samples: dict[int, Rollout] = field(default_factory=dict)  # sample index -> rollout
    asked_by: dict[int, str] = field(default_factory=dict)  # sample index -> key of the job that asked
    read_by: dict[str, int] = field(default_factory=dict)  # job key -> how many samples it read

    @property
    def total(self) -> int:
        return len(self.samples)

    def ready(self) -> int:
        """How many samples from index 0 on are back without a gap."""
        n = 0
        while n in self.samples:
            n += 1
        return n

    def answer(self, step: int, k: int) -> ProbeResult:
        rollouts = tuple(self.samples[i] for i in range(min(k, self.ready())))
        return ProbeResult(
            step,
            correct=sum(status == "correct" for _, status, _ in rollouts),
            total=len(rollouts),
            unknown=sum(status == "unknown" for _, status, _ in rollouts),
            tokens=sum(tokens for _, _, tokens in rollouts),
            rollouts=rollouts,
        )


ProgressCallback = Callable[[ProgressSnapshot], None]
_Key = tuple[str, str]  # (problem key, prefix text)


@dataclass
class _Pending:
    job: SolutionJob[Any]
    probes: list[Probe]
    need: dict[_Key, int] = field(default_factory=dict)  # prefixes still short of rollouts -> k wanted


@dataclass
class _Sent:
    """One request of the scheduler's in the engine."""

    key: _Key
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
    ) -> None:
        self.engine = engine
        self.stream: GenerationStream = stream_for(engine)
        self.sampling = sampling
        self.max_batch_requests = max_batch_requests
        self.max_in_flight = max_in_flight
        self.grader = grader or (lambda text, gold: grade(text, gold).status)
        self.on_progress = on_progress
        self.progress_interval_s = progress_interval_s
        self.label = label
        self.budget = budget
        self._held: dict[str, int] = {}  # job -> tokens its requests in flight may still write (`_Sent.held`)
        self.out_of_tokens: set[str] = set()  # keys of jobs whose token budget is spent
        self._rollout_lengths: dict[str, list[tuple[int, float]]] = {}  # job -> (prefix chars, tokens a rollout)
        self.stats = SchedulerStats()
        # (problem_key, prefix text) -> accumulated estimate; lives for one run of the scheduler.
        self._estimates: dict[_Key, _Estimate] = {}
        # Per-job spend: rollouts and tokens that this job's probes caused.
        # (`rollouts` is settled when the run ends: see `_settle_rollouts`.)
        self.spend: dict[str, Spend] = {}
        # samples asked and not back yet, who waits for which prefix, requests out
        self._inflight: dict[_Key, int] = {}
        self._waiters: dict[_Key, list[_Pending]] = {}
        self._sent: dict[Future[GenerationResult], _Sent] = {}
        self._unsent: deque[tuple[GenerationRequest, _Sent]] = deque()
        self._resumable: deque[_Pending] = deque()
        self._deferred: dict[Future[Any], JobsAfter] = {}
        self._refused: deque[tuple[SolutionJob[Any], Refused]] = deque()  # ended, not yet yielded
        self._failed: set[str] = set()  # keys of jobs ended by a refused request
        self._total: int | None = None
        self._started = self._last_report = 0.0

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
            self._settle_rollouts()
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
        self.spend[job.key] = Spend()
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
        cap = self.sampling.max_tokens
        if self.budget.limited:
            # each new rollout may write only its share of what is left (`_rollout_cap`): no job's rollouts
            # generate more than the budget, however long they run
            cap = self._rollout_cap(job, pending.probes)
            if cap < 1 or not self._affordable(job, pending.probes):
                self.out_of_tokens.add(job.key)
        if job.key in self.out_of_tokens:  # no new rollouts: answered from what is measured
            for probe in pending.probes:
                self._estimates.setdefault((job.problem_key, probe.prefix), _Estimate())
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
                self._held[job.key] = self._held.get(job.key, 0) + n * cap
            if pending.need.get(key, 0) < probe.k:
                if key not in pending.need:
                    self._waiters.setdefault(key, []).append(pending)
                pending.need[key] = probe.k
        if not pending.need:
            self._resumable.append(pending)

    def _rollout_cap(self, job: SolutionJob[Any], probes: list[Probe]) -> int:
        """The `max_tokens` of each new rollout these probes need: what is left of the job's budget (its
        generated tokens and what its requests in flight may still write held back) shared among them."""
        new: dict[_Key, int] = {}
        for probe in probes:
            key = (job.problem_key, probe.prefix)
            est = self._estimates.get(key)
            have = (est.total if est else 0) + self._inflight.get(key, 0)
            new[key] = max(new.get(key, 0), probe.k - have)
        wanted = sum(n for n in new.values() if n > 0)
        if not wanted:
            return self.sampling.max_tokens
        spent = self.spend.setdefault(job.key, Spend()).generated + self._held.get(job.key, 0)
        return self.budget.rollout_cap(spent, wanted, self.sampling.max_tokens)

    def _affordable(self, job: SolutionJob[Any], probes: list[Probe]) -> bool:
        """Whether the new rollouts these probes need fit in what is left of the job's token budget, each
        expected as long as the job's rollouts have been (`_rollout_cap` makes it a bound)."""
        assert self.budget.max_tokens is not None
        spent = self.spend.setdefault(job.key, Spend()).generated
        if spent >= self.budget.max_tokens:
            return False
        seen = self._rollout_lengths.get(job.key, [])
        expected = 0.0
        for probe in probes:
            key = (job.problem_key, probe.prefix)
            est = self._estimates.get(key)
            new = probe.k - (est.total if est else 0) - self._inflight.get(key, 0)
            if new <= 0:
                continue
            longer = [tokens for chars, tokens in seen if chars <= len(probe.prefix)]
            rest = 0.0
            if job.length is not None and job.length[0] > 0:
                rest = job.length[1] * max(0.0, 1.0 - len(probe.prefix) / job.length[0])
            # nothing to judge by but longer prefixes: the longest rollout seen (one from here may write more)
            fallback = max((tokens for _, tokens in seen), default=0.0)
            expected += new * (max([rest, *longer]) if longer or rest else fallback)
        return spent + expected <= self.budget.max_tokens

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
        # `cap`: each rollout's max_tokens, cut to the job's token budget (`_rollout_cap`)
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
        est = self._estimates.setdefault(key, _Estimate())
        for i, completion in enumerate(result.completions):
            truncated = is_truncated(completion.finish_reason)  # cut by max_tokens: never correct
            status = "unknown" if truncated else self.grader(key[1] + completion.text, job.gold)
            self.stats.unknown_rollouts += status == "unknown"
            est.samples[sent.first + i] = (completion.text, status, completion.generated_tokens)
            est.asked_by[sent.first + i] = job.key
        self.stats.rollouts += len(result.completions)
        self.stats.generated_tokens += result.generated_tokens
        self.stats.prompt_tokens += result.prompt_tokens
        spend = self.spend.setdefault(job.key, Spend())
        self._held[job.key] = self._held.get(job.key, 0) - sent.held
        spend.rollouts += len(result.completions)
        spend.tokens += result.generated_tokens + result.prompt_tokens
        spend.generated += result.generated_tokens
        if result.completions:  # how long this job's rollouts from a prefix this long are (`_affordable`)
            per_rollout = result.generated_tokens / len(result.completions)
            self._rollout_lengths.setdefault(job.key, []).append((len(key[1]), per_rollout))
        if self.budget.max_tokens is not None and spend.generated >= self.budget.max_tokens:
            self.out_of_tokens.add(job.key)

    def _result(self, job: SolutionJob[Any], probe: Probe) -> ProbeResult:
        est = self._estimates[(job.problem_key, probe.prefix)]
        est.read_by[job.key] = max(est.read_by.get(job.key, 0), probe.k)
        return est.answer(probe.step, probe.k)

    def _settle_rollouts(self) -> None:
        """Charge each sample of a shared prefix to the first job (by key) that read it, not to whichever
        asked first: which job asks first depends on timing, so rows' `rollouts` would depend on
        max_in_flight and batch sizes. Samples nobody read stay with the job that asked."""
        charged: dict[str, int] = {}
        for est in self._estimates.values():
            readers = sorted(est.read_by)
            for i, asker in est.asked_by.items():
                payer = next((job for job in readers if est.read_by[job] > i), asker)
                charged[payer] = charged.get(payer, 0) + 1
        for key, spend in self.spend.items():
            spend.rollouts = charged.get(key, 0)

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
