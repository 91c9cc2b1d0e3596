"""Consensus filtering: keep the rows on which Monte Carlo estimation and the judge agree.

Qwen's "Lessons of Developing PRMs" (2025): MC labels are noisy (a wrong step can still lead to the
right answer), and keeping only the solutions where the MC first error and the judge's earliest
error coincide gives judge-level label quality. A row that fails the filter is not dropped: it
becomes a rejected row (stage "consensus") whose payload is the whole record, so counts reconcile
and a user can re-filter with another policy without relabeling.

Policies:
- agree: keep a row when both say "no error" (-1), or both name a step and the indices differ by
  at most `tolerance`. -1 never agrees with a step index, whatever the tolerance: "no error" and
  "an error at step 0" are different claims, not neighbours.
- judge-only: keep every row the judge decided (the judge's index is the label to train on).
- mc-only: keep every row (the judge, if any, is only recorded).
With `labels.min_confidence` > 0, a row whose labels up to its MC first error are not all at least that
sure (by `p_good`) is rejected as "low_confidence" under every policy.
Every row's `consensus` is set to whether the two agree, or None when the judge gave no verdict.
"""

from __future__ import annotations

import json
from collections import Counter

from prm_synth.annotate.labels import confident_labels
from prm_synth.config import ConsensusConfig
from prm_synth.schema import ConsensusStats, LabeledRecord, RejectedRecord, RejectReason


def agrees(mc: int, judge: int, tolerance: int = 0) -> bool:
    if mc == -1 or judge == -1:
        return mc == judge
    return abs(mc - judge) <= tolerance


def decide(
    record: LabeledRecord, config: ConsensusConfig, min_confidence: float = 0.0
) -> tuple[bool, RejectReason | None, str | None]:
    """(keep, reason, detail) for one row: the filter's decision and, when dropped, why."""
    judge, mc = record.judge_first_error, record.first_error_mc
    doubtful = _doubtful_steps(record, min_confidence)
    if doubtful:
        return False, "low_confidence", f"steps {doubtful[:5]} are labeled below confidence {min_confidence}"
    if judge is None:
        if config.policy == "mc-only":
            return True, None, None
        if not record.judge_votes:
            return False, "judge_missing", "no judge ran on this row, so the judge and MC cannot be compared"
        return False, "judge_undecided", f"the judge's votes {record.judge_votes} give no majority (tie or unreadable)"
    if config.policy != "agree" or agrees(mc, judge, config.tolerance):
        return True, None, None
    return False, "disagree", f"judge first error {judge}, MC first error {mc} (tolerance {config.tolerance})"


def _doubtful_steps(record: LabeledRecord, min_confidence: float) -> list[int]:
    """Labeled steps up to the MC first error whose confidence is below `min_confidence`."""
    if min_confidence <= 0.0:
        return []
    sure = confident_labels(record.labels, record.p_good, min_confidence)
    end = record.first_error_mc if record.first_error_mc >= 0 else len(record.labels) - 1
    return [i for i in range(end + 1) if record.labels[i] is not None and sure[i] is None]


def _position(index: int | None) -> str:
    return "none" if index is None else str(index)


def apply_consensus(
    records: list[LabeledRecord], config: ConsensusConfig, min_confidence: float = 0.0
) -> tuple[list[LabeledRecord], list[RejectedRecord], ConsensusStats]:
    """Split rows into kept and rejected under the config's policy; set every row's `consensus`.

    Stats hold counts only (shard totals sum them); the fractions are recomputed from them
    (`ConsensusStats.fractions`).
    """
    kept: list[LabeledRecord] = []
    rejected: list[RejectedRecord] = []
    agreement: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    by_source: dict[str, dict[str, int]] = {}
    for record in records:
        judge = record.judge_first_error
        record.consensus = None if judge is None else agrees(record.first_error_mc, judge, config.tolerance)
        agreement[f"mc={record.first_error_mc},judge={_position(judge)}"] += 1
        keep, reason, detail = decide(record, config, min_confidence)
        source = by_source.setdefault(record.source, {"rows": 0, "kept": 0, "rejected": 0, "agree": 0})
        source["rows"] += 1
        source["agree"] += bool(record.consensus)
        if keep:
            kept.append(record)
            source["kept"] += 1
            continue
        assert reason is not None
        source["rejected"] += 1
        by_reason[reason] += 1
        rejected.append(
            RejectedRecord(
                id=record.id,
                problem_id=record.problem_id,
                source=record.source,
                stage="consensus",
                reason=reason,
                detail=detail,
                payload=json.dumps(record.to_row(), ensure_ascii=False),
                config_fingerprint=record.config_fingerprint,
            )
        )
    stats = ConsensusStats(
        rows=len(records),
        kept=len(kept),
        rejected=len(rejected),
        agree=sum(1 for r in records if r.consensus),
        judged=sum(1 for r in records if r.judge_first_error is not None),
        rejected_by_reason=dict(by_reason),
        agreement=dict(agreement),
        by_source=by_source,
    )
    return kept, rejected, stats


def record_from_payload(payload: str) -> LabeledRecord:
    """The LabeledRecord a consensus-rejected row carries (for re-filtering and `eval dataset`)."""
    return LabeledRecord(**json.loads(payload))
