"""prm-synth: synthesize step-level training data for process reward models."""

import os

# The labeler's array work is many small matrix products (the change-point posterior's states are
# 6 x 18 x 23). Multithreaded OpenBLAS makes each of them wait on its threads: on a busy machine a
# [50, 138] x [138, 512] product took 22 ms with its default threads and 0.2 ms with one
# (benchmarks/labeler_cost.py). Labeling is parallel across shards and processes, not inside a
# product, so numpy's OpenBLAS gets one thread unless the user set otherwise; it takes effect when
# prm_synth is imported before numpy (the CLI, the flows). Torch's own thread pool is not touched.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"

# The Python API (prm_synth.api): `prm_synth.run(...)` and `prm_synth.load(...)`, imported on first use so
# that `import prm_synth` stays light (no Prefect, no datasets) for the library's own modules.
_API = ("run", "load")


def __getattr__(name: str) -> object:
    if name in _API:
        import importlib

        return getattr(importlib.import_module("prm_synth.api"), name)
    raise AttributeError(f"module 'prm_synth' has no attribute {name!r}")
