"""A finished run written the way the flow writes it (pipeline + shard store, no Prefect): fast, so a
test can make a real simulated dataset of its own. And the small pipeline the tests run against fake
servers (tests/fault_proxy.py), with the flow's call to run it again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from prm_synth.config import SimulatedPolicyConfig, validate_config
from prm_synth.engines import build_engine
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.store.shards import ShardStore

ROOT = Path(__file__).resolve().parents[1]


# Per-step MC (Math-Shepherd), what pipelines/simulated.yaml ran before it showed the default labeler.
MC_ANNOTATE = {"method": "mc", "k": 8}


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


SMALL_PROBLEMS = {"kind": "builtin", "count": 4, "seed": 0, "min_ops": 2, "max_ops": 3}


def small_problems() -> list[Any]:
    """SMALL_PROBLEMS as a run loads them."""
    from prm_synth.problems.sources import iter_problems

    return list(iter_problems(validate_config({"problems": SMALL_PROBLEMS, "policy": {"kind": "simulated"}}).problems))


def served_policy() -> SimulatedPolicyConfig:
    """The simulated policy behind the fake servers: some wrong steps, one step a line."""
    return SimulatedPolicyConfig(step_error=0.2, seed=0, step_format="line")


def openai_policy(url: str, **fields: Any) -> dict[str, Any]:
    """The policy section of a run against the OpenAI-compatible server at `url` (its model: `simulated`)."""
    return {"kind": "openai", "model": "simulated", "base_url": f"{url}/v1"} | fields


def small_pipeline(folder: Path, name: str, policy: dict[str, Any], **sections: Any) -> str:
    """A small run (4 builtin problems, 2 samples each, line steps, MC with k=2, shards of 2: 8 rows in 2
    shards) with this policy and `sections` added or replaced, written to folder/pipeline.yaml; its path."""
    data = {
        "name": name,
        "problems": SMALL_PROBLEMS,
        "policy": policy,
        "sampling": {"samples_per_problem": 2},
        "steps": {"strategy": "line"},
        "annotate": {"method": "mc", "k": 2},
        "output": {"shard_size": 2},
    } | sections
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run_again(path: str, out: str) -> Any:
    """The same command once more, as the flow that `prm-synth run` calls (its summary)."""
    import flows.synthesize
    from prm_synth.config import load_config

    return flows.synthesize.synthesize(config=load_config(path), out_dir=out)
