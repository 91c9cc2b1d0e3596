"""A shard written again: what a run asks of a shard already written (`plan_shard`: its refused problems,
its rows left open), how what the run made is merged into it (`merge_redo`), and the write itself, with
refused problems counted and rejected for good after `run.refused_runs` runs (`write_shard_rows`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prm_synth.config import PipelineConfig
from prm_synth.engines.base import EngineError, RunStopped
from prm_synth.engines.stream import STOPPING
from prm_synth.pipeline import ShardOutput
from prm_synth.problems.given import problem_of
from prm_synth.records import Item, ShardStats
from prm_synth.store.layout import ShardEntry
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
    return [it for it in items if problem_of(it) in redo]


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
