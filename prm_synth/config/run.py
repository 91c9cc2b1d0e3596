"""What is written with a shard (`output`) and how a run is executed (`run`, left out of the fingerprint)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from prm_synth.config.base import Strict


class OutputConfig(Strict):
    shard_size: int = Field(64, ge=1, le=1_000_000)
    """Problems per shard (one Prefect task each, the unit of resume and retry)."""
    save_trees: bool = False
    """OmegaPRM: write each question's tree (JSON node-link) with its shard."""


class RunConfig(Strict):
    """How a run is executed; none of it changes the rows, so the fingerprint leaves `run` out."""

    HASHED: ClassVar[bool] = False

    max_parallel_shards: int = Field(2, ge=1)
    """Shard tasks in flight (bounds memory)."""
    max_batch_requests: int = Field(256, ge=1)
    """Requests per engine call (sampling, rollouts, judge)."""
    max_in_flight: int = Field(64, ge=1)
    """Solutions (or questions) whose annotators run concurrently."""
    gpu_concurrency_limit: str | None = None
    """Name of a Prefect global concurrency limit (one slot per GPU) each shard task holds a slot of."""
    ray_num_gpus: float | None = Field(None, ge=0)
    """GPUs a shard task asks Ray for (None: from the engine)."""
    stall_warning_s: float = Field(300.0, ge=0)
    """Requests in the engine, none finished or entered for this long: a warning naming what the run waits
    on (repeated at most this often while it lasts); 0 turns it off."""
    shard_retry_delays_s: list[Annotated[float, Field(ge=0)]] = Field([2.0, 10.0], min_length=2, max_length=2)
    """The waits (seconds) before a failed shard's two retries; a shard whose every request was refused
    is not retried at once."""
    refused_runs: int = Field(3, ge=1, le=1000)
    """A problem the engine refused on this many consecutive runs of the same folder is rejected for good
    (reason `engine_refused_permanent`) and not asked again; `prm-synth run --retry-refused` asks such
    problems once more. A refusal says nothing about the problem until it repeats: a server down to a
    short context refuses long prompts today and takes them tomorrow. A row whose judge (or verifier)
    answers could not be read on this many runs is recorded for good the same way
    (`judge_unreadable_permanent`, `verify_unreadable_permanent`)."""
