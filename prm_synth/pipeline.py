"""One shard of problems in, labeled records and rejected records out: the library's main job.

load ─▶ sample ─▶ label ─▶ judge ─▶ consensus ─▶ verify ─▶ check

1 load       the shard's source rows: problems, and rows the loader already rejected (problems/sources.py)
2 sample     solutions from the policy, split and graded (sampling/sample.py; per-question labelers skip
             it); with `grader.kind: majority` the policy's own majority answer is the gold first
             (sampling/votes.py)
3 label      the method's annotators behind the probe scheduler (annotate/labeler.py); sampling goes
             through the same scheduler, so a problem's annotators start as soon as its solutions are
             back and the engine never drains between the two. Planted-error canaries, labeled and
             judged like rows, measure the judge before it is read (shard/canaries.py)
4 judge      an LLM judge names each row's first error (judge/selection.py, judge/ask.py; only with a
             `judge` section)
5 consensus  keep the rows the rollouts and the judge support, completing their labels (judge/consensus.py);
             then audit a sample of the kept ones, never changing them (shard/audit.py: `estimated_precision`)
6 verify     verification chains for the kept rows, kept where they agree with the labels (judge/verify.py;
             only with a `verify` section; it adds columns to rows, never drops one for its content)
7 check      every problem ends as rows or a rejection with a reason, or the shard is not written

This module alone knows the order. The stages import records (prm_synth/records/), never each other; each
returns what it kept, what it rejected and its counters (`StageResult`), and stages 4-6 are folded over
the rows in `judge_onwards`; `ShardStats` gathers the counters. A row the judge or the verifier could not
read at all is left open (LEFT_OPEN_REASONS): the shard is written, and the next run finishes that row alone
from its payload (shard/open_rows.py); a shard where most of them are unreadable fails the run after it
is written (`check_judges_readable`). A shard written already is planned, merged and written again by
shard/rewrite.py. Judge and verify share one contract (their input rows unchanged, copies returned; a
section without its engine is a config error) and one request loop (judge/ask.py).
Plain Python: the Prefect flow (flows/synthesize.py) only schedules shards and writes them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

from prm_synth.annotate.jobs import ProgressCallback
from prm_synth.annotate.result import Progress, quiet
from prm_synth.config import PINNED, ConfigError, PipelineConfig
from prm_synth.engines.base import Engine
from prm_synth.grading.doubt import doubts_of
from prm_synth.judge.ask import Drawn
from prm_synth.judge.consensus import apply_consensus
from prm_synth.judge.readable import (  # the error and its message are read here too (flows, tests)
    UnreadableJudgeError,  # noqa: F401
    check_readable,
    unreadable_message,  # noqa: F401
)
from prm_synth.judge.selection import judge_stage
from prm_synth.judge.verify import verify_records
from prm_synth.problems.sources import iter_problems
from prm_synth.problems.vetting import vetted
from prm_synth.records import (
    ConsensusStats,
    Item,
    JudgeStats,
    LabeledRecord,
    Problem,
    RejectedRecord,
    ShardStats,
    VerifyStats,
)
from prm_synth.records.canaries import CanaryStats
from prm_synth.records.stage import StageResult
from prm_synth.sampling.votes import pseudo_gold
from prm_synth.shard.audit import AuditRun, audit_shard, certifying
from prm_synth.shard.canaries import run_canaries
from prm_synth.shard.given import label_shard


@dataclass
class ShardInput:
    index: int
    items: list[Item]


@dataclass
class ShardOutput:
    records: list[LabeledRecord] = field(default_factory=list)
    rejected: list[RejectedRecord] = field(default_factory=list)
    stats: ShardStats = field(default_factory=ShardStats)
    trees: dict[str, Any] = field(default_factory=dict)  # problem id -> OmegaPRM tree (node-link JSON)
    canaries: list[dict[str, Any]] = field(default_factory=list)  # written apart (OUT/canaries/), never data


def iter_shards(config: PipelineConfig, limit: int | None = None) -> Iterator[ShardInput]:
    """Cut the problem stream into shards of `output.shard_size` source rows, lazily."""
    items: Iterable[Item] = iter_problems(config.problems, gold_optional=config.grader.kind == "majority")
    items = vetted(items, config.grader)  # a problem its grader could never grade right is rejected at load
    if limit is not None:
        items = islice(items, limit)
    it = iter(items)
    index = 0
    while chunk := list(islice(it, config.output.shard_size)):
        yield ShardInput(index, chunk)
        index += 1


def process_shard(
    engine: Engine,
    config: PipelineConfig,
    shard: ShardInput,
    fingerprint: str,
    judge_engine: Engine | None = None,
    progress: Progress = quiet,
    on_progress: ProgressCallback | None = None,
    verify_engine: Engine | None = None,
    audit: AuditRun | None = None,
) -> ShardOutput:
    config, clock = certifying(config, audit), Clock()  # the keep rule as earlier shards' audit left it
    problems = [it for it in shard.items if isinstance(it, Problem)]
    load_rejected = [it for it in shard.items if isinstance(it, RejectedRecord)]
    majority = None
    if config.grader.kind == "majority":  # no gold: the policy's own majority answer is the gold
        majority = pseudo_gold(engine, problems, config)
        problems, load_rejected = majority.problems, load_rejected + majority.rejected

    # given solutions (problems.kind solutions) skip sampling; what follows runs as for sampled ones
    shard_labeled = label_shard(engine, config, fingerprint, shard.items, problems, progress, on_progress)
    problems, labeled = shard_labeled.problems, shard_labeled.labeled
    sampled = labeled.sampled
    clock.lap("sample_and_label")
    # before the judge: what the canaries measure is what the judge's accuracy is read from
    canaries = run_canaries(engine, judge_engine, config, labeled.records, problems, shard.index)
    clock.lap("canaries")
    # a pseudo-gold may be wrong where no rollout can see it: the judge weighs that (grading/majority.py)
    doubt = doubts_of(config.grader, labeled.records, problems, majority.audit) if majority is not None else None
    tail = judge_onwards(
        config,
        labeled.records,
        judge_engine,
        verify_engine,
        clock,
        canaries=canaries.stats,
        doubt=doubt,
        known=canaries.drawn,  # the clean controls' votes: the judge's own for those rows, not asked again
    )
    records, judge_stats, consensus_stats, verify_stats = tail.records, tail.judge, tail.consensus, tail.verify

    rejected = load_rejected + sampled.rejected + labeled.rejected + tail.rejected
    for r in rejected:
        r.config_fingerprint = fingerprint
    with_rows = check_nothing_lost(problems, records, rejected)
    sched = labeled.stats
    stats = ShardStats(
        inputs=len(shard.items),
        # under majority the ones with a pseudo-gold (reconciles as before); given: the solutions loaded
        problems_loaded=shard_labeled.loaded,
        problems_labeled=with_rows,
        solutions_sampled=sampled.completions,
        rows=len(records),
        rejected=len(rejected),
        rejected_by_reason=dict(Counter(r.reason for r in rejected)),
        final_correct=sum(1 for r in records if r.final_correct),
        final_unknown=sum(1 for r in records if r.final_correct is None),
        rollouts=sched.rollouts,
        unknown_rollouts=sched.unknown_rollouts,
        requests_refused=sched.requests_refused
        + (judge_stats.refused if judge_stats else 0)
        + (verify_stats.refused if verify_stats else 0),
        engine_calls=sched.engine_calls,
        probes_asked=sched.probes_asked,
        probes_reused=sched.probes_reused,
        sampling_tokens=sampled.tokens,
        rollout_tokens=sched.generated_tokens + sched.prompt_tokens,
        judge_tokens=judge_stats.tokens if judge_stats else 0,
        seconds=clock.laps,
        judge=judge_stats,
        consensus=consensus_stats,
        verify=verify_stats,
        majority=majority.audit.to_counts() if majority is not None else {},
        canaries=asdict(canaries.stats) if canaries.stats else {},
        audit=audit_shard(config, records, tail.predicted, shard.index, judge_engine, audit, canaries),
    )
    if majority is not None:
        stats.sampling_tokens += majority.tokens
    return ShardOutput(records, rejected, stats, labeled.trees, canaries.rows)


@dataclass
class Tail:
    """What the stages after labeling made of some rows: kept rows, rejections, each stage's counters."""

    records: list[LabeledRecord]
    rejected: list[RejectedRecord]
    judge: JudgeStats | None = None
    consensus: ConsensusStats | None = None
    verify: VerifyStats | None = None
    predicted: dict[str, dict[str, float]] = field(default_factory=dict)  # the posterior's, a kept row


def judge_onwards(
    config: PipelineConfig,
    records: list[LabeledRecord],
    judge_engine: Engine | None,
    verify_engine: Engine | None,
    clock: Clock,
    verify_only: list[LabeledRecord] | None = None,
    canaries: CanaryStats | None = None,
    asked_before: Mapping[str, int] | None = None,
    doubt: Mapping[str, tuple[float, float]] | None = None,
    known: Mapping[str, Mapping[int, Drawn]] | None = None,
) -> Tail:
    """Judge, consensus and verify (each where the config has it) on labeled rows; `verify_only`: rows
    that passed consensus in an earlier run and only need verifying again (`finish_open_rows`); with
    those alone, judge and consensus do not run. `asked_before`: runs that already asked a row (by id);
    `known`: judge samples already drawn for a row's prompt (by id), served instead of asked."""
    asked_before = asked_before or {}
    judging = bool(records) or verify_only is None
    predicted: dict[str, dict[str, float]] = {}  # each kept row's expected right labels (the audit's, shard/audit.py)

    def judge(rows: list[LabeledRecord]) -> StageResult[LabeledRecord, Any]:
        assert config.judge is not None
        return judge_stage(
            _engine_for("judge", judge_engine),
            rows,
            config.judge,
            config.consensus,
            config.run.max_batch_requests,
            canaries=canaries,
            # a row asked on earlier runs starts at the first sample index those runs did not use
            first_samples=[asked_before.get(r.id, 0) * config.judge.samples for r in rows],
            doubt=doubt,
            known=known,
        )

    def consensus(rows: list[LabeledRecord]) -> StageResult[LabeledRecord, Any]:
        pinned = config.judge.skip_confidence if config.judge is not None else PINNED  # accuracy.py
        return apply_consensus(
            rows,
            config.consensus,
            config.labels.min_confidence,
            pinned,
            canaries=canaries,
            doubt=doubt,
            predicted=predicted,
        )

    def verify(rows: list[LabeledRecord]) -> StageResult[LabeledRecord, Any]:
        assert config.verify is not None
        engine = _engine_for("verify", verify_engine)
        rows = rows + list(verify_only or [])  # rows an earlier run's consensus kept join here
        firsts = [asked_before.get(r.id, 0) * config.verify.votes for r in rows]
        return verify_records(engine, rows, config.verify, config.run.max_batch_requests, firsts)

    # (name, the stage or None where the config has none, timed even when it does not run)
    stages: list[tuple[str, Callable[[list[LabeledRecord]], StageResult[LabeledRecord, Any]] | None, bool]] = [
        ("judge", judge if config.judge is not None and judging else None, True),
        ("consensus", consensus if config.consensus and judging else None, True),
        ("verify", verify if config.verify is not None else None, False),
    ]
    rows, rejected, counters = records, [], {}
    for name, stage, always_timed in stages:
        if stage is None:
            if name == "verify":  # no verify stage: rows kept by an earlier run's consensus are kept as they are
                rows = rows + list(verify_only or [])
            if always_timed:
                clock.lap(name)
            continue
        result = stage(rows)
        rows, counters[name] = result.kept, result.counters
        rejected += result.rejected
        clock.lap(name)
    return Tail(rows, rejected, counters.get("judge"), counters.get("consensus"), counters.get("verify"), predicted)


def check_judges_readable(
    out: ShardOutput, judge_engine: Engine | None, verify_engine: Engine | None, earlier: ShardStats | None = None
) -> None:
    """`UnreadableJudgeError` when most of the shard's votes or chains could not be read (judge/readable.py)."""
    check_readable(out.stats, out.rejected, judge_engine, verify_engine, earlier)


def _engine_for(stage: str, engine: Engine | None) -> Engine:
    """A stage the config asks for runs on its engine; none given is a config error, never a skipped stage
    (rows would silently lack what the config promises)."""
    if engine is None:
        raise ConfigError(f"the config has a {stage} section, but no {stage} engine was given")
    return engine


def check_nothing_lost(problems: list[Problem], records: list[LabeledRecord], rejected: list[RejectedRecord]) -> int:
    """Every loaded problem has labeled rows or a rejected row with a reason; returns how many have rows."""
    with_rows = {r.problem_id for r in records}
    with_reason = {r.problem_id for r in rejected}
    lost = [p.id for p in problems if p.id not in with_rows and p.id not in with_reason]
    if lost:  # a bug, never a data problem: refuse to write a shard that silently dropped problems
        raise RuntimeError(f"{len(lost)} problem(s) ended with neither rows nor a rejection: {lost[:5]}")
    return sum(1 for p in problems if p.id in with_rows)


class Clock:
    """Seconds per stage, measured between laps."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = now - self._last
        self._last = now
