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
# Prefect's log line when a run stops on KeyboardInterrupt (prefect.states.exception_to_crashed_state).
INTERRUPT_CRASH = "Crash detected! Execution was aborted by an interrupt signal"
# Prefect's log line when a flow run raises (prefect.flow_engine): the exception follows it.
FLOW_FAILED = "Encountered exception during execution"

VLLM_LEVEL_ENV = "VLLM_LOGGING_LEVEL"
QUIET_VLLM_LEVEL = "WARNING"
PREFECT_LEVEL_ENV = "PREFECT_LOGGING_LEVEL"
QUIET_PREFECT_LEVEL = "WARNING"

DEFAULTS = {
    # No network here or in CI: neither Prefect's server nor its client may phone home, and the
    # first run must not print a telemetry notice. (DO_NOT_TRACK=0 from the user keeps it on.)
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    STARTUP_TIMEOUT_ENV: str(STARTUP_TIMEOUT_S),
    # vLLM logs to stdout by default; stdout is for results (the summary, --json), logs go to stderr.
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    # vLLM's INFO lines (engine arguments, memory profiling, every worker's start) bury the run's own
    # progress: only its warnings and errors, unless --verbose (or the user's own setting).
    VLLM_LEVEL_ENV: QUIET_VLLM_LEVEL,
    # Prefect's INFO lines (its temporary server, every task run's state, a docs link) are not what a
    # user runs the command for: the summary says what happened. --verbose brings them back.
    PREFECT_LEVEL_ENV: QUIET_PREFECT_LEVEL,
}


def prepare_environment() -> None:
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)


def verbose_engines() -> None:
    """--verbose: vLLM's and Prefect's INFO logs too (a level the user set stays). Before either is imported."""
    if os.environ.get(VLLM_LEVEL_ENV) == QUIET_VLLM_LEVEL:
        os.environ[VLLM_LEVEL_ENV] = "INFO"
    if os.environ.get(PREFECT_LEVEL_ENV) == QUIET_PREFECT_LEVEL:
        os.environ[PREFECT_LEVEL_ENV] = "INFO"


class _NoTracebackFor(logging.Filter):
    """Keeps the log line of an expected failure (bad input, failed shards) and drops its traceback:
    the command prints a one-line error for it, a traceback above that line only hides it."""

    def __init__(self, expected: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.expected = expected

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, self.expected):
            if record.name == "prefect.flow_runs" and record.getMessage().startswith(FLOW_FAILED):
                return False  # the flow's own failure: the command's `error:` line says the same, last
            record.exc_info = None
            record.exc_text = None
        return True


class _NoRetryChatter(logging.Filter):
    """huggingface_hub logs two lines a retry of a Hub request (about 12 when the Hub cannot be reached,
    each printed twice through Prefect's handler): the run's one `error:` line says what failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


class _CalmInterrupt(logging.Filter):
    """Prefect logs a stop by Ctrl-C or SIGTERM as "Crash detected! ..." at ERROR; for `prm-synth run`
    it is the user's own request, which the command answers itself: one INFO line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.getMessage().startswith(INTERRUPT_CRASH):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = "stopped by an interrupt (Ctrl-C or SIGTERM)", ()
        return True


CALM_INTERRUPT = _CalmInterrupt()  # one instance: adding it twice to a logger is a no-op


def quiet_expected_failures() -> None:
    """Drop Prefect's tracebacks of the failures `prm-synth run` reports in one line itself."""
    from prm_synth.errors import PrmSynthError

    # PrmSynthError: ours on purpose (a server that does not answer, failed shards, a bad source); its
    # message says so. OSError: a full or failing disk; the command names the file. MemoryError: said in
    # one line too. Anything else is a bug, and keeps its traceback.
    expected = (PrmSynthError, KeyboardInterrupt, OSError, MemoryError)
    quiet = _NoTracebackFor(expected)
    logging.getLogger("huggingface_hub.utils._http").addFilter(_NoRetryChatter())
    for name in ("prefect.flow_runs", "prefect.task_runs", "prefect.flow_engine", "prefect.task_engine"):
        logging.getLogger(name).addFilter(quiet)
        logging.getLogger(name).addFilter(CALM_INTERRUPT)
