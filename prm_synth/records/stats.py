"""The counters each stage returns and a shard gathers (`ShardStats`, stored in the shard marker as a JSON
object and summed field by field over shards: a run's stats are its shards' sum)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any


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
    # of `samples`, the votes served from samples an earlier stage of the shard drew for the same prompt
    # (the canaries' clean controls): read, not asked again
    reused: int = 0

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

    `rollouts` are continuations sampled from solution prefixes to label them; a sampled solution is not a
    rollout (it is counted in `solutions_sampled`), while `tokens` counts every token the policy and the
    judge processed: sampling, rollouts and judging. `majority`: grader.kind majority's counts."""

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
    # Engine requests refused for what they asked (e.g. HTTP 400): what they were for is rejected
    # ("engine_refused"); transient failures are retried by the engine and not counted here.
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
    canaries: dict[str, Any] = field(default_factory=dict)  # planted errors: records/canaries.CanaryStats
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
