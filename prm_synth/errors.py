"""The one base class of prm-synth's own errors, so a caller (the CLI) catches exactly what is ours.

Each error says what went wrong in words a user can act on, and carries the exit code the command
ends with (`exit_code`): 2 for bad input (a config, a file, an option), 1 for a run or a request that
failed. A bug is never one of these: the commands let anything else through with its traceback and
exit with `EXIT_BUG`, so that a bug is neither mistaken for a user error nor loses where it happened.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_FAILED = 1  # the work failed (an engine, a server, the Hub): what is finished is kept
EXIT_USAGE = 2  # the input is wrong (a config, a file, an option): nothing was done
EXIT_BUG = 70  # sysexits' EX_SOFTWARE: an error that is not ours on purpose, shown with its traceback


class PrmSynthError(Exception):
    """Base of every error prm-synth raises on purpose (bad input, a failed engine, a refused folder)."""

    exit_code: ClassVar[int] = EXIT_FAILED


class PrmSynthInputError(PrmSynthError, ValueError):
    """Bad input: a file, a config or an option the user can fix (exit 2). Still a ValueError, so the
    library code that validated with ValueError before reads it as it did."""

    exit_code: ClassVar[int] = EXIT_USAGE
