"""Step annotation: annotators (sequential generators) driven by the batching probe scheduler."""

from __future__ import annotations

import hashlib

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.mc import per_step_mc
from prm_synth.annotate.scheduler import Annotator, Probe, ProbeResult, ProbeScheduler, SolutionJob
from prm_synth.annotate.search import binary_search
from prm_synth.config import AnnotateConfig

__all__ = ["Annotation", "Annotator", "Probe", "ProbeResult", "ProbeScheduler", "SolutionJob", "make_annotator"]


def _sampled(key: str, share: float) -> bool:
    """A stable pseudo-random choice of `share` of the keys (same choice on every re-run)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share


def make_annotator(config: AnnotateConfig, steps: list[str], final_status: str, key: str = "") -> Annotator[Annotation]:
    """The annotator the config names, for one solution (its steps) with a known verdict."""
    if config.method == "mc":
        return per_step_mc(steps, final_status, config.k, config.stop_at_first_zero)
    if config.method == "binary":
        return binary_search(steps, final_status, config, verify=_sampled(key, config.verify_correct))
    raise ValueError(f"annotate.method {config.method!r} is not available")
