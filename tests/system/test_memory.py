"""Problems stream through shard by shard: memory does not grow with the number of problems."""

from __future__ import annotations

import gc
import sys

from prm_synth.config import validate_config
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.simulated.engines import SimulatedPolicy
from prm_synth.store.shards import ShardStore

SHARD_SIZE = 25
WARM_UP, MEASURED = 4, 16  # shards before the first mark (caches fill up), shards between the marks
# Measured on this test (blocks over the 16 measured shards): ~4,000 when nothing is kept (slow
# bookkeeping growth), ~21,000 when each shard's records are kept (~1,300 blocks a shard of 25 rows).
# The bound is 500 blocks a shard: keeping even half of every shard's records crosses it.
GROWTH_BOUND = 500 * MEASURED


def test_memory_is_flat_across_shards(tmp_path):
    """The live Python objects (`sys.getallocatedblocks` after a full collection: no tracing, so the run is
    as fast as without the check) do not grow with the shards done: a trend, measured between a mark after
    the warm-up and one 16 shards (400 problems) later."""
    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": SHARD_SIZE * (WARM_UP + MEASURED), "min_ops": 3, "max_ops": 8},
            "policy": {"kind": "simulated"},
            "sampling": {"samples_per_problem": 1},
            "annotate": {"method": "binary"},
            "output": {"shard_size": SHARD_SIZE},
        }
    )
    engine = SimulatedPolicy(config.policy)
    store = ShardStore(tmp_path, "f")
    store.prepare({}, "")
    marks = {}
    for shard in iter_shards(config):
        out = process_shard(engine, config, shard, "f")
        store.write_shard(shard.index, [r.to_row() for r in out.records], [], len(shard.items), out.stats)
        del out
        if shard.index in (WARM_UP - 1, WARM_UP + MEASURED - 1):
            gc.collect()
            marks[shard.index] = sys.getallocatedblocks()
    assert sorted(marks) == [WARM_UP - 1, WARM_UP + MEASURED - 1], "the run did not reach both marks"
    growth = marks[WARM_UP + MEASURED - 1] - marks[WARM_UP - 1]
    assert growth < GROWTH_BOUND, f"{growth} more live blocks after {MEASURED} more shards"
