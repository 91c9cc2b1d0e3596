"""`prm-synth run` as a thin parent over a worker child, so that stopping the command stops everything.

The parent validates the input (fast, before Prefect is imported), then runs the same command line
again in a worker child with its own process group (see `prm_synth.lifeline` for why). SIGINT and
SIGTERM reach the parent (Ctrl-C goes to the terminal's foreground group, which the worker is not
in); the parent asks the worker to stop once, a second signal kills the group at once. When the
worker has exited, whatever is left of its group (Prefect's temporary server, vLLM's processes) is
terminated, so the command leaves no process behind.

The worker, on SIGINT/SIGTERM, says "stopping..." at once and stops in a thread of its own (the
handler never waits on an engine, and never raises into the flow): it releases every thread waiting on
an engine, cancels the engines' requests in flight and pending retries (engines.stop_engines), shuts the
engines down within a deadline, says the one `error:` line and exits 130 without waiting for the flow;
finished shards are kept (each written whole or not at all) and the next run resumes. The flow is not
asked to end itself: its end goes through Prefect's API (the flow run's final state), and a stop of
every process at once (systemd, a container runtime, `kill -TERM -- -PGID`) takes Prefect's temporary
server down with it; waiting for that API cost minutes of retries and ended in a traceback. For the same
reason Prefect's own SIGTERM handler (`capture_sigterm`) is not installed in the worker: a SIGTERM sent
to the worker itself is ours. Losing the temporary server alone (killed, crashed) stops the run the same
way, with an error line naming the server (`watch_prefect_server`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
    """In the worker: die with the parent, start the watchdog, stop on SIGINT/SIGTERM (`begin_stop`),
    and on the loss of Prefect's temporary server."""
    parent = int(os.environ[WORKER_ENV])
    lifeline.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(EXIT_INTERRUPTED)
    lifeline.start_watchdog(parent)
    from prm_synth.store.lock import name_lock_owner

    name_lock_owner(parent)  # a second run is told the command's pid, the one a user can stop
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _interrupt)
    _own_sigterm()
    threading.Thread(target=watch_prefect_server, name="prm-synth-server-watch", daemon=True).start()


def _own_sigterm() -> None:
    """Keep Prefect's flow engine from taking the worker's SIGTERM handler while the flow runs (its
    handler ends the flow through the API, which a stop of every process has taken down too)."""
    import prefect.flow_engine

    @contextlib.contextmanager
    def keep_ours() -> Iterator[None]:
        yield

    prefect.flow_engine.capture_sigterm = keep_ours  # type: ignore[attr-defined]


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    # Stop only once: a second signal while the engine shuts down must not interrupt the shutdown. Not
    # SIG_IGN: a signal already on its way when the handler changes (the command's forwarded stop and the
    # worker's own SIGTERM, sent at once) would then raise "Signal 15 ignored due to race condition".
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _already_stopping)
    name = signal.SIGTERM.name if signum == STOP_SIGNAL else signal.Signals(signum).name
    begin_stop(name)


def _already_stopping(_signum: int, _frame: FrameType | None) -> None:
    """A signal after the first: the stop is under way."""


# Set once the worker stops (a signal, the server lost): nothing else it prints or raises matters then.
STOPPING = threading.Event()
# Set once the flow has returned or failed: Prefect stops its temporary server itself from then on.
RUN_OVER = threading.Event()
INTERRUPTED = "interrupted; finished shards are kept, run the same command again to resume"


def begin_stop(signal_name: str, message: str = INTERRUPTED) -> None:
    """Stop the worker once, in a thread of its own (module doc): never waits, never raises."""
    if STOPPING.is_set():
        return
    STOPPING.set()
    announce_stop(signal_name)
    threading.Thread(target=_stop_and_exit, args=(signal_name, message), name="prm-synth-stop", daemon=True).start()


def _stop_and_exit(signal_name: str, message: str) -> None:
    from prm_synth.engines import close_engines, stop_engines

    stop_engines(f"the run is stopping ({signal_name})")
    clean = stop_within(close_engines)
    with contextlib.suppress(Exception):
        sys.stderr.write(
            f"error: {message}" + ("" if clean else " (the engine did not stop in time and was killed)") + "\n"
        )
    exit_now(EXIT_INTERRUPTED)


def hold_if_stopping() -> None:
    """In a worker that is stopping, the thread that calls this waits for the stop to end the process:
    what it was about to say (a failure the stop caused) would be a second error line."""
    while STOPPING.is_set():
        time.sleep(1.0)


SERVER_POLL_S = 0.2


def watch_prefect_server() -> None:
    """Stop the run when Prefect's temporary API server (started by this worker) ends before the run:
    every later call to it would fail, after minutes of retries, as a crash of the flow."""
    seen: dict[int, tuple[str, subprocess.Popen[bytes]]] = {}
    while not RUN_OVER.is_set() and not STOPPING.is_set():
        module = sys.modules.get("prefect.server.api.server")
        for server in list(getattr(getattr(module, "SubprocessASGIServer", None), "_instances", {}).values()):
            process = getattr(server, "server_process", None)
            if process is not None:
                seen.setdefault(process.pid, (str(getattr(server, "address", "")), process))
        for pid, (address, process) in seen.items():
            code = process.poll()
            if code is None:
                continue
            time.sleep(0.5)  # a stop of every process at once: the worker's own signal says it better
            if RUN_OVER.is_set() or STOPPING.is_set():
                return
            how = (
                f"killed by {signal.Signals(-code).name}"
                if -code in signal.Signals._value2member_map_
                else f"exit {code}"
            )
            begin_stop(
                "the Prefect server stopped",
                f"Prefect's temporary API server ({address}, pid {pid}) stopped during the run ({how}); "
                "finished shards are kept, run the same command again to resume",
            )
            return
        time.sleep(SERVER_POLL_S)


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
