"""math-verify in worker processes: a hard time bound in every thread, and a worker that misbehaves
costs at most one retry.

math-verify's own timeout uses signal.alarm, which works only in the main thread, and a C-level sympy
computation (a huge factorial) cannot be interrupted at all; a process can always be killed. So
comparisons run in a small pool of `python -c` workers (started on first use, at most
`GRADER_PROCESSES`), and one not answered within its deadline is unknown ("timeout"); its worker is
killed and replaced.

The protocol (`[gold, extracted]` JSON lines in, `[status, reason]` lines out) runs over a private
pair of pipes, never over the worker's stdin/stdout: the worker's stdout is its stderr, so a library
that prints only writes to the log. A worker that dies ("worker_died") or answers something that is
not a reply ("worker_garbage") is killed and replaced, and the comparison is tried once more on a
fresh worker before it is unknown with that reason. These reasons, a timeout and an exception in the
worker ("error:<name>") are transient (`is_transient`): a caller must not remember them as verdicts.

A worker never outlives its parent: on Linux the kernel kills it when the parent dies, even in the
middle of a computation (lifeline's parent-death signal), and a closed request pipe ends it too.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from prm_synth.errors import PrmSynthError
from prm_synth.lifeline import set_parent_death_signal

GRADER_PROCESSES = max(1, min(4, os.cpu_count() or 1))
WORKER_START_TIMEOUT_S = 120.0  # importing sympy on a loaded machine; not part of a comparison's deadline
WORKER_MEMORY_BYTES = 4 << 30  # address-space cap of a worker: a runaway sympy gets MemoryError, not the host
WORKER_ENTRY = "prm_synth.grading.pool:worker_main"
# What a reply may say: schema.VerdictStatus (not imported: a worker would load pyarrow for it; a test checks)
STATUSES = frozenset({"correct", "incorrect", "unknown"})
# A worker that fails in one of these ways is replaced and the comparison retried once.
BROKEN = frozenset({"worker_died", "worker_garbage"})
_REPLY_CHARS = 1000  # a reply is two short words; a longer line is garbage

_BRACE = re.compile(r"\\[{}]|[{}]")


class GraderUnavailableError(PrmSynthError, RuntimeError):
    """No grading worker process could be started (a broken environment, not a verdict)."""


def is_transient(reason: str | None) -> bool:
    """Did the comparison fail for a reason that another try could change (never a verdict to keep)?"""
    return reason is not None and (reason == "timeout" or reason in BROKEN or reason.startswith("error:"))


def compare(gold: str, extracted: str, timeout_s: float) -> tuple[str, str]:
    """(status, reason) of one comparison by math-verify, within `timeout_s` (waiting for a free worker
    and starting one excluded)."""
    return POOL.compare(gold, extracted, timeout_s)


# ---------------------------------------------------------------- in the worker process
def for_math_verify(expr: str) -> str:
    """math-verify reads LaTeX inside a box or math delimiters; a box needs balanced braces."""
    depth = 0
    for m in _BRACE.finditer(expr):
        depth += {"{": 1, "}": -1}.get(m.group(), 0)
        if depth < 0:
            break
    return f"\\boxed{{{expr}}}" if depth == 0 else f"${expr}$"


@functools.lru_cache(maxsize=4096)
def _parsed(expr: str) -> list[Any]:
    from math_verify import parse

    return parse(for_math_verify(expr), parsing_timeout=None, raise_on_error=True)


def verify_pair(gold: str, extracted: str) -> tuple[str, str]:
    """One comparison, in the worker: a parser or sympy failure (MemoryError included) is not a verdict."""
    from math_verify import verify

    try:
        parsed_gold, parsed_answer = _parsed(gold), _parsed(extracted)
        if not parsed_gold:
            return "unknown", "unparseable_gold"
        if not parsed_answer:
            return "unknown", "unparseable"
        same = verify(parsed_gold, parsed_answer, timeout_seconds=None, raise_on_error=True)
    except Exception as exc:
        return "unknown", f"error:{type(exc).__name__}"
    return ("correct" if same else "incorrect"), "math_verify"


def worker_main(parent_pid: int, requests_fd: int, replies_fd: int) -> None:  # pragma: no cover - a worker
    """A worker: `[gold, extracted]` lines on `requests_fd`, `[status, reason]` lines on `replies_fd`.

    Ctrl-C goes to the parent (which owns the run)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:
        return  # the parent died before the line above took effect
    os.dup2(2, 1)  # whatever prints (Python or C) goes to stderr, never into the protocol
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft > WORKER_MEMORY_BYTES:
            resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, hard))
    except (ImportError, ValueError, OSError):
        pass
    logging.disable(logging.CRITICAL)  # math-verify warns about every unparseable answer
    import math_verify  # noqa: F401 - imported before "ready", so a comparison's deadline never pays for it

    with os.fdopen(requests_fd, "rb") as requests, os.fdopen(replies_fd, "wb", buffering=0) as replies:
        replies.write(b'"ready"\n')
        for line in requests:
            gold, extracted = json.loads(line)
            replies.write(json.dumps(verify_pair(gold, extracted)).encode() + b"\n")


# ---------------------------------------------------------------- in the parent
# What a grading worker inherits of the run's environment: it parses model output (sympy) and needs no
# credential, so tokens and keys (HF_TOKEN, OPENAI_API_KEY, ...) stay in the parent.
WORKER_ENV_KEYS = frozenset({"PATH", "LANG", "LANGUAGE", "TMPDIR", "TZ", "PYTHONPATH", "PYTHONHASHSEED"})


def worker_environment(environ: Mapping[str, str], package_root: str) -> dict[str, str]:
    """A grading worker's environment: the run's locale, path and temp folder (`WORKER_ENV_KEYS`, `LC_*`),
    nothing else, with this package's root on PYTHONPATH."""
    env = {k: v for k, v in environ.items() if k in WORKER_ENV_KEYS or k.startswith("LC_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, environ.get("PYTHONPATH")]))
    return env


class _Worker:
    """One worker process, spoken to over its private pipes; killed when it misses a deadline."""

    def __init__(self, entry: str = WORKER_ENTRY) -> None:
        package_root = str(Path(__file__).resolve().parents[1])  # the worker imports this very package
        env = worker_environment(os.environ, package_root)
        module, function = entry.split(":")
        child_requests, self._requests_fd = os.pipe()
        self._replies_fd, child_replies = os.pipe()
        code = f"from {module} import {function}; {function}({os.getpid()}, {child_requests}, {child_replies})"
        try:
            self.process = _SPAWNER.popen(
                [sys.executable, "-c", code],
                stdin=subprocess.DEVNULL,
                pass_fds=(child_requests, child_replies),
                env=env,
            )
        except OSError as e:
            self._close_pipes()
            raise GraderUnavailableError(f"cannot start a grading worker ({sys.executable}): {e}") from e
        finally:
            os.close(child_requests)
            os.close(child_replies)
        self._buffer = b""
        try:
            ready = self._read_line(WORKER_START_TIMEOUT_S)
        except EOFError:
            ready = None
        if ready != '"ready"':
            self.kill()
            raise GraderUnavailableError(
                f"a grading worker ({sys.executable} -c ...{entry}) did not start within "
                f"{WORKER_START_TIMEOUT_S:g} s; is math-verify installed?"
            )

    def _read_line(self, timeout_s: float) -> str | None:
        """One reply line, or None when the deadline passes; EOFError when the worker has died."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies_fd], [], [], left)[0]:
                return None
            chunk = os.read(self._replies_fd, 65536)
            if not chunk:
                raise EOFError("the grading worker exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    def compare(self, gold: str, extracted: str, timeout_s: float) -> tuple[str, str] | None:
        """(status, reason); ("unknown", "worker_died" / "worker_garbage") when it failed; None if it
        missed the deadline."""
        try:
            os.write(self._requests_fd, json.dumps([gold, extracted]).encode() + b"\n")
            line = self._read_line(timeout_s)
        except (OSError, EOFError):
            return "unknown", "worker_died"
        if line is None:
            return None
        reply = _reply(line)
        if reply is None or self._buffer:  # not a reply, or more than one: the worker is not ours to trust
            return "unknown", "worker_garbage"
        return reply

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for fd in (self._requests_fd, self._replies_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._requests_fd = self._replies_fd = -1


def _reply(line: str) -> tuple[str, str] | None:
    if len(line) > _REPLY_CHARS:
        return None
    try:
        status, reason = json.loads(line)
    except (ValueError, TypeError):
        return None
    if status not in STATUSES or not isinstance(reason, str):
        return None
    return status, reason


class _Spawner:
    """Starts worker processes from one thread that lives as long as the process. The parent-death
    signal fires when the *thread* that started a child ends, and grading runs in pool threads that
    come and go."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], list[str], dict[str, Any]]]
        self._requests = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="prm-synth-grader-spawner", daemon=True)
                self._thread.start()
        future: Future[subprocess.Popen[bytes]] = Future()
        self._requests.put((future, args, kwargs))
        return future.result()

    def _run(self) -> None:
        while True:
            future, args, kwargs = self._requests.get()
            try:
                future.set_result(subprocess.Popen(args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                future.set_exception(e)


_SPAWNER = _Spawner()


class WorkerPool:
    """At most `size` workers, started on demand; a caller waits for a free one (that wait is not
    part of its deadline). A worker that misses a deadline, dies or answers garbage is killed and
    forgotten; after dying or garbage the comparison is tried once more on another worker."""

    def __init__(self, size: int, entry: str = WORKER_ENTRY) -> None:
        self.size = size
        self.entry = entry
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._count = 0
        self._cond = threading.Condition()

    def compare(self, gold: str, extracted: str, timeout_s: float) -> tuple[str, str]:
        answer: tuple[str, str] = ("unknown", "worker_died")
        for _ in range(2):
            worker = self._acquire()
            got: tuple[str, str] | None = None
            try:
                got = worker.compare(gold, extracted, timeout_s)
            finally:
                self._release(worker, healthy=got is not None and got[1] not in BROKEN)
            if got is None:
                return "unknown", "timeout"
            answer = got
            if answer[1] not in BROKEN:
                break
        return answer

    def _acquire(self) -> _Worker:
        with self._cond:
            while not self._idle and self._count >= self.size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._count += 1
        try:
            worker = _Worker(self.entry)  # started outside the lock: others keep grading meanwhile
            with self._cond:
                self._all.add(worker)
            return worker
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:
            worker.kill()
        with self._cond:
            if healthy:
                self._idle.append(worker)
            else:
                self._count -= 1
                self._all.discard(worker)
            self._cond.notify()

    def shutdown(self) -> None:
        """Stop the idle workers (busy ones are stopped by their callers); the pool can start new ones later."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._all.difference_update(idle)
        for worker in idle:
            worker.kill()

    def kill_all(self) -> None:
        """At exit: stop every worker, busy ones too (their callers then see a dead worker)."""
        with self._cond:
            workers = list(self._all)
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.process.kill()

    def forget(self) -> None:
        """In a forked child: the workers (and their pipes) belong to the parent; start afresh."""
        self._idle, self._all, self._count = [], set(), 0
        self._cond = threading.Condition()


POOL = WorkerPool(GRADER_PROCESSES)
atexit.register(POOL.kill_all)


def _after_fork_in_child() -> None:
    global _SPAWNER
    POOL.forget()
    _SPAWNER = _Spawner()  # the spawner thread does not survive a fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
