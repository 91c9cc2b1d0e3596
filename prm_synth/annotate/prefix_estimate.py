"""What the probe scheduler (scheduler.py) has measured of one prefix: its rollouts by sample index,
who asked for each, and the answer to a probe for k of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from prm_synth.annotate.protocol import ProbeResult, Rollout


@dataclass
class PrefixEstimate:
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


PrefixKey = tuple[str, str]  # (problem key, prefix text)
