"""What the terminal shows while a run works: a bar that fits 80 columns, with log lines above it.

The bar has one line for the run and one per shard in flight, each updated in place. Its text column
takes what the terminal leaves and is cut with an ellipsis; the bar, the percentage and the elapsed
time keep their width, so the percentage is never cut off.

While the bar is live, every console log handler (Prefect's, vLLM's, any plain stream handler) writes
through the bar's console (a finished line is printed above the bar) instead of
gluing its text onto the bar's line; and the shards' progress log lines, which the bar shows in place, are left out of the console
(they still reach the Prefect server). Everything is put back when the bar stops.
"""

from __future__ import annotations

import io
import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from rich.ansi import AnsiDecoder
from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text

# Set on a log record (logging's `extra`) whose content a live bar already shows.
PROGRESS_LINE = "prm_synth_progress_line"
# A shard's progress log line at most this often (seconds): the server's log, not a ticker.
PROGRESS_LOG_INTERVAL_S = 30.0


def progress_line_extra() -> dict[str, Any]:
    """`extra=` for a log call whose line the live bar shows in place."""
    return {PROGRESS_LINE: True}


def throttled(log: Callable[[str], None], every_s: float = PROGRESS_LOG_INTERVAL_S) -> Callable[[str], None]:
    """`log`, passed on at most once every `every_s` seconds (the first after `every_s`): a shard that
    labels in seconds logs no progress at all, a slow one a line now and then instead of ten at once."""
    last = time.monotonic()

    def maybe_log(message: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            log(message)

    return maybe_log


def bar_columns() -> tuple[ProgressColumn, ...]:
    return (
        TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
        BarColumn(bar_width=12),
        TaskProgressColumn(),
        TimeElapsedColumn(),
    )


def new_bar(console: Console | None = None) -> Progress:
    """A bar on stderr (stdout is for results: the summary, --json), as wide as the terminal."""
    return Progress(*bar_columns(), console=console or Console(stderr=True), expand=True, transient=False)


class _NotProgressLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, PROGRESS_LINE, False)


def _console_stream(stream: Any) -> bool:
    """The terminal: sys.stderr or sys.stdout, or the original streams where they still are a terminal (a
    quiet run points the original stderr at its log file: prm_synth.cli.quiet)."""
    if stream is None:
        return False
    if stream is sys.stderr or stream is sys.stdout:
        return True
    if stream is sys.__stderr__ or stream is sys.__stdout__:
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            return False
    return False


def _console_handlers() -> list[logging.Handler]:
    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    seen: dict[int, logging.Handler] = {}
    for logger in loggers:
        for handler in logger.handlers:
            stream = getattr(handler, "stream", None)
            if _console_stream(stream) or hasattr(handler, "console"):
                seen.setdefault(id(handler), handler)
    return list(seen.values())


class LinesAboveTheBar(io.TextIOBase):
    """A text stream whose finished lines `console` (a live bar's) prints above the bar, colours kept.

    rich's own FileProxy does this for sys.stdout/stderr, but a rich Console given a FileProxy as its
    file writes around it (to the proxied file), which is why Prefect's handler needs this one."""

    def __init__(self, console: Console, original: IO[str]) -> None:
        self.console, self.original = console, original
        self._partial = ""
        self._decoder = AnsiDecoder()

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            self.console.print(Text("\n").join(self._decoder.decode_line(line) for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self.write("\n")

    def isatty(self) -> bool:
        return self.original.isatty()


class LogsAboveTheBar:
    """Route the console log handlers through `console` (the live bar's) until `restore()`."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._filter = _NotProgressLines()
        self._undo: list[Callable[[], None]] = []

    def start(self) -> None:
        for handler in _console_handlers():
            handler.addFilter(self._filter)
            self._undo.append(lambda h=handler: h.removeFilter(self._filter))
            own = getattr(handler, "console", None)
            if isinstance(own, Console):  # Prefect's handler renders with rich (its own styles and markup)
                previous = own.file
                own.file = LinesAboveTheBar(self.console, previous)
                self._undo.append(lambda c=own, f=previous: setattr(c, "file", f))
            elif isinstance(handler, logging.StreamHandler):
                try:
                    stream = handler.setStream(LinesAboveTheBar(self.console, handler.stream))
                except AttributeError:  # a stream it looks up on each write (logging.lastResort): sys.stderr,
                    continue  # which the live bar itself redirects above the bar
                self._undo.append(lambda h=handler, s=stream: h.setStream(s))

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()
