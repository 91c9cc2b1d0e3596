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
    RejectedRecord,
)
from prm_synth.records.solutions import Sampled

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    pass


@dataclass
class LabelResult:
    """What a labeler returns: rows in input order, rejections, the search trees, and the spend."""

    records: list[LabeledRecord] = field(default_factory=list)
    rejected: list[RejectedRecord] = field(default_factory=list)
    trees: dict[str, Any] = field(default_factory=dict)  # problem id -> OmegaPRM tree (node-link JSON)
    stats: SchedulerStats = field(default_factory=SchedulerStats)
    sampled: Sampled = field(default_factory=Sampled)  # the solutions sampled for it (none per question)
    spend: dict[str, Spend] = field(default_factory=dict)  # per solution (or question) key: what its probes cost
