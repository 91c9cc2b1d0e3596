"""One shard of problems in, labeled records and rejected records out: the library's main job.

load ─▶ sample ─▶ label ─▶ judge ─▶ consensus ─▶ verify ─▶ check

1 load       the shard's source rows: problems, and rows the loader already rejected (problems.py)
2 sample     solutions from the policy, split and graded (sample.py; per-question labelers skip it)
3 label      the method's annotators behind the probe scheduler (annotate/labeler.py); sampling goes
             through the same scheduler, so a problem's annotators start as soon as its solutions are
             back and the engine never drains between the two
4 judge      an LLM judge names each row's first error (judge.py; only with a `judge` section)
5 consensus  keep the rows the rollouts and the judge support, completing their labels (consensus.py);
             then audit a sample of the kept ones, never changing them (audit.py: `estimated_precision`)
6 verify     verification chains for the kept rows, kept where they agree with the labels (verify.py;
             only with a `verify` section; it adds columns to rows, never drops one for its content)
7 check      every problem ends as rows or a rejection with a reason, or the shard is not written

Each stage returns what it kept, what it rejected and its counters; `ShardStats` gathers them. A row the judge
or the verifier could not read at all is left open (LEFT_OPEN_REASONS): the shard is written, and the next run
finishes that row alone from its payload (`finish_open_rows`); a shard where most of them are unreadable fails
the run after it is written (`check_judges_readable`). Judge and verify share one contract (their input rows
unchanged, copies returned; a section without its engine is a config error) and one request loop (judge.ask).
Plain Python: the Prefect flow (flows/synthesize.py) only schedules shards and writes them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

from prm_synth.annotate.jobs import ProgressCallback
from prm_synth.annotate.labeler import make_labeler
from prm_synth.annotate.result import Progress, quiet
from prm_synth.config import PINNED, ConfigError, PipelineConfig
from prm_synth.engines.base import Engine, EngineError, RunStopped
from prm_synth.engines.stream import STOPPING
from prm_synth.grading.doubt import doubts_of
from prm_synth.judge.audit import AuditRun, audit_shard, certifying
from prm_synth.judge.canaries import run_canaries
from prm_synth.judge.consensus import apply_consensus, record_from_payload
from prm_synth.judge.readable import (  # the error and its message are read here too (flows, tests)
    UnreadableJudgeError,  # noqa: F401
    check_readable,
    unreadable_message,  # noqa: F401
)
from prm_synth.judge.selection import judge_stage
from prm_synth.judge.verify import verify_records
from prm_synth.problems.sources import iter_problems
from prm_synth.sampling.votes import pseudo_gold
from prm_synth.schema import (
    ConsensusStats,
    Item,
    JudgeStats,
    LabeledRecord,
    Problem,
    RejectedRecord,
    ShardStats,
    VerifyStats,
)
from prm_synth.store.canary_counts import CanaryStats
from prm_synth.store.layout import ShardEntry
from prm_synth.store.left_open import OPEN_FOR_GOOD
from prm_synth.store.refusals import (
    clear_pending,
    count_open,
    count_refusals,
    make_open_permanent,
    make_permanent,
    pending_refusals,
    reasons_of,
    save_pending,
)
from prm_synth.store.resume import servers
from prm_synth.store.shards import ShardStore


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
    config, clock = certifying(config, audit), _Clock()  # the keep rule as earlier shards' audit left it
    problems = [it for it in shard.items if isinstance(it, Problem)]
    load_rejected = [it for it in shard.items if isinstance(it, RejectedRecord)]
    majority = None
    if config.grader.kind == "majority":  # no gold: the policy's own majority answer is the gold
        majority = pseudo_gold(engine, problems, config)
        problems, load_rejected = majority.problems, load_rejected + majority.rejected

    labeled = make_labeler(config, fingerprint).label(engine, problems, progress, on_progress)
    sampled = labeled.sampled
    clock.lap("sample_and_label")
    # before the judge: what the canaries measure is what the judge's accuracy is read from
    canaries = run_canaries(engine, judge_engine, config, labeled.records, problems, shard.index)
    clock.lap("canaries")
    # a pseudo-gold may be wrong where no rollout can see it: the judge weighs that (grading/majority.py)
    doubt = doubts_of(config.grader, labeled.records, problems, majority.audit) if majority is not None else None
    tail = judge_onwards(
        config, labeled.records, judge_engine, verify_engine, clock, canaries=canaries.stats, doubt=doubt
    )
    records, judge_stats, consensus_stats, verify_stats = tail.records, tail.judge, tail.consensus, tail.verify

    rejected = load_rejected + sampled.rejected + labeled.rejected + tail.rejected
    for r in rejected:
        r.config_fingerprint = fingerprint
    with_rows = check_nothing_lost(problems, records, rejected)
    sched = labeled.stats
    stats = ShardStats(
        inputs=len(shard.items),
        problems_loaded=len(problems),  # under majority the ones with a pseudo-gold (reconciles as before)
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
    clock: _Clock,
    verify_only: list[LabeledRecord] | None = None,
    canaries: CanaryStats | None = None,
    asked_before: Mapping[str, int] | None = None,
    doubt: Mapping[str, tuple[float, float]] | None = None,
) -> Tail:
    """Judge, consensus and verify (each where the config has it) on labeled rows; `verify_only`: rows
    that passed consensus in an earlier run and only need verifying again (`finish_open_rows`); with
    those alone, judge and consensus do not run. `asked_before`: runs that already asked a row (by id)."""
    asked_before = asked_before or {}
    judging = bool(records) or verify_only is None
    judged, judge_rejected, judge_stats = (
        judge_stage(
            _engine_for("judge", judge_engine),
            records,
            config.judge,
            config.consensus,
            config.run.max_batch_requests,
            canaries=canaries,
            # a row asked on earlier runs starts at the first sample index those runs did not use
            first_samples=[(asked_before or {}).get(r.id, 0) * config.judge.samples for r in records],
            doubt=doubt,
        )
        if config.judge is not None and judging
        else (records, [], None)
    )
    clock.lap("judge")
    pinned, predicted = config.judge.skip_confidence if config.judge is not None else PINNED, {}  # accuracy.py
    kept, consensus_rejected, consensus_stats = (
        apply_consensus(judged, config.consensus, config.labels.min_confidence, pinned, canaries, doubt, predicted)
        if config.consensus and judging
        else (judged, [], None)
    )
    clock.lap("consensus")
    kept = kept + list(verify_only or [])
    verify_rejected: list[RejectedRecord] = []
    verify_stats: VerifyStats | None = None
    if config.verify is not None:
        engine_for_verify = _engine_for("verify", verify_engine)
        firsts = [asked_before.get(r.id, 0) * config.verify.votes for r in kept]
        kept, verify_rejected, verify_stats = verify_records(
            engine_for_verify, kept, config.verify, config.run.max_batch_requests, firsts
        )
        clock.lap("verify")
    rejected = judge_rejected + consensus_rejected + verify_rejected
    return Tail(kept, rejected, judge_stats, consensus_stats, verify_stats, predicted)


def finish_open_rows(
    config: PipelineConfig,
    rows: list[dict[str, Any]],
    fingerprint: str,
    judge_engine: Engine | None = None,
    verify_engine: Engine | None = None,
    canaries: CanaryStats | None = None,
    asked_before: Mapping[str, int] | None = None,
) -> ShardOutput:
    """Rows an earlier run left open because its judge or verifier could not be read (rejected rows with
    a reason in LEFT_OPEN_REASONS, or LEFT_OPEN_FOR_GOOD on request): a `judge_unreadable` row goes
    through judge, consensus and verify again from its labeled payload, a `verify_unreadable` one through
    verify. Nothing is sampled or rolled out again: the rollouts' labels were kept in the payload.
    `asked_before`: on how many runs each row (by id) was asked already (1 where not said): its samples
    start past theirs, so a judge that honours seeds does not repeat the answer it could not read."""
    clock = _Clock()
    stage_of = {"judge_unreadable": "judge", "verify_unreadable": "verify"}
    stage_of |= {OPEN_FOR_GOOD[r]: stage for r, stage in stage_of.items()}
    to_judge = [record_from_payload(r["payload"]) for r in rows if stage_of.get(r["reason"]) == "judge"]
    to_verify = [record_from_payload(r["payload"]) for r in rows if stage_of.get(r["reason"]) == "verify"]
    runs = {str(r["id"]): (asked_before or {}).get(str(r["id"]), 1) for r in rows}
    # read under what the shard's own canaries measured, as its other rows were
    tail = judge_onwards(
        config,
        to_judge,
        judge_engine,
        verify_engine,
        clock,
        verify_only=to_verify,
        canaries=canaries,
        asked_before=runs,
    )
    for r in tail.rejected:
        r.config_fingerprint = fingerprint
    ended = {r.id for r in tail.records} | {r.id for r in tail.rejected}
    lost = [r["id"] for r in rows if r["id"] not in ended]
    if lost:  # a bug, never a data problem (see check_nothing_lost)
        raise RuntimeError(f"{len(lost)} row(s) left open ended with neither a row nor a rejection: {lost[:5]}")
    stats = ShardStats(
        rows=len(tail.records),
        rejected=len(tail.rejected),
        rejected_by_reason=dict(Counter(r.reason for r in tail.rejected)),
        requests_refused=(tail.judge.refused if tail.judge else 0) + (tail.verify.refused if tail.verify else 0),
        judge_tokens=tail.judge.tokens if tail.judge else 0,
        seconds=clock.laps,
        judge=tail.judge,
        consensus=tail.consensus,
        verify=tail.verify,
    )
    return ShardOutput(tail.records, tail.rejected, stats)


def combine(first: ShardOutput, second: ShardOutput) -> ShardOutput:
    """Two outputs of one shard's attempt (its refused problems redone, its open rows finished) as one."""
    return ShardOutput(
        first.records + second.records,
        first.rejected + second.rejected,
        first.stats + second.stats,
        first.trees | second.trees,
    )


def check_judges_readable(
    out: ShardOutput, judge_engine: Engine | None, verify_engine: Engine | None, earlier: ShardStats | None = None
) -> None:
    """`UnreadableJudgeError` when most of the shard's votes or chains could not be read (judge/readable.py)."""
    check_readable(out.stats, out.rejected, judge_engine, verify_engine, earlier)


@dataclass
class ShardRows:
    """A shard as it is written: row dicts, rejected row dicts, stats, trees."""

    records: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    stats: ShardStats
    trees: dict[str, Any] = field(default_factory=dict)
    canaries: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, out: ShardOutput) -> ShardRows:
        rows, rejected = [r.to_row() for r in out.records], [r.to_row() for r in out.rejected]
        return cls(rows, rejected, out.stats, out.trees, out.canaries)


def redo_items(items: list[Item], redo: set[str]) -> list[Item]:
    """The problems of a shard to ask the engine again (those it refused before)."""
    return [it for it in items if isinstance(it, Problem) and it.id in redo]


def merge_redo(
    previous: ShardRows, redo: set[str], out: ShardOutput, reopened: frozenset[str] = frozenset()
) -> ShardRows:
    """The shard already written, its refused problems replaced by what a new attempt made of them, and
    its rows left open (`reopened`: their ids) replaced by what `finish_open_rows` made of them.

    Rows and rejections of the other problems are kept as they were. Counts (rows, rejections by reason,
    problems labeled, final answers) are those of the merged rows; what was spent (rollouts, tokens,
    requests, seconds) is the sum of both attempts: the first attempt's requests were paid for too."""
    kept = [r for r in previous.records if r.get("problem_id") not in redo]
    kept_rejected = [r for r in previous.rejected if r.get("problem_id") not in redo and r.get("id") not in reopened]
    new = ShardRows.of(out)
    records, rejected = kept + new.records, kept_rejected + new.rejected
    stats = previous.stats + out.stats
    stats.inputs, stats.problems_loaded = previous.stats.inputs, previous.stats.problems_loaded
    stats.rows, stats.rejected = len(records), len(rejected)
    stats.rejected_by_reason = dict(Counter(r["reason"] for r in rejected))
    stats.problems_labeled = len({r["problem_id"] for r in records})
    stats.final_correct = sum(1 for r in records if r.get("final_correct") is True)
    stats.final_unknown = sum(1 for r in records if r.get("final_correct") is None)
    trees = {k: v for k, v in previous.trees.items() if k not in redo} | new.trees
    return ShardRows(records, rejected, stats, trees, previous.canaries + new.canaries)  # earlier canaries stay


class ShardRefusedError(EngineError):
    """The engine refused every request of a shard: it made nothing, so it is a failure, not a result.

    Nothing of the shard is written; the next run of the same command redoes it (after the server is
    fixed). Retrying it at once cannot help: the server refuses what is asked, not a moment."""


def check_not_all_refused(records: list[Any], rejected: list[Any]) -> None:
    """Raise `ShardRefusedError`, naming the engine's (the server's) words, when a shard made no row and
    everything it rejected (beyond what the loader rejected) was refused by the engine.

    Rows and rejections may be records or row dicts (a shard merged with the one already written)."""
    if records:
        return

    def field_of(r: Any, name: str) -> Any:
        return r.get(name) if isinstance(r, dict) else getattr(r, name)

    made = [r for r in rejected if field_of(r, "stage") != "load"]
    if not made or any(field_of(r, "reason") != "engine_refused" for r in made):
        return
    reason = field_of(made[0], "detail") or "no reason given"
    problems = len({field_of(r, "problem_id") for r in made})
    raise ShardRefusedError(
        f"the engine refused every request ({problems} problem(s), no row made): {reason}; fix the server "
        "(or the config) and run the same command again: refused problems are redone"
    )


# ------------------------------------------------------------------ a shard written again
@dataclass
class ShardWork:
    """What a run asks of one shard (`plan_shard`): the problems to label (`items`), the rows left open
    last time to finish (`open_rows`), and the shard as written already (`previous`, None: a new shard)."""

    items: list[Item]
    open_rows: list[dict[str, Any]] = field(default_factory=list)
    previous: ShardRows | None = None
    source_rows: int = 0  # the shard's source rows (what the written shard says it was made from)
    previous_refusals: dict[str, int] = field(default_factory=dict)
    redo: set[str] = field(default_factory=set)
    # rows left open (judge or verifier unreadable), by id: on how many runs in a row (1 where not said)
    previous_unreadable: dict[str, int] = field(default_factory=dict)


def plan_shard(
    store: ShardStore, shard_index: int, items: list[Item], redo: Iterable[str] = (), reopen: Iterable[str] = ()
) -> ShardWork | None:
    """The work of one shard. `redo`: the shard is written already, and only these problems (the ones the
    engine refused last time) are asked again; `reopen`: the ids of its rows left open because the judge
    or verifier could not be read, finished from their payloads; the rest of the shard is kept as it was.
    None: the shard changed on disk since the run looked (nothing to merge into: the next run redoes it)."""
    redone, reopened = set(redo), set(reopen)
    if not (redone or reopened):
        return ShardWork(items, source_rows=len(items))
    entry = store.finished_shard(shard_index)
    if entry is None:
        return None
    previous = ShardRows(
        store.read_rows(entry, "data"),
        store.read_rows(entry, "rejected"),
        entry.stats,
        store.read_trees(entry),
        store.read_canaries(entry),  # kept as planted: a resumed shard keeps its canaries
    )
    # A row left open whose problem is redone whole (refused elsewhere) is made again with it.
    open_rows = [r for r in previous.rejected if r.get("id") in reopened and r.get("problem_id") not in redone]
    unreadable = {row_id: 1 for row_id in reopened} | entry.unreadable
    return ShardWork(redo_items(items, redone), open_rows, previous, entry.problems, entry.refusals, redone, unreadable)


def write_shard_rows(
    store: ShardStore, config: PipelineConfig, shard_index: int, work: ShardWork, out: ShardOutput
) -> ShardEntry:
    """Write what a run made of a shard's work: merged into the shard as written (`merge_redo`), refused
    problems counted (rejected for good after `run.refused_runs` runs in a row), and the shard refused
    whole where the engine refused everything it was asked (`check_not_all_refused`: nothing written)."""
    reopened = frozenset(r["id"] for r in work.open_rows)
    rows = merge_redo(work.previous, work.redo, out, reopened) if work.previous is not None else ShardRows.of(out)
    asked = work.redo if work.previous is not None else None  # None: the whole shard was asked
    # a shard refused whole on earlier runs was not written: its counts waited apart (store/refusals.py)
    previous_refusals = (
        work.previous_refusals if work.previous is not None else pending_refusals(store.root, shard_index)
    )
    refusals = count_refusals(rows.rejected, asked, previous_refusals)
    rejected, _ = make_permanent(rows.rejected, refusals, config.run.refused_runs)
    try:  # nothing made and everything refused (not yet for good): a failure, not a finished shard
        check_not_all_refused(rows.records, rejected)
    except ShardRefusedError:
        save_pending(store.root, shard_index, refusals)
        raise
    # Rows the judge (or verifier) could not read, the same way: recorded for good after as many runs.
    made = {r.id for r in out.records} | {r.id for r in out.rejected}  # the rows this attempt asked
    unreadable = count_open(rejected, made, work.previous_unreadable)
    rejected, _ = make_open_permanent(rejected, unreadable, config.run.refused_runs)
    if rejected != rows.rejected:
        rows.stats.rejected_by_reason = reasons_of(rejected)
    if STOPPING.is_set():  # a stop is a stop: no shard is written after it (the next run redoes this one)
        raise RunStopped("the run is stopping: the shard is not written")
    entry = store.write_shard(
        shard_index,
        rows.records,
        rejected,
        problems=work.source_rows,
        stats=rows.stats,
        trees=rows.trees,
        canaries=rows.canaries,
        servers=servers(config),
        refusals=refusals,
        unreadable=unreadable,
    )
    clear_pending(store.root, shard_index)
    return entry


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


class _Clock:
    """Seconds per stage, measured between laps."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = now - self._last
        self._last = now
