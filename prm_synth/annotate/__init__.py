"""Step annotation: annotators (sequential generators) driven by the batching probe scheduler.

`labeler.make_labeler` picks the method; `mc`, `omega` and the first-error searches of `search.SEARCHES`
(`bisection` for fixed and sprt, the `changepoint` package for the default) are the algorithms,
`protocol` what an annotator and the scheduler say to each other.
"""

from __future__ import annotations

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.protocol import Annotator, Probe, ProbeResult
from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob

__all__ = ["Annotation", "Annotator", "Probe", "ProbeResult", "ProbeScheduler", "SolutionJob"]
