"""`prm-synth run` as a thin parent over a worker child, so that stopping the command stops everything.

The parent validates the input (fast, before Prefect is imported), then runs the same command line
again in a worker child with its own process group (see `prm_synth.lifeline` for why). SIGINT and
SIGTERM reach the parent (Ctrl-C goes to the terminal's foreground group, which the worker is not
in); the parent asks the worker to stop once, a second signal kills the group at once. When the
worker has exited, whatever is left of its group (Prefect's temporary server, vLLM's processes) is
terminated, so the command leaves no process behind.

The worker, on SIGINT/SIGTERM, says "stopping..." at once, releases every thread waiting on an engine
and cancels the engines' requests in flight and pending retries (engines.stop_engines, in a thread of
its own: the handler never waits on an engine), stops the flow (KeyboardInterrupt in its main thread),
shuts the engines down within a deadline and exits; finished shards are kept and the next run resumes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from types import FrameType

from prm_synth import lifeline

# Set in the worker's environment: the parent's pid. The worker does the work in-process.
WORKER_ENV = "PRM_SYNTH_WORKER"
# Set by the user (or a test harness) to run everything in the command's own process.
IN_PROCESS_ENV = "PRM_SYNTH_IN_PROCESS"
# When the command started (epoch seconds), so the worker's summary counts the whole start-up.
STARTED_AT_ENV = "PRM_SYNTH_STARTED_AT"
# How long a stopping worker may spend shutting its engines down before it exits regardless.
ENGINE_SHUTDOWN_S = 30.0
EXIT_INTERRUPTED = 130
# How the parent passes a SIGTERM (or SIGHUP) on to the worker. Not SIGTERM itself: while a flow runs,
# Prefect owns the worker's SIGTERM handler (`capture_sigterm`), which ends the flow only after every
# shard thread has returned, and calls ours only then (an engine that never answers: minutes).
STOP_SIGNAL = signal.SIGUSR1
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, STOP_SIGNAL)
# The command line of this process when started as `prm-synth` (set by `main`); None under a test
# runner that calls the app in-process, which then runs the work in-process too.
ENTRY_ARGV: list[str] | None = None


def is_worker() -> bool:
    return WORKER_ENV in os.environ


def should_supervise() -> bool:
    return (
        ENTRY_ARGV is not None
        and lifeline.supported()
        and not is_worker()
        and os.environ.get(IN_PROCESS_ENV, "") in ("", "0")
    )


def run_in_worker(argv: list[str], started_at: float) -> int:
    """Run `prm-synth ARGV` in a worker child; return its exit code once nothing of it is left."""
    env = os.environ | {WORKER_ENV: str(os.getpid()), STARTED_AT_ENV: repr(started_at)}
    worker = subprocess.Popen([sys.executable, "-m", "prm_synth.cli", *argv], env=env, process_group=0)
    signals_seen = 0

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen == 1:  # SIGINT as it came (the worker says "Ctrl-C"); SIGTERM and SIGHUP as STOP_SIGNAL
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGINT if signum == signal.SIGINT else STOP_SIGNAL)
        else:  # a second Ctrl-C: the user does not want to wait for a clean stop
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        code = worker.wait()
    finally:
        lifeline.kill_group(worker.pid, grace_s=lifeline.GRACE_S)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code < 0:  # killed by a signal it could not handle (SIGKILL: out of memory, or by hand)
        if not signals_seen:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            print(
                f"error: the run's worker process was killed ({name}); run the same command again to resume",
                file=sys.stderr,
            )
        return 128 - code
    return code


def become_worker() -> None:
    """In the worker: die with the parent, start the watchdog, turn SIGTERM into KeyboardInterrupt."""
    parent = int(os.environ[WORKER_ENV])
    lifeline.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(EXIT_INTERRUPTED)
    lifeline.start_watchdog(parent)
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _interrupt)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    # Stop only once: a second signal while the engine shuts down must not interrupt the shutdown.
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    name = signal.SIGTERM.name if signum == STOP_SIGNAL else signal.Signals(signum).name
    announce_stop(name)
    threading.Thread(target=_stop_engines, args=(name,), name="prm-synth-stop", daemon=True).start()
    raise KeyboardInterrupt(name)


_announced: list[str] = []


def announce_stop(signal_name: str) -> None:
    """Say "stopping (Ctrl-C)..." once, when the stop starts (not when it ends)."""
    if _announced:
        return
    _announced.append(signal_name)
    reason = "Ctrl-C" if signal_name == signal.SIGINT.name else signal_name
    with contextlib.suppress(Exception):  # a closed stream must not turn a stop into a crash
        sys.stderr.write(f"\nstopping ({reason})... cancelling the engine's requests and shutting it down\n")
        sys.stderr.flush()


def _stop_engines(signal_name: str) -> None:
    from prm_synth.engines import stop_engines

    stop_engines(f"the run is stopping ({signal_name})")


def started_at() -> float | None:
    with contextlib.suppress(KeyError, ValueError):
        return float(os.environ[STARTED_AT_ENV])
    return None


def stop_within(cleanup: Callable[[], None], deadline_s: float = ENGINE_SHUTDOWN_S) -> bool:
    """Run `cleanup` (engine shutdown) in a daemon thread, waiting at most `deadline_s`. True if it ended."""
    done = threading.Event()

    def target() -> None:
        try:
            cleanup()
        finally:
            done.set()

    threading.Thread(target=target, name="prm-synth-shutdown", daemon=True).start()
    return done.wait(deadline_s)


def exit_now(code: int) -> None:
    """Exit without waiting for shard threads still blocked in an engine call (the watchdog and the
    parent end the rest of the group); flush what was printed first."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
