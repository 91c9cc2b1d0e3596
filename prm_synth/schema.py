"""What crosses rooms: problems, the public record schema, rejections, vocabularies, shard counters.

The record and rejected-row schemas are Arrow schemas; shards are Arrow IPC stream files with exactly
these columns. Adding a column is a compatible change; renaming or retyping one is not.
The vocabularies (label sources, stages, verdicts) are `Literal`s shared by annotators, stages, card and
tests, so a new word is added in one place.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
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
    "engine_refused",  # sample / annotate / judge: the engine refused the request
    "engine_refused_permanent",  # ... on `run.refused_runs` runs in a row: for good (run --retry-refused)
    # judge / verify: not one of the row's votes (chains) could be read: a failure of the judge, not of
    # the row, so the row is left open (its payload is the labeled row) and the next run asks again
    "judge_unreadable",
    "verify_unreadable",
    "judge_unreadable_permanent",  # the same on `run.refused_runs` runs in a row: for good (--retry-refused)
    "verify_unreadable_permanent",
    # split: the policy wrote nothing to split
    "empty_solution",
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
# The first-error searches (annotate/search.py's SEARCHES, the one place that reads it).
# `changepoint` is a search of its own for the binary method, a per-prefix posterior in OmegaPRM's
# bisection; `calibrated` (an older posterior) is upgraded to it (config/upgrade.py).
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
        # Per step, the posterior probability that its prefix is still correct, from a search that
        # estimates one (the default search does);
        # null for methods that do not estimate it. Added after the first release: older shards lack it.
        pa.field("p_good", pa.list_(pa.float64())),
        # Per step, why it has no label: null exactly where labeled (annotate.labels.unlabeled_reasons).
        pa.field("unlabeled_reason", pa.list_(pa.string())),
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


# One source row as it leaves the loader: a problem to label, or its rejection.
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
    """The one way to reject something: a reason code, a sentence for people, and what we had.

    `payload` is stored as JSON (a string payload is stored as is), cut to `payload_chars`. The config
    fingerprint is set by the shard writer, which is the one place that knows it.
    """
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


@dataclass
class JudgeStats:
    """Counters of the judge stage (summed key by key over shards)."""

    solutions: int = 0
    samples: int = 0
    unparseable: int = 0
    ties: int = 0
    undecided: int = 0  # no verdict: ties plus solutions without a readable vote
    engine_calls: int = 0
    refused: int = 0  # requests the engine refused (their rows are rejected)
    unreadable_rows: int = 0  # rows without one readable vote: left open (`judge_unreadable`), asked again
    tokens: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)  # "-1" / "error" / "none" -> count
    # judge selection (judge/selection.py): requests sent (one per row and round, n=1 each; `select: all`
    # sends one per row with n=samples), and rows not sent because the rollouts pinned them
    requests: int = 0
    rows_skipped: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ConsensusStats:
    """Counters of the consensus stage (summed key by key over shards); fractions: `fractions()`."""

    rows: int = 0
    kept: int = 0
    rejected: int = 0
    agree: int = 0
    judged: int = 0
    completed: int = 0  # kept rows whose labels the judge's index completed or changed (label source "consensus")
    ties_broken: int = 0  # rows whose tied votes the rollouts' evidence decided
    # The judge's accuracy measured in the run (judge/accuracy.py): its readable votes on rows whose
    # first error the rollouts pinned (p_good >= 0.99 before, <= 0.01 at it), and on rows they found clean.
    pinned_votes: int = 0
    pinned_named: int = 0  # of those, votes naming the pinned step
    pinned_missed: int = 0  # of those, votes saying -1
    clean_votes: int = 0
    clean_said_clean: int = 0  # of those, votes saying -1
    # The same counts per answer class ("right" / "wrong": judge/accuracy.py), and in how many shards each
    # class read the prior for lack of pinned rows; the soft posterior reads a row's class's figure.
    by_answer: dict[str, dict[str, int]] = field(default_factory=dict)
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    agreement: dict[str, int] = field(default_factory=dict)  # "mc=i,judge=j" -> rows (judge=none: no verdict)
    by_source: dict[str, dict[str, int]] = field(default_factory=dict)  # source -> rows, kept, rejected, agree
    estimate: dict[str, float] = field(default_factory=dict)  # kept labels' expected precision (judge/estimate.py)

    def fractions(self) -> dict[str, Any]:
        """kept / rows, agree / judged, and kept / rows per source, recomputed from the counts."""
        return {
            "kept_fraction": self.kept / self.rows if self.rows else None,
            "agree_fraction_of_judged": self.agree / self.judged if self.judged else None,
            "judge_recall_pinned": self.pinned_named / self.pinned_votes if self.pinned_votes else None,
            "judge_clean_rate": self.clean_said_clean / self.clean_votes if self.clean_votes else None,
            "by_source": {
                src: {"kept_fraction": s["kept"] / s["rows"] if s.get("rows") else None}
                for src, s in self.by_source.items()
            },
        }

    def judge_accuracy_text(self) -> str:
        """The judge's measured accuracy in words (summary, `inspect`, card)."""
        parts = []
        if self.pinned_votes:
            parts.append(
                f"names the pinned error in {self.pinned_named / self.pinned_votes:.1%} of {self.pinned_votes} votes"
            )
        if self.clean_votes:
            parts.append(
                f"says -1 in {self.clean_said_clean / self.clean_votes:.1%} of {self.clean_votes} votes on clean rows"
            )
        text = ", ".join(parts) or "not measured (no row's first error pinned by the rollouts)"
        return f"{text}; by answer class (what soft reads): {self.by_answer_text()}" if self.by_answer else text

    def by_answer_text(self) -> str:
        """Each answer class's measured accuracy in words, and in how many shards the prior stood in."""
        parts = []
        for name in ("right", "wrong"):
            c = self.by_answer.get(name) or {}
            pinned, clean, shards = c.get("pinned_votes", 0), c.get("clean_votes", 0), c.get("shards", 0)
            bits = []
            if pinned:
                bits.append(f"names the pinned error in {c.get('pinned_named', 0) / pinned:.1%} of {pinned} votes")
            if clean:
                bits.append(f"says -1 in {c.get('clean_said_clean', 0) / clean:.1%} of {clean} votes on clean rows")
            if c.get("errors_on_prior"):
                bits.append(f"errors read the prior in {c['errors_on_prior']} of {shards} shards")
            if name == "right" and c.get("clean_on_prior"):
                bits.append(f"clean rows read the prior in {c['clean_on_prior']} of {shards} shards")
            parts.append(f"{name}-answer rows: {', '.join(bits) or 'not measured'}")
        return "; ".join(parts)

    def kept_text(self) -> str:
        """What consensus kept and did, in words."""
        share = f" ({self.kept / self.rows:.1%})" if self.rows else ""
        return (
            f"{self.kept} of {self.rows}{share}; {self.completed} completed or relabeled by the judge, "
            f"{self.ties_broken} tied votes decided by the rollouts"
        )

    def as_dict(self) -> dict[str, Any]:
        """The counts with the fractions (the run summary's `consensus`)."""
        return asdict(self) | self.fractions()


@dataclass
class VerifyStats:
    """Counters of the verification stage (counts only: a run's are its shards' sum)."""

    rows: int = 0  # rows whose chains were sampled
    rows_with_chain: int = 0  # rows that kept at least one chain
    chains: int = 0  # chains sampled
    kept: int = 0
    dropped_by_reason: dict[str, int] = field(default_factory=dict)  # ChainDropReason -> chains
    steps_compared: int = 0  # labeled steps a readable chain was compared on
    steps_agreed: int = 0  # of those, where its verdict equals the label
    chain_tokens_kept: int = 0  # generated tokens of the kept chains
    tokens: int = 0  # prompt + generated tokens of every verify request
    engine_calls: int = 0
    refused: int = 0  # rows whose request the engine refused (their chains count as `engine_refused`)
    unreadable_rows: int = 0  # rows without one readable chain: left open (`verify_unreadable`), asked again
    unreadable_chains: int = 0  # chains not in the verifier's format at all (verify.UNREADABLE_CHAIN)

    def fractions(self) -> dict[str, float | None]:
        """Kept / sampled chains, per-step agreement, what a kept chain cost (every verify token, the
        dropped chains' included) and how long one is; recomputed from the counts."""
        return {
            "kept_fraction": self.kept / self.chains if self.chains else None,
            "step_agreement": self.steps_agreed / self.steps_compared if self.steps_compared else None,
            "tokens_per_kept_chain": self.tokens / self.kept if self.kept else None,
            "kept_chain_tokens": self.chain_tokens_kept / self.kept if self.kept else None,
        }

    def as_dict(self) -> dict[str, Any]:
        """The counts with the fractions (the run summary's `verify`)."""
        return asdict(self) | self.fractions()


@dataclass
class ShardStats:
    """Counters of one shard (or, merged, of a run). Stored in the shard marker as a JSON object.

    `rollouts`: continuations sampled from solution prefixes to label them (a sampled solution is counted in
    `solutions_sampled`); `tokens`: every token the policy and the judge processed. `majority`: its grader's counts."""

    inputs: int = 0  # source rows in the shard (problems + load rejections)
    problems_loaded: int = 0
    problems_labeled: int = 0  # problems with at least one labeled row
    solutions_sampled: int = 0
    rows: int = 0
    rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    final_correct: int = 0
    final_unknown: int = 0
    rollouts: int = 0
    unknown_rollouts: int = 0  # rollouts that could not be graded: left out of the evidence
    # requests refused for what they asked (HTTP 400): rejected ("engine_refused"); transient failures are retried
    requests_refused: int = 0
    engine_calls: int = 0
    probes_asked: int = 0
    probes_reused: int = 0
    sampling_tokens: int = 0
    rollout_tokens: int = 0
    judge_tokens: int = 0
    text_repaired: int = 0  # rows whose model text held a lone surrogate, stored with U+FFFD in its place
    seconds: dict[str, float] = field(default_factory=dict)  # per stage: sample_and_label, judge, consensus
    judge: JudgeStats | None = None  # None without a judge
    consensus: ConsensusStats | None = None  # None without consensus
    verify: VerifyStats | None = None  # None without a verify stage
    majority: dict[str, int] = field(default_factory=dict)  # MajorityAudit.to_counts (grading/majority.py)
    canaries: dict[str, Any] = field(default_factory=dict)  # planted errors: store/canary_counts.CanaryStats
    audit: dict[str, Any] = field(default_factory=dict)  # the kept rows' audit: store/audit_counts.py

    @property
    def tokens(self) -> int:
        return (
            self.sampling_tokens + self.rollout_tokens + self.judge_tokens + (self.verify.tokens if self.verify else 0)
        )

    def to_dict(self) -> dict[str, Any]:  # `majority` and `audit` only where there are some
        out = asdict(self) | {"tokens": self.tokens}
        return {k: v for k, v in out.items() if v or k not in ("majority", "audit")}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ShardStats:
        """Read stats of any version: unknown keys ignored, missing ones zero, a stage that did not run None."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in (data or {}).items() if k in names}
        for name, stage in (("judge", JudgeStats), ("consensus", ConsensusStats), ("verify", VerifyStats)):
            values[name] = _read(stage, values.get(name))
        return cls(**values)

    def moved_to_rejected(self, reasons: list[str]) -> ShardStats:
        """These stats after rows were moved to rejected at write time (`reasons`: one per row moved)."""
        by_reason = dict(self.rejected_by_reason)
        for reason in reasons:
            by_reason[reason] = by_reason.get(reason, 0) + 1
        # Stats that never counted rows (a caller that passed none) are not driven below zero.
        moved = min(len(reasons), self.rows)
        return replace(self, rows=self.rows - moved, rejected=self.rejected + moved, rejected_by_reason=by_reason)

    def __add__(self, other: ShardStats) -> ShardStats:
        """Field-wise sum (nested counts are summed key by key): a run's stats are its shards' sum."""
        return ShardStats(**{f.name: _add(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)})


def _read(stage: type[Any], data: dict[str, Any] | None) -> Any:
    if not data:
        return None
    names = {f.name for f in fields(stage)}
    return stage(**{k: v for k, v in data.items() if k in names})


def _add(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, JudgeStats | ConsensusStats | VerifyStats):
        return type(a)(**{f.name: _add(getattr(a, f.name), getattr(b, f.name)) for f in fields(a)})
    if isinstance(a, dict):
        out = dict(a)
        for key, value in b.items():
            out[key] = _add(out[key], value) if key in out else value
        return out
    if isinstance(a, bool) or not isinstance(a, int | float):
        return a
    return a + b
