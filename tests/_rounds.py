"""The scheduler's former `rounds` mode, a benchmark instrument (benchmarks/rounds_scheduler.py), for the
tests that hold it to the same answers as the stream."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from prm_synth.annotate.scheduler import ProbeScheduler

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "rounds_scheduler.py"
_spec = importlib.util.spec_from_file_location("rounds_scheduler", _PATH)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
sys.modules["rounds_scheduler"] = _module
_spec.loader.exec_module(_module)

RoundsScheduler: type[ProbeScheduler] = _module.RoundsScheduler
SCHEDULERS: dict[str, type[ProbeScheduler]] = {"stream": ProbeScheduler, "rounds": RoundsScheduler}
