"""What the probe scheduler (scheduler.py) is handed and hands back: the jobs it runs (`SolutionJob`, and
`JobsAfter` for jobs that exist once a future is done), what it yields for a job the engine refused
(`Refused`), its counters (`SchedulerStats`) and its progress callback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prm_synth.annotate.protocol import Annotator
from prm_synth.engines.base import RequestRefused
from prm_synth.telemetry import ProgressSnapshot, WindowSummary

T = TypeVar("T")
ProgressCallback = Callable[[ProgressSnapshot], None]


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
