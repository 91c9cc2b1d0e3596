"""No gold answer (`grader.kind: majority`): the gold is the policy's most common final answer.

Before labeling, each problem gets `grader.votes` samples of the policy; their final answers are read by
the inner kind (`grader.of`) and counted. The most common one becomes the problem's pseudo-gold when its
share of the votes reaches `grader.min_agreement` (answers that could not be read count as votes for no
answer); else the problem is rejected (`no_majority`). A pseudo-gold problem's rows say so
(`gold_origin`: "majority <share>"). When the problem came with a gold answer it is held out from the
labeler, and the run counts how often the majority was right at each agreement level (`MajorityAudit`).
The voting itself (it calls the engine) is prm_synth/sampling/votes.py; this module holds what rows and
the card read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from prm_synth.schema import Problem

AGREEMENT_BINS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # lower edges of the audit's agreement levels (and 1.0 alone)


def gold_origin(problem: Problem) -> str | None:
    """The row's `gold_origin`: None for a problem's own gold, "majority <share>" for a pseudo-gold."""
    if not problem.grading:
        return None
    data = json.loads(problem.grading)
    if not isinstance(data, dict) or "pseudo_gold_share" not in data:
        return None
    return f"majority {data['pseudo_gold_share']:.3f}"


def agreement_level(share: float) -> str:
    """The audit bin of an agreement share, by its lower edge ("<0.5" below the first)."""
    level = "<0.5"
    for edge in AGREEMENT_BINS:
        if share >= edge - 1e-12:
            level = f"{edge:.1f}"
    return level


@dataclass
class MajorityAudit:
    """Per agreement level: [majority answers that matched the held-out gold, problems with a held-out gold]."""

    levels: dict[str, list[int]] = field(default_factory=dict)
    kept: int = 0
    rejected: int = 0

    def add(self, share: float, right: bool | None) -> None:
        if right is None:
            return
        cell = self.levels.setdefault(agreement_level(share), [0, 0])
        cell[0] += int(right)
        cell[1] += 1

    def merge(self, other: MajorityAudit) -> None:
        self.kept += other.kept
        self.rejected += other.rejected
        for level, (right, total) in other.levels.items():
            cell = self.levels.setdefault(level, [0, 0])
            cell[0] += right
            cell[1] += total

    def to_counts(self) -> dict[str, int]:
        """Flat counts for ShardStats.majority (summed key by key across shards)."""
        out = {"kept": self.kept, "rejected": self.rejected}
        for level, (right, total) in self.levels.items():
            out[f"right@{level}"], out[f"total@{level}"] = right, total
        return out


def accuracy_table(counts: dict[str, int]) -> list[tuple[str, int, int]]:
    """(agreement level, majority right, problems with a held-out gold) per level, from ShardStats.majority."""
    levels = sorted({k.split("@", 1)[1] for k in counts if k.startswith("total@")})
    return [(level, counts.get(f"right@{level}", 0), counts[f"total@{level}"]) for level in levels]
