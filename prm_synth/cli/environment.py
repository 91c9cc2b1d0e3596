"""The environment every command sets up before Prefect or vLLM is imported (they read it at import)."""

from __future__ import annotations

import logging
import os
import time

COMMAND_STARTED_AT = time.time()

# Prefect's temporary API server takes 10-30 s to start on a busy two-core machine; Prefect's own
# default (20 s) fails there. A user's own setting wins.
STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STARTUP_TIMEOUT_S = 300
EPHEMERAL_TIMEOUT = "Timed out while attempting to connect to ephemeral Prefect API server"

DEFAULTS = {
    # No network here or in CI: neither Prefect's server nor its client may phone home, and the
    # first run must not print a telemetry notice. (DO_NOT_TRACK=0 from the user keeps it on.)
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    STARTUP_TIMEOUT_ENV: str(STARTUP_TIMEOUT_S),
    # vLLM logs to stdout by default; stdout is for results (the summary, --json), logs go to stderr.
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
}


def prepare_environment() -> None:
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)


class _NoTracebackFor(logging.Filter):
    """Keeps the log line of an expected failure (bad input, failed shards) and drops its traceback:
    the command prints a one-line error for it, a traceback above that line only hides it."""

    def __init__(self, expected: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.expected = expected

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, self.expected):
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_expected_failures() -> None:
    """Drop Prefect's tracebacks of the failures `prm-synth run` reports in one line itself."""
    from flows.synthesize import ShardsFailedError
    from prm_synth.engines.base import EngineError
    from prm_synth.problems import ProblemSourceError
    from prm_synth.shards import OutputFolderError

    # EngineError: a server that does not answer, a model that does not load; its message says so.
    expected = (ShardsFailedError, EngineError, ProblemSourceError, OutputFolderError, KeyboardInterrupt)
    quiet = _NoTracebackFor(expected)
    for name in ("prefect.flow_runs", "prefect.task_runs", "prefect.flow_engine", "prefect.task_engine"):
        logging.getLogger(name).addFilter(quiet)
