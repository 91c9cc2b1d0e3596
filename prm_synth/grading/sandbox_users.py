"""Which unprivileged user a sandboxed program runs as, when the pipeline runs as root.

RLIMIT_NPROC counts every process and thread of a user, whichever sandbox it is in: programs run at once
as one user share one budget, so a fork bomb would make a program graded beside it fail to start a
thread, a verdict that depends on timing. So each run in flight takes a user of its own: `nobody` first,
then the unprivileged ids just below it that no user or group is known by (NSS: passwd and group files,
LDAP, ...) and no process runs as, checked once. When every one is taken (more runs at once than
MAX_USERS) a run shares `nobody`, as every run did before.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import threading
from collections.abc import Iterator

NOBODY = 65534
MAX_USERS = 16  # runs at once with a process budget of their own (grader.sandbox.workers is at most this, usually)
_SEARCH = 1000  # ids below nobody's looked at for free ones

_lock = threading.Lock()
_free: list[int] | None = None


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


def _users() -> list[int]:
    running = _running_uids()
    spare = [u for u in range(NOBODY - 1, NOBODY - 1 - _SEARCH, -1) if u not in running and _unknown(u)]
    return [NOBODY, *spare[: MAX_USERS - 1]]


@contextlib.contextmanager
def run_user() -> Iterator[int]:
    """A user id for one run, its own while the run lasts (`nobody`, shared, when none is free)."""
    global _free
    with _lock:
        if _free is None:
            _free = _users()
        owned = bool(_free)
        uid = _free.pop(0) if owned else NOBODY
    try:
        yield uid
    finally:
        if owned:
            with _lock:
                assert _free is not None
                if uid == NOBODY:
                    _free.insert(0, uid)  # nobody first: runs one by one run as nobody, as always
                else:
                    _free.append(uid)
