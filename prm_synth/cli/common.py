"""What every command shares: one way to fail."""

from __future__ import annotations

from typing import NoReturn

import typer


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error (never a traceback) and exit: 2 for bad input, 1 for a failed run."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
