"""A finished run written the way the flow writes it (pipeline + shard store, no Prefect): fast, so a
test can make a real simulated dataset of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from prm_synth.config import validate_config
from prm_synth.engines import build_engine
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.shards import ShardStore

ROOT = Path(__file__).resolve().parents[1]


def pipeline_data(name: str = "simulated", **sections: Any) -> dict[str, Any]:
    """A pipeline of pipelines/, with whole sections replaced."""
    return yaml.safe_load((ROOT / "pipelines" / f"{name}.yaml").read_text()) | sections


def write_run(root: Path, data: dict[str, Any], limit: int | None = None) -> Path:
    config = validate_config(data)
    store = ShardStore(root, config.fingerprint())
    store.prepare(config.model_dump(mode="json"), yaml.safe_dump(data))
    policy = build_engine(config.policy)
    judge = build_engine(config.judge.engine) if config.judge else None
    for shard in iter_shards(config, limit):
        out = process_shard(policy, config, shard, config.fingerprint(), judge_engine=judge)
        rows, rejected = [r.to_row() for r in out.records], [r.to_row() for r in out.rejected]
        store.write_shard(shard.index, rows, rejected, len(shard.items), out.stats)
    store.write_manifest()
    return root
