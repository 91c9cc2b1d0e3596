"""The output folder's lock.

A run holds an advisory lock (`fcntl.flock` on OUT/.lock, taken by `ShardStore.prepare`), so a
second run into the same folder fails at once with `OutputLockedError`; the kernel releases the lock
with the file descriptor, so a crashed or killed run never leaves it behind. Within one process the
lock is shared (a re-run in the same process, e.g. after an error, is not refused). A command that
reads a finished folder (`export`, `inspect`, `show`, `eval dataset`) takes the same lock shared
(`reading`): it refuses a folder a run is writing, naming the run, instead of reading shards from
before and after some of the run's writes; and a run does not start on a folder being read.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prm_synth.store.layout import LOCK, OutputLockedError

log = logging.getLogger(__name__)


class OutputLock:
    """An exclusive flock on OUT/.lock, shared by every store of this process that writes the folder."""

    _held: weakref.WeakValueDictionary[str, OutputLock] = weakref.WeakValueDictionary()
    _guard = threading.Lock()
    # The pid a refused run is told holds the lock: the command the user started (`prm-synth run`'s
    # parent, which a user can stop), not its worker child; this process's own where not set.
    owner_pid: int | None = None

    def __init__(self, file: Any) -> None:
        self.file = file

    @classmethod
    def acquire(cls, root: Path) -> OutputLock:
        root.mkdir(parents=True, exist_ok=True)
        path = root / LOCK
        key = str(path.resolve())
        with cls._guard:
            held = cls._held.get(key)
            if held is not None:
                return held
            file = open(path, "a+")  # noqa: SIM115 - the lock lives as long as this object
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                file.seek(0)
                holder = file.read().strip()[:40]
                read_only = _only_readers(file)
                file.close()
                if read_only:
                    raise OutputLockedError(
                        f"{root} is being read by another prm-synth command (export, inspect, show); "
                        "wait for it to finish, or use another --out folder"
                    ) from None
                raise OutputLockedError(
                    f"{root} is in use by another prm-synth run"
                    + (f" (pid {holder})" if holder else "")
                    + "; wait for it to finish, or use another --out folder"
                ) from None
            except OSError as e:  # a file system without flock: run unlocked rather than not at all
                log.warning("cannot lock %s (%s): running without the lock", path, e)
            file.seek(0)
            file.truncate()
            file.write(f"{cls.owner_pid or os.getpid()}\n")
            file.flush()
            lock = cls(file)
            cls._held[key] = lock
            return lock

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.file.close()  # closing the descriptor releases the flock


def name_lock_owner(pid: int | None) -> None:
    """The pid the run lock names from now on (a worker names the command that started it)."""
    OutputLock.owner_pid = pid


def _only_readers(file: Any) -> bool:
    """Whether the folder's lock, which this process could not take alone, is held by readers only."""
    try:
        fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return False
    fcntl.flock(file, fcntl.LOCK_UN)
    return True


@contextlib.contextmanager
def reading(root: str | Path) -> Iterator[None]:
    """Hold a folder still while a command reads it: its lock taken shared, so no run writes it
    meanwhile, and OutputLockedError naming the run (its pid) when one is writing it now. A reader
    never creates the lock file: a folder without one (copied, or read-only) is read as it is. As for
    runs, the lock is shared within one process: the run that holds it reads its own folder."""
    path = Path(root) / LOCK
    with OutputLock._guard:
        ours = path.exists() and OutputLock._held.get(str(path.resolve())) is not None
    if ours:  # this process writes the folder: it reads as the writer
        yield
        return
    try:
        file = open(path)  # noqa: SIM115 - closed below, after the reading
    except OSError:
        yield
        return
    with file:
        try:
            fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = file.read().strip()[:40]
            raise OutputLockedError(
                f"{root} is being written by a prm-synth run"
                + (f" (pid {holder})" if holder else "")
                + ": wait for it to finish (or stop it), then run this again; read now, the folder would "
                "mix shards from before and after the run's writes"
            ) from None
        except OSError:  # a file system without flock: read unlocked, as runs write unlocked there
            pass
        yield
