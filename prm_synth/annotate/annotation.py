"""What an annotator returns: per-step counts, and how each step's label was obtained."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prm_synth.annotate.protocol import ProbeResult
from prm_synth.records import LabelSource, UnlabeledReason, VerdictStatus


@dataclass
class Annotation:
    """Per-step rollout counts plus the labels a search decided.

    `label_source[i]` is one of
      "mc"       measured: the labeling rule turns the step's counts into its label;
      "verdict"  the full solution's own grade (one free rollout of its last prefix);
      "test"     measured, and the search's sequential test decided the label (in `decided`);
      "inferred" not measured: the search concluded it from its neighbours (in `decided`);
      "none"     unlabeled (counts may still be recorded).
    A label in `decided` stands under every labeling rule, whatever its source.
    """

    method: str
    mc_correct: list[int]
    mc_total: list[int]
    label_source: list[LabelSource]
    decided: dict[int, bool] = field(default_factory=dict)
    # Per step, the posterior probability that its prefix is still correct (None: not estimated).
    p_good: list[float] | None = None
    # Per step, why it is unlabeled (None where labeled, or where the method gives no reason).
    unlabeled_reason: list[UnlabeledReason | None] | None = None
    # Per step, rollouts that could not be graded: left out of mc_total (unknown is not failure).
    mc_unknown: list[int] | None = None
    # What a search measured, kept so the labeler can label again once it has pooled a whole shard
    # (search_test changepoint: a changepoint.Evidence); None for the other methods.
    evidence: Any = None

    @classmethod
    def empty(cls, method: str, n_steps: int) -> Annotation:
        return cls(method, [0] * n_steps, [0] * n_steps, ["none"] * n_steps, mc_unknown=[0] * n_steps)

    def record(self, result: ProbeResult) -> None:
        self.mc_correct[result.step] = result.correct
        self.mc_total[result.step] = result.graded
        if self.mc_unknown is not None:
            self.mc_unknown[result.step] = result.unknown
        self.label_source[result.step] = "mc"

    def record_verdict(self, step: int, status: VerdictStatus) -> None:
        """The complete solution is one rollout of its own last prefix: its verdict is a free sample."""
        if status == "unknown" or self.label_source[step] == "mc":
            return
        self.mc_correct[step] = int(status == "correct")
        self.mc_total[step] = 1
        self.label_source[step] = "verdict"

    def decide(self, step: int, good: bool, source: LabelSource) -> None:
        self.decided[step] = good
        self.label_source[step] = source
