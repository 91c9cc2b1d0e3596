"""No gold answer (`grader.kind: majority`): the gold is the policy's most common final answer.

Before labeling, each problem gets `grader.votes` samples of the policy; their final answers are read by
the inner kind (`grader.of`) and counted. The most common one becomes the problem's pseudo-gold when its
share of the votes reaches `grader.min_agreement` (answers that could not be read count as votes for no
answer); else the problem is rejected (`no_majority`). A pseudo-gold problem's rows say so
(`gold_origin`: "majority <share>"). When the problem came with a gold answer it is held out from the
labeler, and the run counts how often the majority was right at each agreement level (`MajorityAudit`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from prm_synth.schema import Problem, RejectedRecord, reject

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


@dataclass
class MajorityOutcome:
    problems: list[Problem]
    rejected: list[RejectedRecord]
    audit: MajorityAudit
    tokens: int = 0


def pseudo_gold(engine: Any, problems: list[Problem], config: Any) -> MajorityOutcome:
    """Each problem with its majority answer as gold (or its `no_majority` rejection), in input order."""
    from prm_synth.grading import math as math_grading
    from prm_synth.grading.registry import make_grader
    from prm_synth.sampling.sample import sampling_request

    g = config.grader
    grader = make_grader(g, inner=True)
    out = MajorityOutcome([], [], MajorityAudit())
    step = config.run.max_batch_requests
    for start in range(0, len(problems), step):
        batch = problems[start : start + step]
        requests = [replace(sampling_request(p, config), n=g.votes) for p in batch]
        for problem, result in zip(batch, engine.generate(requests), strict=True):
            out.tokens += result.prompt_tokens + result.generated_tokens
            key = grader.key(problem)
            texts = [c.text for c in result.completions if not math_grading.is_truncated(c.finish_reason)]
            answers = [a for a in (grader.canonical(t, key) for t in texts) if a is not None]
            counts = Counter(answers).most_common()
            top, top_count = counts[0] if counts else (None, 0)
            tied = len(counts) > 1 and counts[1][1] == top_count
            share = top_count / g.votes
            if top is None or tied or share < g.min_agreement:
                out.audit.rejected += 1
                detail = f"the most common of {g.votes} answers has {top_count} votes ({share:.2f} < {g.min_agreement})"
                if tied:
                    detail = f"{top_count} votes each for two answers: no majority"
                out.rejected.append(
                    reject(
                        f"{problem.id}-majority",
                        problem.id,
                        problem.source,
                        "sample",
                        "no_majority",
                        detail,
                        {"answers": dict(counts[:10])},
                    )
                )
                continue
            right: bool | None = None
            if problem.gold_answer.strip():  # held out: measured, never shown to the labeler
                winner = next(t for t in texts if grader.canonical(t, key) == top)
                right = grader.grade(winner, key).status == "correct"
            out.audit.kept += 1
            out.audit.add(share, right)
            data = json.loads(problem.grading) if problem.grading else {}
            data |= {"pseudo_gold_share": round(share, 6), "held_out_gold": problem.gold_answer or None}
            out.problems.append(
                replace(problem, gold_answer=top, grading=json.dumps(data, ensure_ascii=False, sort_keys=True))
            )
    return out
