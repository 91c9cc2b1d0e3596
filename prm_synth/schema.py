"""The public record schema (one row per labeled solution) and the rejected-row schema.

Both are Arrow schemas; shards are Arrow IPC stream files with exactly these columns. Adding a
column is a compatible change; renaming or retyping one is not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

# Where a step's label came from: measured by rollouts, inferred by a search, from the final verdict.
LABEL_SOURCES = ("mc", "inferred", "verdict", "none")

RECORD_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
        pa.field("gold_answer", pa.string(), nullable=False),
        pa.field("steps", pa.list_(pa.string()), nullable=False),
        pa.field("final_answer", pa.string()),
        pa.field("final_correct", pa.bool_()),
        pa.field("mc_values", pa.list_(pa.float64()), nullable=False),
        pa.field("mc_correct", pa.list_(pa.int32()), nullable=False),
        pa.field("mc_total", pa.list_(pa.int32()), nullable=False),
        pa.field("labels", pa.list_(pa.bool_()), nullable=False),
        pa.field("label_source", pa.list_(pa.string()), nullable=False),
        pa.field("label_rule", pa.string(), nullable=False),
        pa.field("first_error_mc", pa.int32(), nullable=False),
        pa.field("judge_first_error", pa.int32()),
        pa.field("judge_votes", pa.list_(pa.int32()), nullable=False),
        pa.field("judge_prompt_version", pa.string()),
        pa.field("consensus", pa.bool_()),
        pa.field("annotator", pa.string(), nullable=False),
        pa.field("policy_model", pa.string(), nullable=False),
        pa.field("judge_model", pa.string()),
        pa.field("config_fingerprint", pa.string(), nullable=False),
        pa.field("rollouts", pa.int64(), nullable=False),
        pa.field("tokens", pa.int64(), nullable=False),
    ]
)

REJECTED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("problem_id", pa.string()),
        pa.field("source", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),  # load | sample | split | consensus | ...
        pa.field("reason", pa.string(), nullable=False),  # a short machine-readable code
        pa.field("detail", pa.string()),  # human-readable explanation
        pa.field("payload", pa.string()),  # JSON of whatever we had (raw row, the labeled record)
        pa.field("config_fingerprint", pa.string(), nullable=False),
    ]
)


@dataclass
class LabeledRecord:
    """One labeled solution; field names and meaning follow RECORD_SCHEMA exactly."""

    id: str
    problem_id: str
    source: str
    question: str
    gold_answer: str
    steps: list[str]
    final_answer: str | None
    final_correct: bool | None
    mc_values: list[float | None]
    mc_correct: list[int]
    mc_total: list[int]
    labels: list[bool | None]
    label_source: list[str]
    label_rule: str
    first_error_mc: int
    annotator: str
    policy_model: str
    config_fingerprint: str
    rollouts: int
    tokens: int
    judge_first_error: int | None = None
    judge_votes: list[int] = field(default_factory=list)
    judge_prompt_version: str | None = None
    consensus: bool | None = None
    judge_model: str | None = None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RejectedRecord:
    """Something that did not become a labeled row, and why. Nothing is dropped without one."""

    id: str
    problem_id: str | None
    source: str
    stage: str
    reason: str
    detail: str | None = None
    payload: str | None = None
    config_fingerprint: str = ""

    def to_row(self) -> dict[str, Any]:
        return asdict(self)
