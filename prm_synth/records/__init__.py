"""What crosses stages: the record types and their Arrow schemas, rejections, the vocabularies, the
counters each stage returns, the label vocabulary and rules, and what a run's canaries measured.

Every stage package (problems, sampling, annotate, judge, export) talks to the others only through these
types, as datatrove's steps share one `Document`: `schema.py` (problems, records, rejections and the
vocabularies), `stats.py` (each stage's counters, `ShardStats`), `stage.py` (`StageResult`: kept,
rejected, counters), `labels.py` (label vocabulary and rules), `canaries.py` (canary counts). The record
types are imported from here (`from prm_synth.records import LabeledRecord`).
"""

from prm_synth.records.schema import (
    CHAIN_DROP_REASONS,
    LABEL_SOURCES,
    LEFT_OPEN_REASONS,
    PAYLOAD_CHARS,
    RECORD_SCHEMA,
    REJECT_REASONS,
    REJECTED_SCHEMA,
    STAGES,
    ChainDropReason,
    Item,
    LabeledRecord,
    LabelSource,
    NodeKind,
    OmegaStop,
    Problem,
    RejectedRecord,
    RejectReason,
    SearchTestName,
    Stage,
    UnlabeledReason,
    VerdictStatus,
    reject,
)
from prm_synth.records.stage import StageResult
from prm_synth.records.stats import ConsensusStats, JudgeStats, ShardStats, VerifyStats

__all__ = [
    "CHAIN_DROP_REASONS",
    "ChainDropReason",
    "ConsensusStats",
    "Item",
    "JudgeStats",
    "LABEL_SOURCES",
    "LEFT_OPEN_REASONS",
    "LabelSource",
    "LabeledRecord",
    "NodeKind",
    "OmegaStop",
    "PAYLOAD_CHARS",
    "Problem",
    "RECORD_SCHEMA",
    "REJECTED_SCHEMA",
    "REJECT_REASONS",
    "RejectReason",
    "RejectedRecord",
    "STAGES",
    "SearchTestName",
    "ShardStats",
    "Stage",
    "StageResult",
    "UnlabeledReason",
    "VerdictStatus",
    "VerifyStats",
    "reject",
]
