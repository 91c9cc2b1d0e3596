"""What a labeler returns (`LabelResult`: rows in input order, rejections, trees, the spend), and how it
reports progress; prm_synth/annotate/labeler.py holds what a labeler promises and one labeler per method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prm_synth.annotate.jobs import SchedulerStats
from prm_synth.annotate.token_ledger import Spend
from prm_synth.records import (
    LabeledRecord,
)
from prm_synth.records.solutions import Sampled
from prm_synth.records.stage import StageResult

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    pass


@dataclass
class LabelResult(StageResult[LabeledRecord, SchedulerStats]):
    """What a labeler returns, the label stage's `StageResult`: rows in input order (`kept`, also
    `records`), rejections, the scheduler's counters (`counters`, also `stats`), the search trees, the
    solutions sampled for it, and the spend."""

    counters: SchedulerStats = field(default_factory=SchedulerStats)
    trees: dict[str, Any] = field(default_factory=dict)  # problem id -> OmegaPRM tree (node-link JSON)
    sampled: Sampled = field(default_factory=Sampled)  # the solutions sampled for it (none per question)
    spend: dict[str, Spend] = field(default_factory=dict)  # per solution (or question) key: what its probes cost

    @property
    def records(self) -> list[LabeledRecord]:
        return self.kept

    @property
    def stats(self) -> SchedulerStats:
        return self.counters
