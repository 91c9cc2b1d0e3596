"""The same config gives the same rows at any `run.max_in_flight`, with a real engine: the demo model
in vLLM in process. Each sample carries a seed of its own (engines/base.py `sample_seed`), so how many
annotators run at once, and so what shares a batch, does not change what is sampled."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from prm_synth.config import validate_config
from prm_synth.pipeline import iter_shards, process_shard

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = 2


def _rows(engine, max_in_flight: int) -> list[dict]:
    data = yaml.safe_load((ROOT / "pipelines" / "demo.yaml").read_text())
    data["run"] = data.get("run", {}) | {"max_in_flight": max_in_flight}
    config = validate_config(data)
    shard = next(iter_shards(config, limit=PROBLEMS))
    out = process_shard(engine, config, shard, config.fingerprint())
    return [r.to_row() for r in out.records] + [r.to_row() for r in out.rejected]


@pytest.mark.slow
def test_demo_rows_are_identical_at_max_in_flight_1_and_64(demo_vllm_engine):
    """On the session's shared demo engine (tests/conftest.py): demo.yaml's policy is that engine's config."""
    from prm_synth.config import VLLMConfig

    data = yaml.safe_load((ROOT / "pipelines" / "demo.yaml").read_text())
    assert VLLMConfig(**data["policy"]) == demo_vllm_engine.config
    one, many = _rows(demo_vllm_engine, 1), _rows(demo_vllm_engine, 64)
    assert len(one) >= PROBLEMS
    assert sum(r.get("rollouts") or 0 for r in one) > 0  # rollouts were sampled, not only solutions
    assert one == many
