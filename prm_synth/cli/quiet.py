"""A quiet console for `prm-synth run`: what the libraries print goes to a log file, the run's own lines stay.

A run on vLLM printed hundreds of lines that are not the run's: vLLM's WARNINGs (from this process and from
its engine and worker processes), torch's FutureWarnings and C++ warnings, tqdm bars, "force killing
remaining processes" at shutdown, the resource tracker's leaked-shared-memory warning. They come through
every door: Python logging, the `warnings` module, and writes to file descriptor 2 by child processes and
C code. So the worker (unless `--verbose`):
- points file descriptor 2 at the log file: every child process, C library and stream bound to the
  original stderr (`sys.__stderr__`, vLLM's handler: VLLM_LOGGING_STREAM) writes there from now on;
- keeps the terminal as `sys.stderr` (a copy of the original descriptor): the command's own lines (the
  progress bar, `error:` lines, "stopping...") are written at call time to `sys.stderr`;
- lets through a console log handler only the records of the run's own loggers (prm_synth, flows,
  Prefect's flow and task run loggers, which carry the shards' warnings); every other record goes to the
  log file; Python warnings go there too (logging.captureWarnings), and library progress bars are off
  (TQDM_DISABLE).
Set up after Prefect is imported (its console handler is then bound to the original stderr: found and
filtered here) and before vLLM is: its handler then binds to the file.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

# The loggers whose records are the run's own: shown on the console (at the levels they are set to).
OWN_LOGGERS = ("prm_synth", "flows", "prefect.flow_runs", "prefect.task_runs", "__main__")
LOG_FOLDER = "logs"
LOG_NAME = "run.log"
VLLM_STREAM_ENV = "VLLM_LOGGING_STREAM"


def log_path_for(out_dir: Path, dry_run: bool) -> Path:
    """OUT/logs/run.log (appended, one header a run); a dry run, which writes nothing into OUT, logs to a
    temporary file."""
    if dry_run:
        fd, name = tempfile.mkstemp(prefix="prm-synth-dry-run-", suffix=".log")
        os.close(fd)
        return Path(name)
    return out_dir / LOG_FOLDER / LOG_NAME


HEADER = "==== prm-synth run"


def said_anything(log_path: Path) -> bool:
    """Whether this run's part of the log (after its header) holds a line."""
    try:
        with log_path.open("rb") as f:
            f.seek(max(0, log_path.stat().st_size - 65536))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return False
    return bool(tail.rpartition(HEADER)[2].partition("\n")[2].strip())


def _own(name: str) -> bool:
    return any(name == own or name.startswith(own + ".") for own in OWN_LOGGERS)


class _OnlyOwnRecords(logging.Filter):
    """On a console handler: the run's own records pass; any other goes to the log file instead."""

    def __init__(self, log_handler: logging.Handler) -> None:
        super().__init__()
        self.log_handler = log_handler

    def filter(self, record: logging.LogRecord) -> bool:
        if _own(record.name):
            return True
        if record.levelno >= self.log_handler.level:
            self.log_handler.handle(record)
        return False


def _console_handlers(original: IO[str]) -> list[logging.Handler]:
    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    found: dict[int, logging.Handler] = {}
    for logger in loggers:
        for handler in logger.handlers:
            console = getattr(handler, "console", None)
            streams = (getattr(handler, "stream", None), getattr(console, "file", None))
            if any(s is original or s is sys.__stderr__ for s in streams):
                found.setdefault(id(handler), handler)
    return list(found.values())


def quiet_console(log_path: Path) -> Path:
    """Send what the libraries print to `log_path` from now on (see the module docstring); returns it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    original = sys.stderr
    with contextlib.suppress(AttributeError, ValueError, OSError):
        original.flush()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(log_fd, f"\n{HEADER}, {time.strftime('%Y-%m-%d %H:%M:%S')} (pid {os.getpid()})\n".encode())
    terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    os.dup2(log_fd, 2)
    os.close(log_fd)
    log_stream = sys.__stderr__ if sys.__stderr__ is not None else open(log_path, "a", buffering=1)  # noqa: SIM115
    file_handler = logging.StreamHandler(log_stream)
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    found = _console_handlers(original)
    root_handlers = logging.getLogger().handlers
    for handler in found:
        handler.addFilter(_OnlyOwnRecords(file_handler))
        console = getattr(handler, "console", None)
        if console is not None and getattr(console, "file", None) in (original, sys.__stderr__):
            console.file = terminal  # Prefect's handler renders with rich into its console's file
        elif isinstance(handler, logging.StreamHandler):
            handler.setStream(terminal)
    if not any(h in root_handlers for h in found):  # nothing prints the root's records: Python's last resort would
        own_only = logging.StreamHandler(terminal)  # (to sys.stderr, the terminal): the run's own records only
        own_only.addFilter(_OnlyOwnRecords(file_handler))
        logging.getLogger().addHandler(own_only)
    sys.stderr = terminal
    if os.environ.get(VLLM_STREAM_ENV) in (None, "ext://sys.stderr"):  # vLLM, here and in its processes: the file
        os.environ[VLLM_STREAM_ENV] = "ext://sys.__stderr__"
    logging.captureWarnings(True)  # `warnings` to the "py.warnings" logger: to the file, as not the run's
    warnings_logger = logging.getLogger("py.warnings")
    warnings_logger.addHandler(file_handler)
    warnings_logger.propagate = False
    _bars_to_the_log()
    return log_path


def _bars_to_the_log() -> None:
    """Library progress bars (model loading, dataset files): off where tqdm is imported from now on (and in
    child processes); where it was imported already (its settings read), a bar without a file of its own
    writes to the log file, not to `sys.stderr` (the terminal)."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    std = sys.modules.get("tqdm.std")
    if std is None or getattr(std.tqdm.__init__, "prm_synth_quiet", False):
        return
    init = std.tqdm.__init__
    file_position = 4  # tqdm(iterable, desc, total, leave, file, ...)

    @functools.wraps(init)
    def quiet_init(self: object, *args: object, **kwargs: object) -> None:
        if len(args) <= file_position and kwargs.get("file") is None:
            kwargs["file"] = sys.__stderr__
        init(self, *args, **kwargs)

    quiet_init.prm_synth_quiet = True  # type: ignore[attr-defined]
    std.tqdm.__init__ = quiet_init
