"""The probe scheduler's former `rounds` mode, kept as a benchmark instrument (run_efficiency.py).

Rounds gather every pending probe, send them as one batch, wait for all of it, and resume everyone:
each round waits for its slowest rollout. The pipeline uses the stream (prm_synth/annotate/scheduler.py);
this subclass changes only the loop that drives the annotators, so the two are measured on the same
estimates, grading and spend accounting.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from prm_synth.annotate.protocol import Probe
from prm_synth.annotate.scheduler import JobsAfter, ProbeScheduler, SolutionJob, T, _Key, _Pending, _Sent


class RoundsScheduler(ProbeScheduler):
    """A ProbeScheduler that drives its annotators in rounds (see the module docstring)."""

    def _drive(self, source: Iterator[SolutionJob[T] | JobsAfter]) -> Iterator[tuple[SolutionJob[T], T]]:
        waiting: deque[_Pending] = deque()
        ready: deque[SolutionJob[Any]] = deque()
        exhausted = False
        in_flight = 0
        while True:
            while (ready or not exhausted) and in_flight < self.max_in_flight:
                if ready:
                    job = ready.popleft()
                else:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    if isinstance(item, JobsAfter):  # rounds wait for everything anyway
                        self.stream.wait([item.future])
                        ready.extend(item.make(item.future.result()))
                        continue
                    job = item
                in_flight += 1
                done, value = self._start(job)
                if done:
                    in_flight -= 1
                    yield job, value
                else:
                    waiting.append(_Pending(job, value))
            if not waiting:
                if exhausted and not ready:
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
        need: dict[_Key, tuple[SolutionJob[Any], int]] = {}
        for job, probe in wanted:
            key = (job.problem_key, probe.prefix)
            missing = self._missing(job, probe)
            if missing <= 0:
                self.stats.probes_reused += 1
                continue
            if key not in need or need[key][1] < missing:
                need[key] = (job, missing)
        keys = list(need)
        for start in range(0, len(keys), self.max_batch_requests):
            chunk = keys[start : start + self.max_batch_requests]
            sent = [_Sent(k, need[k][0], need[k][1], self._have(k)) for k in chunk]
            requests = [self._request(s.job, s.key[1], s.n, s.first) for s in sent]
            futures = self.stream.submit_all(requests)
            self.stats.engine_calls += 1
            self.stats.requests += len(chunk)
            while not self.stream.wait(futures, timeout=self._until_report(), all_of=True):
                self._report()
            for s, future in zip(sent, futures, strict=True):
                self._absorb(s, future.result())
            self._report()

    def _have(self, key: _Key) -> int:
        est = self._estimates.get(key)
        return est.total if est else 0

    def _until_report(self) -> float | None:
        if self.on_progress is None:
            return None
        return max(0.0, self._last_report + self.progress_interval_s - time.perf_counter())
