"""Consensus: combine the rollouts' labels with the judge's first error, keep what both support.

Qwen's "Lessons of Developing PRMs" (2025): MC labels are noisy (a wrong step can still lead to the
right answer), and keeping only the solutions where the MC first error and the judge's earliest
error coincide gives judge-level label quality. A row that fails the filter is not dropped: it
becomes a rejected row (stage "consensus") whose payload is the whole record, so counts reconcile
and a user can re-filter with another policy without relabeling.

The labels carry their own uncertainty: a search leaves the steps between its last good and its first
bad label unlabeled when the budget does not pin the error. So the judge is compared with the interval
the labels leave open (`open_interval`): its index agrees when it falls after the last good step and
at or before the first bad one; -1 ("no error") agrees when no step is labeled bad.

Policies:
- agree: keep a row where the judge's index agrees (the interval widened by `tolerance` steps; -1 never
  agrees with a bad label, whatever the tolerance). Where it falls inside the interval, the judge
  completes the row: its step becomes the first bad step, the steps before it good, each label it set
  with source "consensus"; a row the rollouts bracketed and the judge pinned is fully labeled.
- judge-only: keep every row the judge decided; its labels follow the judge's index.
- mc-only: keep every row with its labels as measured (the judge, if any, is only recorded).
- soft: the posterior over the first error from the labeler's `p_good` (or, without it, uniform over
  the open interval) and the judge's votes, each vote read under the judge's accuracy measured in this
  shard (`measure_judge`); kept where the most likely first error has probability >= `confidence`,
  and the labels follow it.
Votes: unreadable votes never count; a tie among the readable ones is decided by the rollouts' evidence
(the tied index the prior above finds most likely) and written to `judge_first_error` (the votes in
`judge_votes` show the tie); a tie the evidence cannot decide stays undecided. A decided tie completes
the row only where the rollouts alone make its winner at least `TIE_COMPLETES` likely; else the row is
kept as measured.
With `labels.min_confidence` > 0, a row whose labels up to its MC first error are not all at least that
sure (by `p_good`) is rejected as "low_confidence" under every policy.
Every row's `consensus` is set to whether the two agree, or None when the judge gave no verdict.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence

from prm_synth.config import PINNED, ConsensusConfig
from prm_synth.judge.accuracy import (
    ClassAccuracy,
    JudgeAccuracy,
    JudgeCounts,
    answer_class,
    counts_dict,
    estimated_accuracy,
    measure_by_class,
    measure_judge,
)
from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.judge.estimate import (
    estimate_kept,
    followed_labels,
    rates_by_class,
)
from prm_synth.judge.posterior import first_error_prior, open_interval, posterior, prefix_confidence
from prm_synth.judge.target import Decision, hold_to_target
from prm_synth.records import ConsensusStats, LabeledRecord, RejectedRecord, RejectReason, UnlabeledReason
from prm_synth.records.canaries import CanaryStats
from prm_synth.records.labels import AFTER_ERROR, BELOW_TARGET, confident_labels
from prm_synth.records.stage import StageResult

# A tie the rollouts decided completes the row only where they alone put the winner at least this likely
# (the labeler's default confidence): the judge adds nothing net on a tie, so the labels it would set
# must stand on the rollouts (a correct-answer row left `undecided_unlocated` at p_good 0.85 is not
# filled good because one of two votes said "no error").
TIE_COMPLETES = 0.9


def agrees(mc: int, judge: int, tolerance: int = 0) -> bool:
    """Two first errors agree: both -1, or both steps at most `tolerance` apart."""
    if mc == -1 or judge == -1:
        return mc == judge
    return abs(mc - judge) <= tolerance


def agrees_with_labels(labels: Sequence[bool | None], judge: int, tolerance: int = 0) -> bool:
    """The judge's index (-1: no error) falls in the open interval, widened by `tolerance` steps."""
    lo, hi = open_interval(labels)
    if judge == -1:
        return hi == len(labels)
    return lo - tolerance <= judge and (hi == len(labels) or judge <= hi + tolerance)


def follow(record: LabeledRecord, first_error: int) -> int:
    """Set the row's labels to a first error (-1: none): steps before it good, it bad, labeled steps after
    it bad, unlabeled ones after it unlabeled (`after_error`). Each label set or changed gets the source
    "consensus"; returns how many. `first_error_mc` becomes the labels' first bad step."""
    n = len(record.labels)
    end = n if first_error == -1 else first_error
    labels, sources = list(record.labels), list(record.label_source)  # new lists: copies may share the old
    reasons: list[UnlabeledReason | None] = [None] * n
    changed = 0
    for i in range(n):
        old = labels[i]
        new = True if i < end else False if (i == end or old is not None) else None
        if new != old:
            labels[i], sources[i] = new, "consensus"
            changed += 1
        reasons[i] = None if new is not None else AFTER_ERROR
    record.labels, record.label_source, record.unlabeled_reason = labels, sources, reasons
    record.first_error_mc = first_error
    return changed


def leaders(record: LabeledRecord) -> list[int]:
    """The indices the most readable votes name: one for a majority, several for a tie, none unvoted."""
    counts = Counter(v for v in record.judge_votes if v != UNPARSEABLE).most_common()
    return [v for v, c in counts if c == counts[0][1]]


def rollouts_support(record: LabeledRecord, first_error: int) -> float:
    """P(first error = `first_error`) (-1: none) from the rollouts alone (`first_error_prior`)."""
    prior = first_error_prior(record)
    return prior[len(record.labels) if first_error == -1 else first_error]


def break_tie(record: LabeledRecord) -> int | None:
    """The tied index the rollouts find most likely, or None when they cannot tell (or no tie)."""
    tied = leaders(record)
    if len(tied) < 2:
        return None
    prior = first_error_prior(record)
    n = len(record.labels)
    mass = sorted(((prior[n if v == -1 else v], v) for v in tied if -1 <= v < n), reverse=True)
    if not mass or mass[0][0] <= 0.0 or (len(mass) > 1 and mass[0][0] == mass[1][0]):
        return None
    return mass[0][1]


# ------------------------------------------------------------------ decisions
def decide(
    record: LabeledRecord,
    config: ConsensusConfig,
    min_confidence: float = 0.0,
    accuracy: JudgeAccuracy | None = None,
) -> Decision:
    """The filter's decision for one row (its judge verdict already final, ties broken)."""
    judge = record.judge_first_error
    if config.policy == "soft":
        return _decide_soft(record, config, min_confidence, accuracy or estimated_accuracy(JudgeCounts(), config))
    doubtful = _doubtful_steps(record, min_confidence)
    if doubtful:
        return Decision(False, "low_confidence", f"steps {doubtful[:5]} are labeled below confidence {min_confidence}")
    if config.policy == "mc-only":
        return Decision(True)
    if judge is None:
        if not record.judge_votes:
            return Decision(False, "judge_missing", "no judge ran on this row, so the judge and MC cannot be compared")
        detail = f"the judge's votes {record.judge_votes} give no majority the rollouts can decide"
        return Decision(False, "judge_undecided", detail)
    if config.policy == "judge-only":
        return Decision(True, first_error=judge)
    if not agrees_with_labels(record.labels, judge, config.tolerance):
        lo, hi = open_interval(record.labels)
        allowed = f"{lo}..{'-1' if hi == len(record.labels) else hi}"
        detail = f"judge first error {judge}, labels allow {allowed} (tolerance {config.tolerance})"
        return Decision(False, "disagree", detail)
    inside = agrees_with_labels(record.labels, judge)
    if inside and len(leaders(record)) > 1 and rollouts_support(record, judge) < TIE_COMPLETES:
        return Decision(True)  # kept as measured: nothing but the rollouts backs the labels a tie would set
    if inside and judge == -1 and rollouts_support(record, -1) < 1.0 - TIE_COMPLETES:
        # kept as measured: the labels leave "no error" open only because the labeler withheld a bad
        # label it was not sure enough of (a lone one on a right answer needs 0.99), while its rollouts
        # put an error in the row; a judge that misses it must not fill the row good
        return Decision(True)
    return Decision(True, first_error=judge if inside else None)


def _decide_soft(
    record: LabeledRecord, config: ConsensusConfig, min_confidence: float, accuracy: JudgeAccuracy
) -> Decision:
    """Soft: the posterior's most likely first error, kept at `confidence`. Its labels' confidence is the
    posterior's (stored in `consensus_p_good`), so `min_confidence` is checked against it: the least sure
    label up to the first error is its bad step (P(first error <= it)) or the step before (P(after it))."""
    post = posterior(record, accuracy)
    confidence = prefix_confidence(post)
    n = len(record.labels)
    best = max(range(len(post)), key=post.__getitem__)
    first_error = -1 if best == n else best
    if post[best] < config.confidence:
        detail = f"the most likely first error {first_error} has posterior {post[best]:.3f} < {config.confidence}"
        return Decision(False, "low_confidence", detail, prefix_confidence=confidence)
    least = post[n] if best == n else min(sum(post[best:]), sum(post[: best + 1]))
    if least < min_confidence:
        detail = f"the posterior's labels up to step {first_error} are {least:.3f} sure, below {min_confidence}"
        return Decision(False, "low_confidence", detail, prefix_confidence=confidence)
    return Decision(True, first_error=first_error, prefix_confidence=confidence)


def _doubtful_steps(record: LabeledRecord, min_confidence: float) -> list[int]:
    """Labeled steps up to the MC first error whose confidence is below `min_confidence`."""
    if min_confidence <= 0.0:
        return []
    sure = confident_labels(record.labels, record.p_good, min_confidence)
    end = record.first_error_mc if record.first_error_mc >= 0 else len(record.labels) - 1
    return [i for i in range(end + 1) if record.labels[i] is not None and sure[i] is None]


def _position(index: int | None) -> str:
    return "none" if index is None else str(index)


def keep_sure(record: LabeledRecord, labels: Sequence[bool | None]) -> int:
    """Set a row's labels to the ones that reach the target (`sure_labels`; None: unlabeled, `after_error`
    after a bad label, else `below_target`), each one set or changed with the source "consensus"; returns
    how many. `first_error_mc` becomes the labels' first bad step (-1: none)."""
    old_labels, sources = list(record.labels), list(record.label_source)
    reasons: list[UnlabeledReason | None] = []
    changed = 0
    for i, new in enumerate(labels):
        if new != old_labels[i]:
            sources[i] = "consensus"
            changed += 1
        after_bad = any(label is False for label in labels[:i])
        reasons.append(None if new is not None else AFTER_ERROR if after_bad else BELOW_TARGET)
    record.labels, record.label_source, record.unlabeled_reason = list(labels), sources, reasons
    record.first_error_mc = next((i for i, label in enumerate(labels) if label is False), -1)
    return changed


def _decide_rows(
    records: list[LabeledRecord],
    config: ConsensusConfig,
    min_confidence: float,
    row_rates: Sequence[ClassAccuracy],
    agreement: Counter[str],
) -> tuple[list[Decision], int]:
    """Each row's decision (ties broken first, `consensus` set, the agreement counted); under `soft` the
    kept rows' labels held together to the precision asked. Returns the decisions and the ties broken."""
    ties_broken = 0
    decisions: list[Decision] = []
    for record in records:
        if record.judge_first_error is None and (winner := break_tie(record)) is not None:
            record.judge_first_error = winner
            ties_broken += 1
        judge = record.judge_first_error
        record.consensus = None if judge is None else agrees_with_labels(record.labels, judge, config.tolerance)
        agreement[f"mc={record.first_error_mc},judge={_position(judge)}"] += 1
        decisions.append(decide(record, config, min_confidence, row_rates[len(decisions)].accuracy))
    if config.policy == "soft":  # the kept rows' labels, together, at the precision asked
        decisions = hold_to_target(records, decisions, row_rates, config, min_confidence)
    return decisions, ties_broken


def _complete(record: LabeledRecord, decision: Decision) -> int:
    """A kept row's labels completed (or relabeled) as the decision says; 1 where a label changed (the
    labels before are kept in `labels_before_consensus`), else 0."""
    before = list(record.labels)
    if decision.labels is not None:
        changed = keep_sure(record, decision.labels)
    elif decision.first_error is not None:
        changed = follow(record, decision.first_error)
    else:
        return 0
    if changed > 0:
        record.labels_before_consensus = before
        return 1
    return 0


def _rejection(record: LabeledRecord, reason: RejectReason, detail: str | None) -> RejectedRecord:
    """A row consensus rejects, with the row as labeled (before any completion) as its payload."""
    return RejectedRecord(
        id=record.id,
        problem_id=record.problem_id,
        source=record.source,
        stage="consensus",
        reason=reason,
        detail=detail,
        payload=json.dumps(record.to_row(), ensure_ascii=False),
        config_fingerprint=record.config_fingerprint,
    )


def apply_consensus(
    records: list[LabeledRecord],
    config: ConsensusConfig,
    min_confidence: float = 0.0,
    pinned: float = PINNED,
    canaries: CanaryStats | None = None,
    doubt: Mapping[str, tuple[float, float]] | None = None,
    predicted: dict[str, dict[str, float]] | None = None,
) -> StageResult[LabeledRecord, ConsensusStats]:
    """Split rows into kept and rejected under the config's policy; set every row's `consensus`, break
    ties, complete (or relabel) the kept rows the policy says. The judge's accuracy is measured on the rows
    the rollouts pinned at `pinned` (`judge.skip_confidence`; accuracy.py).

    A rejected row's payload is the row as labeled, before any completion. Stats hold counts only (shard
    totals sum them); the fractions are recomputed from them (`ConsensusStats.fractions`). `predicted`, where
    given, is filled with each kept row's expected right labels under the posterior, by id (the audit's
    difference estimator corrects them, shard/audit.py).
    """
    kept: list[LabeledRecord] = []
    rejected: list[RejectedRecord] = []
    agreement: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    by_source: dict[str, dict[str, int]] = {}
    counts = measure_judge(records, pinned)
    class_counts = measure_by_class(records, pinned)  # the judge's accuracy per answer class
    doubt = doubt or {}  # per row id graded against a pseudo-gold: (P(it is wrong), P(the row is right then))
    by_class = rates_by_class(records, config, pinned, canaries, doubt)  # from the canaries where the shard has them
    row_rates = [by_class[answer_class(r)].with_doubt(*doubt.get(r.id, (0.0, 0.0))) for r in records]
    estimate: Counter[str] = Counter()
    completed = 0
    decisions, ties_broken = _decide_rows(records, config, min_confidence, row_rates, agreement)
    for record, decision, rates in zip(records, decisions, row_rates, strict=True):
        if decision.prefix_confidence is not None:
            record.consensus_p_good = decision.prefix_confidence
        source = by_source.setdefault(record.source, {"rows": 0, "kept": 0, "rejected": 0, "agree": 0})
        source["rows"] += 1
        source["agree"] += bool(record.consensus)
        if decision.keep:
            if config.policy == "soft" and (decision.first_error is not None or decision.labels is not None):
                labels = decision.labels or followed_labels(record, decision.first_error)  # type: ignore[arg-type]
                row_estimate = estimate_kept(record, labels, rates)
                estimate.update(row_estimate)
                if predicted is not None:
                    predicted[record.id] = row_estimate
            completed += _complete(record, decision)
            kept.append(record)
            source["kept"] += 1
            continue
        assert decision.reason is not None
        source["rejected"] += 1
        by_reason[decision.reason] += 1
        rejected.append(_rejection(record, decision.reason, decision.detail))
    stats = ConsensusStats(
        rows=len(records),
        kept=len(kept),
        rejected=len(rejected),
        agree=sum(1 for r in records if r.consensus),
        judged=sum(1 for r in records if r.judge_first_error is not None),
        completed=completed,
        ties_broken=ties_broken,
        pinned_votes=counts.pinned_votes,
        pinned_named=counts.pinned_named,
        pinned_missed=counts.pinned_missed,
        clean_votes=counts.clean_votes,
        clean_said_clean=counts.clean_said_clean,
        by_answer={c: counts_dict(class_counts[c], by_class[c]) for c in class_counts},
        rejected_by_reason=dict(by_reason),
        agreement=dict(agreement),
        by_source=by_source,
        estimate=dict(estimate),
    )
    return StageResult(kept, rejected, stats)


def record_from_payload(payload: str) -> LabeledRecord:
    """The LabeledRecord a consensus-rejected row carries (for re-filtering and `eval dataset`)."""
    return LabeledRecord(**json.loads(payload))
