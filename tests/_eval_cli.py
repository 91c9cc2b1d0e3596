"""The `eval` commands on a Typer app of their own, and the small ProcessBench file they are tried on (the
evaluation and verifier tests)."""

from __future__ import annotations

from pathlib import Path

import typer

from prm_synth.cli.eval import register

BENCH = Path(__file__).parent / "fixtures" / "processbench_small.json"


def cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:  # a group, so `eval` stays a sub-command as in the real CLI
        pass

    register(app)
    return app
