"""The rows' doubt of a pseudo-gold (grading/majority.row_doubts) read with the run's own grader."""

from __future__ import annotations

from collections.abc import Sequence

from prm_synth.config.grader import GraderConfig
from prm_synth.grading.majority import MajorityAudit, row_doubts
from prm_synth.grading.registry import make_grader
from prm_synth.records import LabeledRecord, Problem


def doubts_of(
    config: GraderConfig, records: Sequence[LabeledRecord], problems: Sequence[Problem], audit: MajorityAudit
) -> dict[str, tuple[float, float]]:
    """Per row id: (P(its pseudo-gold is wrong), P(the row is right then)), answers read by the inner kind."""
    inner = make_grader(config, inner=True)
    return row_doubts(records, problems, lambda text, p: inner.canonical(text, inner.key(p)), audit.to_counts())
