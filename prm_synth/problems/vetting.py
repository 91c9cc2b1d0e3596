"""Problems the run's grader could never grade right, rejected at load with the grader's reason (stage
"load", `unparseable_answer`), before any sampling, instead of grading every solution of theirs wrong or
right by accident: a grader that can tell says so in `load_refusal(problem)` (today `exact`: a gold that
normalizes to nothing). Under `majority` the kind that reads the votes checks the problem's own gold,
when it has one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prm_synth.config.grader import GraderConfig
from prm_synth.grading.registry import make_grader
from prm_synth.records import Item, Problem, reject


def vetted(items: Iterable[Item], grader: GraderConfig) -> Iterator[Item]:
    """`items` with each problem the grader refuses replaced by its rejection (the rest as they are)."""
    check: Any = getattr(make_grader(grader, inner=True), "load_refusal", None)
    for item in items:
        why = check(item) if check is not None and isinstance(item, Problem) else None
        if why is None:
            yield item
        else:
            assert isinstance(item, Problem)
            yield reject(item.id, item.id, item.source, "load", "unparseable_answer", why, item.gold_answer)
