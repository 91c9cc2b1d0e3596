"""A completion cut off by `max_tokens` is graded unknown ("truncated"), never correct, wherever the pipeline
grades one: the sampled solutions and the annotation rollouts."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from prm_synth.annotate.protocol import Annotator, Probe, ProbeResult
from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
from prm_synth.config import SimulatedPolicyConfig, validate_config
from prm_synth.engines.base import Completion, GenerationRequest, GenerationResult, SamplingOptions
from prm_synth.pipeline import ShardInput, iter_shards, process_shard
from prm_synth.simulated.engines import SimulatedPolicy


class Truncating:
    """The simulated policy, with every completion marked as stopped by the token limit (or not)."""

    def __init__(self, finish_reason: str) -> None:
        self.inner = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.0, seed=3))
        self.finish_reason = finish_reason

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return [
            dataclasses.replace(
                r, completions=tuple(dataclasses.replace(c, finish_reason=self.finish_reason) for c in r.completions)
            )
            for r in self.inner.generate(requests)
        ]

    def close(self) -> None:
        pass


class Alternating:
    """Every completion states the gold answer "1"; every other one was cut by max_tokens."""

    model_name = "alternating"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        reasons = ("length", "stop")
        return [
            GenerationResult(tuple(Completion("The answer is 1.", 4, reasons[i % 2]) for i in range(r.n)), 1)
            for r in requests
        ]

    def close(self) -> None:
        pass


def _one_probe(k: int, out: list[ProbeResult]) -> Annotator[None]:
    (result,) = yield [Probe("Step 1: ", k, 0)]
    out.append(result)


def test_truncated_rollouts_count_as_unknown_in_probe_estimates() -> None:
    results: list[ProbeResult] = []
    sched = ProbeScheduler(Alternating(), SamplingOptions(max_tokens=4))
    list(sched.run([SolutionJob("s0", "p0", "Q", "1", _one_probe(6, results))]))
    (result,) = results
    assert (result.correct, result.unknown, result.total) == (3, 3, 6)
    assert [status for _, status, _ in result.rollouts] == ["unknown", "correct"] * 3


def _shard(config):
    return next(iter_shards(config))


def test_truncated_sampled_solutions_are_never_graded_correct() -> None:
    config = validate_config(
        {
            "name": "truncated",
            "problems": {"kind": "builtin", "count": 4, "seed": 0},
            "policy": {"kind": "simulated", "seed": 3, "step_error": 0.0},
            "sampling": {"samples_per_problem": 2},
            "annotate": {"method": "mc", "k": 2},
        }
    )
    shard: ShardInput = _shard(config)
    whole = process_shard(Truncating("stop"), config, shard, config.fingerprint())
    cut = process_shard(Truncating("length"), config, shard, config.fingerprint())
    assert [r.final_correct for r in whole.records] == [True] * 8  # an error-free policy: every solution right
    assert [r.final_correct for r in cut.records] == [None] * 8
    assert all(sum(r.mc_correct) == 0 for r in cut.records)  # every rollout was cut too: none counts as correct
