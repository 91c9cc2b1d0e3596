"""Problems stream through shard by shard: memory does not grow with the number of problems."""

from __future__ import annotations

import gc
import tracemalloc

from prm_synth.config import validate_config
from prm_synth.engines.simulated import SimulatedPolicy
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.shards import ShardStore


def test_memory_is_flat_across_shards(tmp_path):
    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": 1500, "min_ops": 3, "max_ops": 8},
            "policy": {"kind": "simulated"},
            "sampling": {"samples_per_problem": 1},
            "annotate": {"method": "binary"},
            "output": {"shard_size": 25},
        }
    )
    engine = SimulatedPolicy(config.policy)
    store = ShardStore(tmp_path, "f")
    store.prepare({}, "")
    tracemalloc.start()
    marks = {}
    for shard in iter_shards(config):
        out = process_shard(engine, config, shard, "f")
        store.write_shard(shard.index, [r.to_row() for r in out.records], [], len(shard.items), out.stats)
        del out
        if shard.index in (10, 59):
            gc.collect()
            marks[shard.index] = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    growth = marks[59] - marks[10]
    # 49 more shards wrote ~1,225 rows (megabytes of Python objects if anything kept them).
    assert growth < 1_500_000, f"memory grew by {growth / 1e6:.1f} MB over 49 shards"
