"""The memory of a sandboxed program, all its processes together, watched from the parent.

RLIMIT_AS bounds each process alone: a program that forks N children may hold N times `memory_mb`. The
parent therefore sums the resident memory (RSS, /proc/<pid>/statm) of every process in the sandbox's
tree (bubblewrap and all its descendants, orphans included: they are re-parented to the sandbox's own
init, which is in the tree) every `INTERVAL_S`, and kills the sandbox when the sum passes `memory_mb`.
A cgroup would bound it in the kernel, but needs a delegated, writable cgroup v2 with the memory
controller, which most containers and CI machines lack (this one's is v1): the watch works everywhere.

The arithmetic of what it guarantees: between two looks the program can fault in at most what its
processes touch in `INTERVAL_S` (on the order of 100 MB per busy core at a few GB/s), so the total stays
about `memory_mb` plus that; the hard bound, should the watch stall, is the rlimits' product: `processes`
times `memory_mb` (each process's address space, RLIMIT_AS, times the tasks RLIMIT_NPROC allows).
"""

from __future__ import annotations

import contextlib
import os

INTERVAL_S = 0.025  # between two sums of the tree's resident memory
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    return out


def tree_resident_bytes(root: int) -> int:
    """The resident bytes of `root` and every descendant (a process that exits meanwhile counts 0)."""
    total, seen, todo = 0, set(), [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm") as f:
            total += int(f.read().split()[1]) * _PAGE
        todo += _children(pid)
    return total
