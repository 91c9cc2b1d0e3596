"""The lifeline on its own (no Prefect, no model): a worker group never outlives its worker or command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from prm_synth import lifeline

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not lifeline.supported(), reason="process groups and /proc: Linux only")

# Stand-in processes block until a signal ends them (signal.pause), never for a set time.
WAIT_FOR_A_SIGNAL = "import signal; signal.pause()"
# A stand-in worker: leader of its own group, starts the watchdog and a long-lived child (as Prefect's
# server or vLLM's EngineCore would be), prints their pids, then waits.
WORKER = f"""
import signal, subprocess, sys
from prm_synth import lifeline
watchdog = lifeline.start_watchdog(int(sys.argv[1]), grace_s=1.0)
child = subprocess.Popen([sys.executable, "-c", {WAIT_FOR_A_SIGNAL!r}])
print(watchdog.pid, child.pid, flush=True)
signal.pause()
"""


def wait_for(condition, deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {deadline_s} s")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def start_worker(command_pid: int) -> tuple[subprocess.Popen[str], int, int]:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(command_pid)], env=env, stdout=subprocess.PIPE, text=True, process_group=0
    )
    watchdog, child = (int(x) for x in worker.stdout.readline().split())
    return worker, watchdog, child


def test_sigkill_of_the_worker_ends_its_whole_group():
    worker, watchdog, child = start_worker(os.getpid())
    try:
        assert not gone(child) and lifeline.group_members(worker.pid)
        worker.kill()
        worker.wait()
        wait_for(lambda: gone(child) and gone(watchdog), 60, "the worker's child and watchdog end")
        assert lifeline.group_members(worker.pid) == []
    finally:
        lifeline.kill_group(worker.pid, grace_s=1)


def test_a_gone_command_ends_a_worker_that_does_not_end_itself():
    """The command dies (any way) and the worker ignores it (this stand-in has no parent-death signal):
    after the grace period the watchdog ends the group. A process that waits for a signal stands in for
    the command."""
    command = subprocess.Popen([sys.executable, "-c", WAIT_FOR_A_SIGNAL])
    worker, watchdog, child = start_worker(command.pid)
    try:
        command.kill()
        command.wait()
        wait_for(lambda: gone(worker.pid) and gone(child) and gone(watchdog), 120, "the group ends")
    finally:
        lifeline.kill_group(worker.pid, grace_s=1)
        worker.wait(timeout=30)


def test_kill_group_terminates_then_kills():
    stubborn = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); signal.pause()"
    proc = subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE, text=True, process_group=0)
    proc.stdout.readline()  # its SIGTERM handler is set
    assert lifeline.kill_group(proc.pid, grace_s=0.5) is False
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert lifeline.kill_group(proc.pid, grace_s=0.5) is True  # nothing left
