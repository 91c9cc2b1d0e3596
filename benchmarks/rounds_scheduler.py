"""The probe scheduler's former `rounds` mode, kept as a benchmark instrument (run_efficiency.py).

Rounds gather every pending probe, send them as one batch, wait for all of it, and resume everyone:
each round waits for its slowest rollout. That is the public `ProbeScheduler` on the engine seen
through its blocking `generate` alone (`prm_synth.engines.stream.RoundBased`): the stream then sends
what was asked as one call and waits for all of it. So the two modes are measured on the same
scheduler, estimates, grading and spend accounting; only how the engine is fed differs.
"""

from __future__ import annotations

from typing import Any

from prm_synth.annotate.scheduler import ProbeScheduler
from prm_synth.engines.base import Engine
from prm_synth.engines.stream import RoundBased


def rounds_scheduler(engine: Engine, *args: Any, **kwargs: Any) -> ProbeScheduler:
    """A ProbeScheduler that drives its annotators in rounds; the arguments are ProbeScheduler's."""
    return ProbeScheduler(RoundBased(engine), *args, **kwargs)
