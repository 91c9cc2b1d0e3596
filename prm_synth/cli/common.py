"""What every command shares: one way to fail, and one way to print text that is not ours."""

from __future__ import annotations

import unicodedata
from typing import NoReturn

import typer

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
    """Print a one-line error (never a traceback) and exit: 2 for bad input, 1 for a failed run."""
    # Our own messages may list several lines (a config's invalid fields); every other control is escaped.
    typer.echo(f"error: {visible(message, keep=chr(10))}", err=True)
    raise typer.Exit(code)
