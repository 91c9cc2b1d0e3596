"""No gold answer (`grader.kind: majority`): the gold is the policy's most common final answer.

Before labeling, each problem gets `grader.votes` samples of the policy; their final answers are read by
the inner kind (`grader.of`) and counted. The most common one becomes the problem's pseudo-gold when its
share of the votes reaches `grader.min_agreement` (answers that could not be read count as votes for no
answer); else the problem is rejected (`no_majority`). A pseudo-gold problem's rows say so
(`gold_origin`: "majority <share>"). When the problem came with a gold answer it is held out from the
labeler, and the run counts how often the majority was right at each agreement level (`MajorityAudit`).

A pseudo-gold can be wrong where the policy shares a misconception: then every rollout agrees with it
and no rollout can see the error. That doubt goes to the judge through soft consensus (`row_doubts`):
each row carries P(its pseudo-gold is wrong), read from the audit's held-out accuracy at the row's
agreement level where the problems carry gold (at least `MIN_AUDITED` of them at that level), else from
the votes (1 - share), and, for a row that disagrees with it, P(the row's own answer is the truth then):
its answer's share of the votes the pseudo-gold did not get.
The voting itself (it calls the engine) is prm_synth/sampling/votes.py; this module holds what rows and
the card read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prm_synth.records import LabeledRecord, Problem

MAX_VOTED_ANSWERS = 32  # the answers (most voted first) a problem's grading keeps with their votes
# The audit's accuracy at an agreement level stands for that level's doubt once this many held-out golds
# measured it; below, the level reads the votes' own doubt (1 - share)
MIN_AUDITED = 5
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


def pseudo_gold_doubt(share: float, audit: Mapping[str, int] | None = None) -> float:
    """P(a pseudo-gold with this agreement share is wrong): the held-out audit's rate at its level where
    at least MIN_AUDITED problems measured it (add-one smoothed), else the votes' own 1 - share."""
    level = agreement_level(share)
    total = (audit or {}).get(f"total@{level}", 0)
    if total >= MIN_AUDITED:
        right = (audit or {}).get(f"right@{level}", 0)
        return 1.0 - (right + 1.0) / (total + 2.0)
    return max(0.0, 1.0 - share)


def row_doubts(
    records: Sequence[LabeledRecord],
    problems: Sequence[Problem],
    canonical: Callable[[str, Problem], str | None],
    audit: Mapping[str, int] | None = None,
) -> dict[str, tuple[float, float]]:
    """Per row graded against a pseudo-gold (by row id): (P(the pseudo-gold is wrong), P(the row's answer
    is the truth when it is)). A row that matches the pseudo-gold is wrong whenever the pseudo-gold is
    (0); one that does not is right with its answer's share of the votes the pseudo-gold did not get (the
    truth is then one of them, likelier the more votes it drew). `canonical(text, problem)` reads an answer
    as the votes were counted (registry.Grader.canonical)."""
    by_id = {p.id: p for p in problems}
    out: dict[str, tuple[float, float]] = {}
    for r in records:
        problem = by_id.get(r.problem_id)
        if problem is None or not problem.grading or r.final_correct is None:
            continue
        data = json.loads(problem.grading)
        if not isinstance(data, dict) or "pseudo_gold_share" not in data:
            continue
        doubt = pseudo_gold_doubt(float(data["pseudo_gold_share"]), audit)
        clean = 0.0
        if r.final_correct is False:
            votes: dict[str, int] = data.get("pseudo_gold_votes") or {}
            others = sum(c for a, c in votes.items() if a != problem.gold_answer)
            mine = canonical("".join(r.steps), problem)
            clean = votes.get(mine, 0) / others if mine is not None and others else 0.0
        out[r.id] = (doubt, clean)
    return out
