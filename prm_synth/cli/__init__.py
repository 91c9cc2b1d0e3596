"""The `prm-synth` command line: run a pipeline, inspect a dataset, prepare the demo model, export, eval.

One room for every command: `run.py` (run, serve, models), `look.py` (inspect, show), `export.py`, `eval.py`; `common.py`
holds what they share. Commands parse arguments and report; the work lives in the library.
"""

from __future__ import annotations

import sys
from typing import Annotated

from prm_synth.cli.environment import prepare_environment

prepare_environment()  # before anything imports Prefect or vLLM: they read it at import

import typer  # noqa: E402

from prm_synth import __version__  # noqa: E402
from prm_synth.cli import eval as eval_commands  # noqa: E402
from prm_synth.cli import export as export_commands  # noqa: E402
from prm_synth.cli import look as look_commands  # noqa: E402
from prm_synth.cli import prm as prm_commands  # noqa: E402
from prm_synth.cli import run as run_commands  # noqa: E402
from prm_synth.cli import supervise  # noqa: E402
from prm_synth.cli.common import fail  # noqa: E402

__all__ = ["app", "fail", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__.split("\n\n")[0])


def _flags_take_no_value() -> None:
    """Typer's help shows an on/off flag with a type, `--private <bool>`, which reads as if it took a value
    (`--private true` is an error): a flag shows none. Typer has no setting for it; its one method is wrapped."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "prm_synth_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: object) -> str | None:
        return None if self.is_flag and not self.count else shown(self, ctx)  # type: ignore[arg-type]

    display_type_rich.prm_synth_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"prm-synth {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Synthesize step-level training data for process reward models."""


run_commands.register(app)
look_commands.register(app)
export_commands.register(app)
eval_commands.register(app)
prm_commands.register(app)


def main() -> None:
    # The command line as typed: `prm-synth run` hands it to its worker child (see supervise.py).
    supervise.ENTRY_ARGV = sys.argv[1:]
    app()
