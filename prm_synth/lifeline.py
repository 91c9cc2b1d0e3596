"""Processes that cannot outlive the command that started them (Linux).

`prm-synth run` starts Prefect's temporary API server and, with a vLLM policy, vLLM's EngineCore and
Worker processes. None of them watches its parent: killed with SIGKILL, the command used to leave
them running (a model at 100 % CPU, a server for minutes). So the command's work runs in a *worker*
child in its own process group, and three lines of defence keep that group from outliving it:

1. the command forwards SIGINT/SIGTERM to the worker, waits, then kills what is left of the group;
2. the worker asks the kernel for SIGTERM when the command dies (PR_SET_PDEATHSIG), even by SIGKILL;
3. a watchdog process inside the group (`python -m prm_synth.lifeline WORKER_PID COMMAND_PID`) kills
   the whole group when the worker dies in any way, or when the command is gone and the worker has
   not ended itself within the grace period.

Only a process that leaves the group itself (setsid) escapes; Prefect's server and vLLM's processes
do not. SIGKILL of the whole group at once (`kill -9 -PGID`) takes the watchdog along and is handled
by nothing, like any SIGKILL of everything.

This module imports nothing heavy: the watchdog starts in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
POLL_S = 0.2
# How long a stopping group gets between SIGTERM and SIGKILL (vLLM shuts down in a few seconds).
GRACE_S = 20.0


def supported() -> bool:
    """Process groups, /proc and prctl: Linux only. Elsewhere the command runs its work in-process."""
    return sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies. False where not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _pgid_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie is dead; only its parent's wait() is missing
        return None
    return int(fields[2])


def group_members(pgid: int, exclude: set[int] | None = None) -> list[int]:
    """Living processes of a process group (zombies do not count)."""
    skip = exclude or set()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in skip and _pgid_of(int(entry.name)) == pgid:
            pids.append(int(entry.name))
    return pids


def kill_group(pgid: int, grace_s: float = GRACE_S, exclude: set[int] | None = None) -> bool:
    """SIGTERM a process group, wait up to `grace_s` for it to end, then SIGKILL what is left.

    Returns True if the group was already empty. The caller may be a member (the watchdog): it is
    spared by `exclude` while waiting, and dies with the final SIGKILL.
    """
    if not group_members(pgid, exclude):
        return True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_members(pgid, exclude):
        time.sleep(POLL_S)
    if group_members(pgid, exclude):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return False


def _alive(pid: int) -> bool:
    return _pgid_of(pid) is not None


def start_watchdog(command_pid: int, grace_s: float = GRACE_S) -> subprocess.Popen[bytes]:
    """Start the watchdog for this process (the worker, leader of its own process group)."""
    return subprocess.Popen(
        [sys.executable, "-m", "prm_synth.lifeline", str(os.getpid()), str(command_pid), repr(grace_s)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        close_fds=True,
    )


def watch(worker_pid: int, command_pid: int, grace_s: float = GRACE_S) -> None:
    """Wait until the worker dies, or the command dies and the worker outlives it by `grace_s`;
    then kill the worker's process group (this watchdog with it)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the group's SIGTERM is for the others; we end it
    pgid = os.getpgid(0)
    command_gone_at: float | None = None
    while os.getppid() == worker_pid:  # re-parented: the worker is gone
        if command_gone_at is None and not _alive(command_pid):
            command_gone_at = time.monotonic()
        if command_gone_at is not None and time.monotonic() - command_gone_at > grace_s:
            break
        time.sleep(POLL_S)
    kill_group(pgid, grace_s, exclude={os.getpid()})
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else GRACE_S)
