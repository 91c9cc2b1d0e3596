"""Runs inside the sandbox (never imported by the pipeline): limits itself, then the program and its tests.

argv: cpu_s memory_bytes processes file_bytes drop_uid entry_point. The parent sends a one-time nonce on
stdin; a pass is reported as a line holding it, written only after every test returned, so a program that
exits early (sys.exit, os._exit) before the tests ran never reads as a pass.
Standard library only, and run with `python -I -S`: nothing of the pipeline's environment is loaded.
"""

import contextlib
import errno
import os
import resource
import sys

# Errors that say a bound or a shared resource ran out, not that the program is wrong: reported as the
# bound's name (the verdict is unknown, and not remembered: another try may go otherwise).
_BOUND_ERRNOS = {
    errno.ENOMEM: "memory_limit",
    errno.EAGAIN: "process_limit",  # fork or clone refused: RLIMIT_NPROC, or the host's own process table
    errno.ENOSPC: "disk_limit",
    errno.EDQUOT: "disk_limit",
    errno.EFBIG: "file_limit",  # RLIMIT_FSIZE (Python ignores SIGXFSZ, so the write fails instead)
}


def _limit(cpu_s: int, memory: int, processes: int, file_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))  # soft: SIGXCPU; hard: SIGKILL
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def _bound_hit(error: BaseException | None) -> str | None:
    """The bound an error (or one it was raised while handling) says was hit, if any."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, MemoryError):
            return "memory_limit"
        if isinstance(error, OSError) and error.errno in _BOUND_ERRNOS:
            return _BOUND_ERRNOS[error.errno]
        if isinstance(error, RuntimeError) and "can't start new thread" in str(error):
            return "process_limit"
        error = error.__cause__ or error.__context__
    return None


def _disk_full() -> bool:
    """Is the sandbox's writable space (its one bounded tmpfs) full? A program that swallowed the error
    and failed on for it hit the disk bound."""
    try:
        return os.statvfs(os.path.dirname(os.path.abspath(__file__))).f_bavail == 0
    except OSError:
        return False


def main() -> None:
    cpu_s, memory, processes, file_bytes, drop_uid = (int(a) for a in sys.argv[1:6])
    entry_point = sys.argv[6]
    nonce = sys.stdin.readline().strip()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    if drop_uid >= 0:  # started as root: RLIMIT_NPROC binds only an unprivileged user
        os.setgroups([])
        os.setgid(drop_uid)
        os.setuid(drop_uid)
    _limit(cpu_s, memory, processes, file_bytes)
    report = os.dup(1)  # the program may close or replace stdout; the verdict line goes here
    os.write(report, f"PRM_SYNTH_START {nonce}\n".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "solution.py"), encoding="utf-8") as f:
        solution = f.read()
    with open(os.path.join(here, "tests.py"), encoding="utf-8") as f:
        tests = f.read()
    namespace: dict = {"__name__": "__main__"}
    try:
        exec(compile(solution, "solution.py", "exec"), namespace)
        exec(compile(tests, "tests.py", "exec"), namespace)
        check = namespace.get("check")
        if callable(check):
            if entry_point not in namespace:
                raise NameError(f"the solution defines no {entry_point!r}")
            check(namespace[entry_point])
    except BaseException as e:  # SystemExit too: exiting before the tests end is no pass
        bound = _bound_hit(e) or ("disk_limit" if _disk_full() else None)
        _flush()
        name = f"limit:{bound}" if bound else type(e).__name__
        os.write(report, f"\nPRM_SYNTH_FAIL {nonce} {name}\n".encode())
        os._exit(4 if bound else 3)
    _flush()
    os.write(report, f"\nPRM_SYNTH_PASS {nonce}\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
