"""Which unprivileged user a sandboxed program runs as, when the pipeline runs as root.

RLIMIT_NPROC counts every process and thread of a user, whichever sandbox it is in: programs run at once
as one user share one budget, so a fork bomb would make a program graded beside it fail to start a
thread, a verdict that depends on timing. So each run in flight takes a user of its own: `nobody` first,
then the unprivileged ids just below it that no user or group is known by (NSS: passwd and group files,
LDAP, ...) and no process ran as when this process first looked.

A user is taken with an exclusive `flock` on a file of its own under LOCK_FOLDER, a folder of the whole
host: two pipelines, or two Ray workers on one node, never hold one user at once, since the kernel
drops a lock with the process that held it (a killed pipeline frees its users). When every one is taken
a run waits for one (up to its deadline) rather than share a budget.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import stat
import threading
import time
from collections.abc import Iterator

from prm_synth.errors import PrmSynthError

NOBODY = 65534
MAX_USERS = 64  # runs at once, across the host, each with a process budget of its own
_SEARCH = 1000  # ids below nobody's looked at for free ones
LOCK_FOLDER = "/run/lock/prm-synth-sandbox-users" if os.path.isdir("/run/lock") else "/tmp/prm-synth-sandbox-users"
_WAIT_S = 0.05  # between two rounds of tries when every user is taken

_lock = threading.Lock()
_candidates: list[int] | None = None


class NoFreeUserError(PrmSynthError, RuntimeError):
    """Every sandbox user of the host was taken until the run's deadline."""


def _unknown(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        return False
    except KeyError:
        return True


def _running_uids() -> set[int]:
    out = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                out.add(entry.stat().st_uid)
    return out


def candidates() -> list[int]:
    """`nobody`, then up to MAX_USERS - 1 ids below it known to no user or group (looked up once)."""
    global _candidates
    with _lock:
        if _candidates is None:
            running = _running_uids()
            spare = [u for u in range(NOBODY - 1, NOBODY - 1 - _SEARCH, -1) if u not in running and _unknown(u)]
            _candidates = [NOBODY, *spare[: MAX_USERS - 1]]
        return list(_candidates)


def _lock_folder() -> str:
    """LOCK_FOLDER, made root's and private; refused when someone else's (a planted folder or link)."""
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(LOCK_FOLDER, 0o700)
        info = os.lstat(LOCK_FOLDER)
    except OSError as e:  # a read-only /run, no room: no user can be taken safely
        raise NoFreeUserError(f"cannot make {LOCK_FOLDER} ({e}): no sandbox user is taken") from e
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise NoFreeUserError(f"{LOCK_FOLDER} is not a private folder of this user's: no sandbox user is taken")
    return LOCK_FOLDER


def _try_take(folder: str, uid: int) -> int | None:
    """An open descriptor holding `uid`'s lock, or None when another run holds it."""
    path = os.path.join(folder, f"{uid}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise NoFreeUserError(f"cannot open {path} ({e}): no sandbox user is taken") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def run_user(deadline_s: float = 600.0) -> Iterator[int]:
    """A user id for one run, no other run's on this host while the run lasts (NoFreeUserError when
    none frees up within `deadline_s`)."""
    folder = _lock_folder()
    ids = candidates()
    end = time.monotonic() + deadline_s
    while True:
        for uid in ids:
            fd = _try_take(folder, uid)
            if fd is not None:
                try:
                    yield uid
                finally:
                    os.close(fd)  # closing the descriptor drops the lock
                return
        if time.monotonic() > end:
            raise NoFreeUserError(f"all {len(ids)} sandbox users of this host stayed taken for {deadline_s:g} s")
        time.sleep(_WAIT_S)
