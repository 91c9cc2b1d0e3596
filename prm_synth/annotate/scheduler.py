"""The probe scheduler: many sequential annotators, one engine batch.

An annotator is a generator. It yields a list of `Probe`s (prefix text, rollouts wanted) and is
sent back one `ProbeResult` per probe, in the same order; when it returns, its return value is the
annotation. Binary search and MCTS stay plain sequential code, while the scheduler keeps many
solutions in flight, gathers every pending probe into one engine call, estimates each distinct
prefix of a problem once (a later probe of the same prefix reuses and, if it wants more rollouts,
extends the earlier estimate), grades the rollouts, and resumes each annotator.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from prm_synth.engines.base import Engine, GenerationRequest, SamplingOptions
from prm_synth.grading import grade, is_truncated

T = TypeVar("T")


@dataclass(frozen=True)
class Probe:
    """Estimate `prefix` (the assistant text so far) with at least `k` rollouts in total.

    `step` is the annotator's own tag (e.g. the index of the prefix's last step), echoed back.
    """

    prefix: str
    k: int
    step: int = -1

    @classmethod
    def of_steps(cls, steps: list[str], step: int, k: int) -> Probe:
        """The prefix made of steps 0..step exactly (step −1: the empty prefix, the question alone)."""
        return cls("".join(steps[: step + 1]), k, step)


@dataclass
class ProbeResult:
    step: int
    correct: int = 0
    total: int = 0
    unknown: int = 0  # rollouts whose answer could not be graded: counted in total, never as correct
    tokens: int = 0  # generated tokens of all rollouts behind this estimate
    # The rollouts themselves (completion text, verdict status, generated tokens), for tree search.
    rollouts: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def mc(self) -> float | None:
        return self.correct / self.total if self.total else None


# An annotator yields probe lists, receives result lists, and returns its annotation.
Annotator = Generator[list[Probe], list[ProbeResult], T]


@dataclass
class SolutionJob(Generic[T]):
    """One solution to annotate: where its prefixes come from and the annotator that drives it."""

    key: str
    problem_key: str  # prefixes are shared (and estimated once) among solutions of one problem
    user_prompt: str
    gold: str
    annotator: Annotator[T]
    system_prompt: str | None = None


@dataclass
class SchedulerStats:
    engine_calls: int = 0
    requests: int = 0
    rollouts: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    probes_asked: int = 0
    probes_reused: int = 0  # answered from an earlier estimate of the same prefix, no new rollouts


@dataclass
class _Pending:
    job: SolutionJob[Any]
    probes: list[Probe]


class ProbeScheduler:
    """Drives annotators in flight; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        sampling: SamplingOptions,
        max_batch_requests: int = 256,
        max_in_flight: int = 64,
        grader: Callable[[str, str], str] | None = None,
    ) -> None:
        self.engine = engine
        self.sampling = sampling
        self.max_batch_requests = max_batch_requests
        self.max_in_flight = max_in_flight
        self.grader = grader or (lambda text, gold: grade(text, gold).status)
        self.stats = SchedulerStats()
        # (problem_key, prefix text) -> accumulated estimate; lives for one run of the scheduler.
        self._estimates: dict[tuple[str, str], ProbeResult] = {}
        # Per-solution spend: rollouts and tokens that this solution's probes caused.
        self.spend: dict[str, list[int]] = {}

    def run(self, jobs: Iterable[SolutionJob[T]]) -> Iterator[tuple[SolutionJob[T], T]]:
        """Yield (job, annotation) as annotators finish; at most max_in_flight run at once."""
        source = iter(jobs)
        waiting: deque[_Pending] = deque()
        exhausted = False
        in_flight = 0
        while True:
            while not exhausted and in_flight < self.max_in_flight:
                job = next(source, None)
                if job is None:
                    exhausted = True
                    break
                self.spend[job.key] = [0, 0]
                in_flight += 1
                done, value = self._advance(job, None)
                if done:
                    in_flight -= 1
                    yield job, value
                else:
                    waiting.append(_Pending(job, value))
            if not waiting:
                if exhausted:
                    return
                continue
            batch = self._take_batch(waiting)
            self._estimate([(p.job, probe) for p in batch for probe in p.probes])
            for pending in batch:
                results = [self._result(pending.job, probe) for probe in pending.probes]
                done, value = self._advance(pending.job, results)
                if done:
                    in_flight -= 1
                    yield pending.job, value
                else:
                    waiting.append(_Pending(pending.job, value))

    # ------------------------------------------------------------ internals
    def _advance(self, job: SolutionJob[Any], results: list[ProbeResult] | None) -> tuple[bool, Any]:
        try:
            probes = next(job.annotator) if results is None else job.annotator.send(results)
        except StopIteration as stop:
            return True, stop.value
        for probe in probes:
            if probe.k < 1:
                raise ValueError(f"annotator of {job.key} asked for an invalid probe {probe}")
        self.stats.probes_asked += len(probes)
        return False, probes

    def _take_batch(self, waiting: deque[_Pending]) -> list[_Pending]:
        """Pending annotators whose new requests fit one engine call (at least one annotator)."""
        batch: list[_Pending] = []
        budget = self.max_batch_requests
        while waiting:
            cost = sum(1 for probe in waiting[0].probes if self._missing(waiting[0].job, probe) > 0)
            if batch and cost > budget:
                break
            batch.append(waiting.popleft())
            budget -= cost
        return batch

    def _missing(self, job: SolutionJob[Any], probe: Probe) -> int:
        est = self._estimates.get((job.problem_key, probe.prefix))
        return probe.k - (est.total if est else 0)

    def _estimate(self, wanted: list[tuple[SolutionJob[Any], Probe]]) -> None:
        """Sample what is missing for every wanted prefix: one request per distinct prefix, one call."""
        need: dict[tuple[str, str], tuple[SolutionJob[Any], int]] = {}
        for job, probe in wanted:
            key = (job.problem_key, probe.prefix)
            missing = self._missing(job, probe)
            if missing <= 0:
                self.stats.probes_reused += 1
                continue
            if key not in need or need[key][1] < missing:
                need[key] = (job, missing)
        if not need:
            return
        keys = list(need)
        requests = [
            GenerationRequest(
                user=need[k][0].user_prompt,
                assistant_prefix=k[1],
                system=need[k][0].system_prompt,
                n=need[k][1],
                sampling=self.sampling,
                first_sample_index=self._estimates[k].total if k in self._estimates else 0,
            )
            for k in keys
        ]
        for start in range(0, len(requests), self.max_batch_requests):
            chunk = requests[start : start + self.max_batch_requests]
            results = self.engine.generate(chunk)
            if len(results) != len(chunk):
                raise RuntimeError(f"engine returned {len(results)} results for {len(chunk)} requests")
            self.stats.engine_calls += 1
            self.stats.requests += len(chunk)
            for key, request, result in zip(keys[start : start + len(chunk)], chunk, results, strict=True):
                job = need[key][0]
                est = self._estimates.setdefault(key, ProbeResult(step=-1))
                for completion in result.completions:
                    truncated = is_truncated(completion.finish_reason)  # cut by max_tokens: never correct
                    status = "unknown" if truncated else self.grader(key[1] + completion.text, job.gold)
                    est.total += 1
                    est.correct += status == "correct"
                    est.unknown += status == "unknown"
                    est.tokens += completion.generated_tokens
                    est.rollouts.append((completion.text, status, completion.generated_tokens))
                self.stats.rollouts += len(result.completions)
                self.stats.generated_tokens += result.generated_tokens
                self.stats.prompt_tokens += result.prompt_tokens
                spend = self.spend.setdefault(job.key, [0, 0])
                spend[0] += len(result.completions)
                spend[1] += result.generated_tokens + result.prompt_tokens
                if len(result.completions) != request.n:
                    raise RuntimeError(f"engine returned {len(result.completions)} completions, asked {request.n}")

    def _result(self, job: SolutionJob[Any], probe: Probe) -> ProbeResult:
        est = self._estimates[(job.problem_key, probe.prefix)]
        return ProbeResult(probe.step, est.correct, est.total, est.unknown, est.tokens, list(est.rollouts))
