"""One stage's result: what it kept, what it rejected (each with a reason) and its counters.

Every stage returns one (judge selection, consensus, verify, the labeler, the majority gold, the
canaries), as a datatrove filter keeps a document or drops it with a reason and counts both; the pipeline
folds the stages over the rows and gathers their counters into `ShardStats`. It unpacks as
`kept, rejected, counters = stage(...)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from prm_synth.records.schema import RejectedRecord

Kept = TypeVar("Kept")
Counters = TypeVar("Counters")


@dataclass
class StageResult(Generic[Kept, Counters]):
    """What a stage kept, what it rejected with a reason, and its counters (None: the stage did not run)."""

    kept: list[Kept] = field(default_factory=list)
    rejected: list[RejectedRecord] = field(default_factory=list)
    counters: Counters | None = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.kept, self.rejected, self.counters))
