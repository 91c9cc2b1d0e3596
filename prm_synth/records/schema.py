"""What crosses stages: problems, the public record schema, rejections, vocabularies (the counters each
stage returns are in stats.py, one stage's result in stage.py).

The record and rejected-row schemas are Arrow schemas; shards are Arrow IPC stream files with exactly these columns.
Adding a column is a compatible change; renaming or retyping one is not. The vocabularies (label sources, stages,
verdicts) are `Literal`s shared by annotators, stages, card and tests, so a new word is added in one place.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import pyarrow as pa

# Where a step's label came from (see annotate/annotation.py for each meaning).
LabelSource = Literal["mc", "verdict", "test", "inferred", "consensus", "none"]
LABEL_SOURCES: tuple[str, ...] = get_args(LabelSource)
# The stage of the data flow at which an input or a row was rejected.
Stage = Literal["load", "sample", "split", "annotate", "judge", "consensus", "verify", "write"]
STAGES: tuple[str, ...] = get_args(Stage)
# A grade of a solution or a rollout: unknown is never counted as correct.
VerdictStatus = Literal["correct", "incorrect", "unknown"]
# Why an input or a row was rejected (the `reason` of a RejectedRecord), by stage:
RejectReason = Literal[
    "not_an_object",  # load (to line_too_long, and missing_tests): a source row that is no usable problem
    "missing_question",
    "bad_question",
    "empty_question",
    "missing_answer",
    "unparseable_answer",
    "empty_answer",
    "bad_text",
    "duplicate_id",
    "broken_line",
    "line_too_long",
    "missing_tests",  # a code problem (grader.kind code) without tests to run
    "bad_solution",  # problems.kind solutions: a solution not text, or steps not a list of non-empty strings
    "bad_label",  # ... a given label of the wrong type, or out of range for the solution's steps
    "engine_refused",  # sample / annotate / judge: the engine refused the request
    "engine_refused_permanent",  # ... on `run.refused_runs` runs in a row: for good (run --retry-refused)
    # judge / verify: not one of the row's votes (chains) could be read: a failure of the judge, not of
    # the row, so the row is left open (its payload is the labeled row) and the next run asks again
    "judge_unreadable",
    "verify_unreadable",
    "judge_unreadable_permanent",  # the same on `run.refused_runs` runs in a row: for good (--retry-refused)
    "verify_unreadable_permanent",
    "empty_solution",  # split: the policy wrote nothing to split (load: a given solution holds no text)
    "no_majority",  # sample (grader.kind majority): the policy's answers reached no majority to be the gold
    # annotate (OmegaPRM): a question without a row
    "screened_out",
    "no_paths",
    "disagree",  # consensus
    "judge_missing",
    "judge_undecided",
    "low_confidence",
    # write: text that cannot be stored (older shards; model text is now repaired, see shards.py)
    "unencodable_text",
]
REJECT_REASONS: tuple[str, ...] = get_args(RejectReason)
# Rejected for now (a stage's engine failed on them, not their content): the next run finishes them from their payload.
LEFT_OPEN_REASONS = frozenset({"judge_unreadable", "verify_unreadable"})
UnlabeledReason = Literal[  # why a step has no label (a row's `unlabeled_reason`)
    "after_error",  # its prefix follows the first bad step: it holds that error
    "undecided_budget",  # the rollout budget ran out before the evidence was clear
    "undecided_uninformative",  # no probe was worth its rollouts
    "undecided_verdict",  # nothing to measure (e.g. ungradable, one step)
    "undecided_misfit",  # changepoint revisions before 2026-12-05.5: the rollouts contradicted its model
    # a correct final answer, and the evidence says an error may lie somewhere before it, not where: the
    # shard's correct-answer solutions hold process errors (measured), or this one's rollouts dip and rise
    "undecided_unlocated",
    "token_budget",  # the solution's rollout tokens (annotate.max_rollout_tokens) ran out before it was decided
    "truncated_thinking",  # the last step of a solution whose thinking trace never closes: it has no answer
    "below_target",  # consensus kept the row with only its labels at consensus.target_precision
]
# The first-error searches (annotate/search.py's SEARCHES, the one place that reads it). `changepoint` is a search
# of its own for the binary method, a per-prefix posterior in OmegaPRM's bisection; `calibrated` (an older
# posterior) is upgraded to it (config/upgrade.py).
SearchTestName = Literal["fixed", "sprt", "changepoint"]
# The nodes of an OmegaPRM tree: the question, a measured prefix, a complete rollout (a leaf).
NodeKind = Literal["root", "state", "rollout"]
# Why an OmegaPRM question's search stopped.
OmegaStop = Literal["screened_out", "search_limit", "pool_empty", "budget"]
# Why a verification chain was dropped (prm_synth/judge/verify.py): the first seven are chains that do not
# read as a complete chain, the next two readable chains the agreement filter refused.
ChainDropReason = Literal[
    "truncated",  # the model ran out of tokens
    "too_long",  # longer than the parser reads (model output is untrusted)
    "no_steps",  # no `Step N:` at all
    "step_order",  # steps skipped, repeated, out of order, or past the solution's last step
    "missing_verdict",  # a step without \boxed{correct} / \boxed{incorrect} as its last box
    "stopped_early",  # ends before the last step without an incorrect verdict
    "continued_after_error",  # goes on checking after its first incorrect step
    "disagree",  # its verdicts disagree with the row's labels beyond the tolerance
    "no_labels",  # the row has no (confident) label to compare a chain with
    "engine_refused",  # the engine refused the row's request (engines.base.RequestRefused): no chain came
]
CHAIN_DROP_REASONS: tuple[str, ...] = get_args(ChainDropReason)

PAYLOAD_CHARS = 4000  # a rejection keeps this much of what was rejected (JSON), enough to re-read it


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    gold_answer: str
    source: str
    grading: str | None = None  # JSON: what a grader other than math needs (options, aliases, tests, ...)


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
        # Per step, the posterior probability that its prefix is still correct, from a search that estimates
        # one (the default search does); null for methods that do not. Added later: older shards lack it.
        pa.field("p_good", pa.list_(pa.float64())),
        pa.field("unlabeled_reason", pa.list_(pa.string())),  # per step, why unlabeled (null exactly where labeled)
        # Verification chains (prm_synth/judge/verify.py; null where no `verify` stage ran): the chains whose
        # step verdicts agree with the labels, and for every other chain of the row why it was dropped.
        pa.field("verify_chains", pa.list_(pa.string())),
        pa.field("verify_dropped", pa.list_(pa.struct([("reason", pa.string()), ("detail", pa.string())]))),
        pa.field("verify_model", pa.string()),
        pa.field("verify_prompt_version", pa.string()),
        # Per step, rollouts from its prefix that could not be graded (a timeout, a cut-off or answerless
        # completion): left out of mc_total and of the evidence. Added later: older shards lack it.
        pa.field("mc_unknown", pa.list_(pa.int32())),
        # Per step, the probability its prefix is still correct under the `soft` consensus posterior (the
        # rollouts' p_good and the judge's votes, judge/posterior.py): the confidence of labels consensus
        # set. P(first error = k) is consensus_p_good[k-1] - consensus_p_good[k]. Null without soft.
        pa.field("consensus_p_good", pa.list_(pa.float64())),
        # The labels as the labeler left them, where consensus completed or changed them (null: unchanged).
        pa.field("labels_before_consensus", pa.list_(pa.bool_())),
        pa.field("gold_origin", pa.string()),  # null: the problem's gold; "majority 0.750": a pseudo-gold. Added later.
        pa.field("final_unknown_reason", pa.string()),  # why final_correct is null (the grader's reason). Added later.
        pa.field("given_first_error", pa.int32()),  # problems.kind solutions: labels a source gave (output-schema.md)
        pa.field("given_labels", pa.list_(pa.int32())),
    ]
)

REJECTED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("problem_id", pa.string()),
        pa.field("source", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),  # one of STAGES
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
    p_good: list[float] | None = None  # from Annotation.p_good
    unlabeled_reason: list[UnlabeledReason | None] | None = None  # annotate.labels.unlabeled_reasons
    verify_chains: list[str] | None = None  # kept verification chains (None: no verify stage ran)
    verify_dropped: list[dict[str, str]] | None = None  # {"reason": ChainDropReason, "detail": ...} per drop
    verify_model: str | None = None
    verify_prompt_version: str | None = None
    mc_unknown: list[int] | None = None  # per step, ungradable rollouts (not in mc_total)
    consensus_p_good: list[float] | None = None  # per step, P(prefix correct) under soft's posterior
    labels_before_consensus: list[bool | None] | None = None  # the labels before consensus changed them
    gold_origin: str | None = None  # None: the problem's gold; "majority 0.75": a pseudo-gold (grading/majority.py)
    final_unknown_reason: str | None = None  # why final_correct is None (the grader's reason); None: graded
    given_first_error: int | None = None  # a given solution's given earliest wrong step (-1 none; None: not given)
    given_labels: list[int] | None = None  # its given per-step ratings -1/0/1 (None: not given per step)

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RejectedRecord:
    """Something that did not become a labeled row, and why. Nothing is dropped without one."""

    id: str
    problem_id: str | None
    source: str
    stage: Stage
    reason: RejectReason
    detail: str | None = None
    payload: str | None = None
    config_fingerprint: str = ""

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


# One source row as it leaves the loader: a problem to label, or its rejection (problems/given.py: SourceItem).
Item = Problem | RejectedRecord


def reject(
    row_id: str,
    problem_id: str | None,
    source: str,
    stage: Stage,
    reason: RejectReason,
    detail: str,
    payload: Any = None,
    *,
    payload_chars: int = PAYLOAD_CHARS,
) -> RejectedRecord:
    """The one way to reject something: a reason code, a sentence for people, and what we had. `payload` is
    stored as JSON (a string payload is stored as is), cut to `payload_chars`. The config fingerprint is set by
    the shard writer, which is the one place that knows it."""
    text = (
        payload if isinstance(payload, str) or payload is None else json.dumps(payload, ensure_ascii=False, default=str)
    )
    return RejectedRecord(
        id=row_id,
        problem_id=problem_id,
        source=source,
        stage=stage,
        reason=reason,
        detail=detail,
        payload=None if text is None else text[:payload_chars],
    )
