"""Grading workers that misbehave, for tests/grading/test_grading.py (run as `WorkerPool(entry=...)` entries)."""

from __future__ import annotations

import os

from prm_synth.grading import pool as grading_pool

GARBAGE_MARKER_ENV = "PRM_TEST_GARBAGE_MARKER"


def noisy(parent_pid: int, requests_fd: int, replies_fd: int) -> None:
    """A worker whose libraries print on stdout (Python and C level) around every comparison."""
    inner = grading_pool.verify_pair

    def loud(gold: str, extracted: str) -> tuple[str, str]:
        print(f"noise from python: comparing {gold}", flush=True)
        os.write(1, b"noise from C\n")
        return inner(gold, extracted)

    grading_pool.verify_pair = loud
    grading_pool.worker_main(parent_pid, requests_fd, replies_fd)


def garbage(parent_pid: int, requests_fd: int, replies_fd: int) -> None:
    """A worker that answers something that is not a reply; with the marker variable set, only the
    first one started (it leaves the marker file behind; the ones after it behave)."""
    marker = os.environ.get(GARBAGE_MARKER_ENV)
    if marker is None or not os.path.exists(marker):
        if marker is not None:
            open(marker, "w").close()  # noqa: SIM115 - an empty file is the whole message
        grading_pool.verify_pair = lambda gold, extracted: ("maybe", "who knows")  # type: ignore[assignment]
    grading_pool.worker_main(parent_pid, requests_fd, replies_fd)
