"""Rows an earlier run left open (its judge or verifier could not be read) finished from their payloads,
and what that made joined to what the shard's new attempt made.

Nothing is sampled or rolled out again: the rollouts' labels were kept in the payload, so a left-open row
goes through judge, consensus and verify (`pipeline.judge_onwards`) alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from prm_synth.config import PipelineConfig
from prm_synth.engines.base import Engine
from prm_synth.judge.consensus import record_from_payload
from prm_synth.pipeline import Clock, ShardOutput, judge_onwards
from prm_synth.records import ShardStats
from prm_synth.records.canaries import CanaryStats
from prm_synth.shard.rewrite import ShardWork
from prm_synth.store.left_open import OPEN_FOR_GOOD


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
    clock = Clock()
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


def with_open_rows_finished(
    config: PipelineConfig,
    work: ShardWork,
    out: ShardOutput,
    fingerprint: str,
    judge_engine: Engine | None = None,
    verify_engine: Engine | None = None,
) -> ShardOutput:
    """`out` (what a new attempt made of the shard's problems) with the rows the shard left open last time
    finished (`finish_open_rows`), read under what the shard's own canaries measured, as its other rows were."""
    if not work.open_rows:
        return out
    canaries = CanaryStats.read(work.previous.stats.canaries) if work.previous is not None else None
    finished = finish_open_rows(
        config,
        work.open_rows,
        fingerprint,
        judge_engine,
        verify_engine,
        canaries,
        asked_before=work.previous_unreadable,
    )
    return combine(out, finished)
