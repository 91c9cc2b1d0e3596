"""The synthesis flow: one Prefect task per shard of problems; the work lives in prm_synth.pipeline.

Shards are submitted through a bounded window, so memory holds at most `run.max_parallel_shards`
shards whatever the dataset size. Finished shards (by manifest marker) are skipped: a re-run of the
same config redoes only what is missing. A failing shard does not stop the others; the flow ends
failed and names the failed shards.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import yaml
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from prm_synth.config import PipelineConfig
from prm_synth.engines import get_engine
from prm_synth.pipeline import Item, ShardInput, iter_shards, process_shard
from prm_synth.shards import ShardStore
from prm_synth.summary import summarize


@task(
    name="label-shard",
    task_run_name="shard-{shard_index}",
    retries=2,
    retry_delay_seconds=[2, 10],
    # Resume is the manifest's job; the engine handle is never part of a cache key.
    cache_policy=NO_CACHE,
)
def label_shard(config: PipelineConfig, out_dir: str, shard_index: int, items: list[Item]) -> dict[str, Any]:
    fingerprint = config.fingerprint()
    engine = get_engine(config.policy)
    judge_engine = get_engine(config.judge.engine) if config.judge else None
    out = process_shard(engine, config, ShardInput(shard_index, items), fingerprint, judge_engine)
    entry = ShardStore(out_dir, fingerprint).write_shard(
        shard_index,
        [r.to_row() for r in out.records],
        [r.to_row() for r in out.rejected],
        problems=len(items),
        stats=out.stats,
    )
    return entry.to_json()


@flow(name="prm-synth-synthesize", log_prints=True)
def synthesize(
    config: PipelineConfig,
    out_dir: str,
    limit: int | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Label every problem of `config` into `out_dir`, resuming whatever a previous run finished."""
    logger = get_run_logger()
    started = time.time()
    fingerprint = config.fingerprint()
    store = ShardStore(out_dir, fingerprint)
    config_dump = config.model_dump(mode="json")
    store.prepare(config_dump, yaml.safe_dump(config_dump, sort_keys=False), overwrite=overwrite)
    finished = store.finished()
    if finished:
        logger.info("resuming: %d shard(s) already finished in %s", len(finished), out_dir)

    window: deque[tuple[int, PrefectFuture[dict[str, Any]]]] = deque()
    failed: dict[int, str] = {}
    done = skipped = 0

    def drain_one() -> None:
        nonlocal done
        index, future = window.popleft()
        try:
            entry = future.result()
            done += 1
            logger.info("shard %d finished: %d rows, %d rejected", index, entry["rows"], entry["rejected"])
        except Exception as e:  # noqa: BLE001 - a failed shard must not stop the others
            failed[index] = f"{type(e).__name__}: {e}"
            logger.error("shard %d failed: %s", index, failed[index])

    for shard in iter_shards(config, limit):
        entry = finished.get(shard.index)
        # A shard cut short by an earlier --limit holds fewer problems than now: it is redone.
        if entry is not None and entry.problems == len(shard.items):
            skipped += 1
            continue
        if len(window) >= config.run.max_parallel_shards:
            drain_one()
        window.append((shard.index, label_shard.submit(config, out_dir, shard.index, shard.items)))
    while window:
        drain_one()

    store.write_manifest(config_dump)
    summary = summarize(out_dir) | {
        "wall_seconds": round(time.time() - started, 3),
        "shards_run": done,
        "shards_skipped": skipped,
        "shards_failed": sorted(failed),
    }
    if failed:
        details = "; ".join(f"shard {i}: {msg}" for i, msg in sorted(failed.items()))
        raise RuntimeError(f"{len(failed)} shard(s) failed and will be redone on the next run: {details}")
    return summary
