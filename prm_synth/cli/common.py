"""What every command shares: one way to fail, one way to print text that is not ours, and one guard
that tells our errors (one line) from bugs (their traceback)."""

from __future__ import annotations

import functools
import sys
import traceback
import unicodedata
from collections.abc import Callable
from typing import NoReturn, ParamSpec, TypeVar

import click
import typer

from prm_synth.cli import supervise
from prm_synth.errors import EXIT_BUG, EXIT_FAILED, PrmSynthError

# How a command ends on purpose (typer's and click's exits are RuntimeErrors, not bugs).
_EXITS = (typer.Exit, typer.Abort, click.exceptions.Exit, click.exceptions.Abort, click.ClickException)

P = ParamSpec("P")
R = TypeVar("R")

# Characters that are not text on a terminal: controls (escape sequences start with ESC), format
# characters (bidi overrides that reorder what is shown), lone surrogates, unassigned and private-use
# code points. Model output and server messages are untrusted: such a character is shown as its escape.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def visible(text: object, keep: str = "") -> str:
    """`text` with every control or format character (newlines included, unless in `keep`) shown as a
    Python escape, so what a model or a server wrote can neither drive the terminal nor break a line."""
    out = []
    for ch in str(text):
        if ch not in keep and unicodedata.category(ch) in _INVISIBLE:
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error (never a traceback) and exit: 2 for bad input, 1 for a failed run. In a
    worker that is stopping, the stop says the one line (a failure now is the stop's doing)."""
    supervise.hold_if_stopping()
    # Our own messages may list several lines (a config's invalid fields); every other control is escaped.
    typer.echo(f"error: {visible(message, keep=chr(10))}", err=True)
    raise typer.Exit(code)


def os_error_text(e: OSError) -> str:
    """An OSError as a user reads it: what went wrong and on which file."""
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{where}"


def guarded(command: Callable[P, R]) -> Callable[P, R]:
    """A command that ends in one `error:` line for the errors that are ours on purpose (PrmSynthError,
    with its own exit code) and for the system's (OSError: a missing file, a full disk; exit 1), and
    that shows anything else, a bug, with its whole traceback and exit code EXIT_BUG (70): a bug printed
    as a one-line user error would lose where it happened, and a user would fix their input in vain."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except _EXITS:
            raise  # the command's own exit (typer.Exit is a RuntimeError: it must pass untouched)
        except PrmSynthError as e:
            fail(str(e), code=e.exit_code)
        except OSError as e:
            fail(os_error_text(e), code=EXIT_FAILED)
        except Exception as e:  # noqa: BLE001 - a bug: shown whole, never as a user error
            bug(e)

    return run


def bug(e: BaseException) -> NoReturn:
    """Print `e`'s traceback, then one line saying it is a bug, and exit EXIT_BUG."""
    supervise.hold_if_stopping()  # what fails while the worker stops (its engines, its server) is the stop
    traceback.print_exception(e, file=sys.stderr)
    typer.echo(
        f"error: internal error ({type(e).__name__}), a bug in prm-synth rather than in the input: "
        "the traceback above shows where; please report it with the command that caused it",
        err=True,
    )
    raise typer.Exit(EXIT_BUG)
