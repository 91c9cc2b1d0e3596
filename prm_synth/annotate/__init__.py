"""Step annotation: annotators (sequential generators) driven by the batching probe scheduler.

`labeler.make_labeler` picks the method; `mc`, `search` and `omega` are the algorithms.
"""

from __future__ import annotations

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.scheduler import Annotator, Probe, ProbeResult, ProbeScheduler, SolutionJob

__all__ = ["Annotation", "Annotator", "Probe", "ProbeResult", "ProbeScheduler", "SolutionJob"]
