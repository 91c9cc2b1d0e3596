"""A resume with nothing left to do, answered without Prefect.

`prm-synth run` on a folder whose every shard is finished would start Prefect's temporary API server
(about 9 s, longer on a busy machine) only for the flow to skip each shard. This reads the same
markers the flow reads and, when no shard needs work, gives the folder's summary at once. Any doubt
(another config in the manifest, a shard missing, cut short by an earlier --limit, refused problems or
rows left open to ask again) leaves the decision to the flow, which does the work.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prm_synth.config import PipelineConfig
    from prm_synth.store.summary import RunSummary


def nothing_left(config: PipelineConfig, out_dir: Path, limit: int | None, retry_refused: bool) -> RunSummary | None:
    """The summary of `out_dir` when a run of `config` would label nothing there, else None."""
    from prm_synth.store.limit import keeps_finished, kept_past_limit
    from prm_synth.store.readers import read_manifest
    from prm_synth.store.resume import run_fingerprint
    from prm_synth.store.shards import DatasetError, ShardStore
    from prm_synth.store.summary import RunFacts, summarize

    started = time.time()
    try:
        manifest = read_manifest(out_dir)
    except (DatasetError, FileNotFoundError):
        return None  # a new folder, or one whose manifest is damaged: the flow rebuilds it
    # The flow rewrites the manifest with the config it runs: where that would change it (another
    # `run` section, a moved server), the flow must run to record it.
    if manifest.get("config") != config.model_dump(mode="json"):
        return None
    store = ShardStore(out_dir, run_fingerprint(config, out_dir), config.labeler_revision())
    if manifest.get("config_fingerprint") != store.fingerprint:
        return None
    store.lock()  # a run writing the folder now: refused here, as the flow would refuse it
    try:
        finished = store.finished()
        shards = 0
        for index, size in enumerate(_shard_sizes(config, limit)):
            entry = finished.get(index)
            if entry is None or not keeps_finished(entry, size):
                return None
            cut = entry.problems > size  # cut by this run's --limit: kept as it is, open rows and all
            if not cut and (store.refused_problems(entry, permanent=retry_refused) or store.open_rows(entry)):
                return None
            shards += 1
        if shards == 0:
            return None  # an empty source: the flow says so
        summary = summarize(out_dir)
        kept = kept_past_limit(finished.values(), limit, config.output.shard_size)
    finally:
        store.release()
    summary.run = RunFacts(
        started_at=started,
        wall_seconds=round(time.time() - started, 3),
        shards_run=0,
        shards_skipped=shards,
        shards_failed=[],
        requests_retried=0,
        dry_run=False,
        kept_past_limit=kept,
    )
    return summary


def _shard_sizes(config: PipelineConfig, limit: int | None) -> Iterator[int]:
    """The source rows of each shard, cut as `prm_synth.pipeline.iter_shards` cuts them (shards of
    `output.shard_size` source rows of the first `limit`), without importing the labelers it brings
    (a second of imports, most of what this answer would cost)."""
    from prm_synth.problems.sources import iter_problems

    items = iter(iter_problems(config.problems))
    left = limit
    while left is None or left > 0:
        size = sum(
            1 for _ in islice(items, config.output.shard_size if left is None else min(left, config.output.shard_size))
        )
        if size == 0:
            return
        yield size
        left = None if left is None else left - size
