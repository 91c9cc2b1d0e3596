"""The `prm-synth` command line: run a pipeline, inspect a dataset, prepare the demo model, export, eval.

One room for every command: `run.py` (run, serve, inspect, models), `export.py`, `eval.py`; `common.py`
holds what they share. Commands parse arguments and report; the work lives in the library.
"""

from __future__ import annotations

import os

import typer

# No network here or in CI: Prefect must not try to phone home. Set before Prefect is imported.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# vLLM logs to stdout by default; stdout is for results (the summary, --json), logs go to stderr.
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

from prm_synth.cli import eval as eval_commands  # noqa: E402 - after the environment above
from prm_synth.cli import export as export_commands  # noqa: E402
from prm_synth.cli import prm as prm_commands  # noqa: E402
from prm_synth.cli import run as run_commands  # noqa: E402
from prm_synth.cli.common import fail  # noqa: E402

__all__ = ["app", "fail", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__.split("\n\n")[0])
run_commands.register(app)
export_commands.register(app)
eval_commands.register(app)
prm_commands.register(app)


def main() -> None:
    app()
