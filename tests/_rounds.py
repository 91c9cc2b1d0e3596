"""The scheduler's former `rounds` mode (benchmarks/rounds_scheduler.py), made from the public parts
the benchmark uses, for the tests that hold it to the same answers as the stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prm_synth.annotate.scheduler import ProbeScheduler
from prm_synth.engines.stream import RoundBased


def RoundsScheduler(engine: Any, *args: Any, **kwargs: Any) -> ProbeScheduler:  # noqa: N802 - used like a class
    return ProbeScheduler(RoundBased(engine), *args, **kwargs)


SCHEDULERS: dict[str, Callable[..., ProbeScheduler]] = {"stream": ProbeScheduler, "rounds": RoundsScheduler}
