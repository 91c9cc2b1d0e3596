"""What the sandbox shows of the host and what it bounds per program (all its processes and files
together): no host unix socket, no host /tmp, /run or /dev/shm, a /dev/shm of its own inside the disk
bound, total memory, total disk, a file's size and the process count, each hit graded unknown with the
bound's name. A program hitting a bound, or a shared resource running out, is never remembered."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest
from _sandbox_programs import DISK_FILL, SOCKET_HUNT, reached, unix_server

from prm_synth.config.grader import SandboxLimits
from prm_synth.grading import code as code_grading
from prm_synth.grading import sandbox, sandbox_mounts
from prm_synth.grading.code import CodeGrader
from prm_synth.grading.keys import dump_key

pytestmark = pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")

LIMITS = SandboxLimits(cpu_s=10, wall_s=120, memory_mb=256, processes=16, file_mb=16, disk_mb=64)
TESTS = "def check(candidate):\n    assert candidate(1) == 2\n"
KEY = dump_key({"tests": TESTS, "entry_point": "inc"})
GOOD = "def inc(x):\n    return x + 1\n"


def run(program: str, limits: SandboxLimits = LIMITS) -> sandbox.RunResult:
    return sandbox.run_tests(program, TESTS, "inc", limits)


def grade(program: str, limits: SandboxLimits = LIMITS) -> tuple[str, str | None]:
    verdict = CodeGrader(limits).grade(f"```python\n{program}```\n", KEY)
    return verdict.status, verdict.reason


def test_no_host_unix_socket_is_reachable() -> None:
    folders = [tempfile.gettempdir(), "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()]
    paths = [os.path.join(folder, f"prm-synth-sock-{uuid.uuid4().hex[:12]}") for folder in folders]
    abstract = f"\0prm-synth-{uuid.uuid4().hex}"
    servers = [unix_server(p) for p in paths] + [unix_server(abstract)]
    try:
        status, reason = grade(SOCKET_HUNT.format(paths=paths, abstract=abstract))
        assert not any(reached(s) for s in servers)
    finally:
        for server in servers:
            server.close()
        for path in paths:
            Path(path).unlink(missing_ok=True)
    assert (status, reason) == ("incorrect", "failed:AssertionError")


def test_the_program_sees_only_the_system_the_interpreter_and_its_own_tmpfs() -> None:
    planted = Path(tempfile.gettempdir(), f"prm-synth-visible-{uuid.uuid4().hex}")
    planted.write_text("host tmp")
    program = f"""import os
seen = sorted(os.listdir("/"))
assert not os.path.exists({str(planted)!r})
assert not os.path.exists("/run") and not os.path.exists("/var") and not os.path.exists("/home")
assert os.path.realpath("/tmp") == "/dev/shm" and os.getcwd() == "/dev/shm/run"
assert os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize <= {LIMITS.disk_mb << 20}
open("/dev/shm/mine", "w").write("x")
{GOOD}"""
    try:
        assert grade(program) == ("correct", "passed")
    finally:
        planted.unlink()
    assert not Path("/dev/shm/mine").exists()  # its /dev/shm is its own
    assert all(os.path.isabs(f) for f in sandbox_mounts.interpreter_folders())


def test_memory_of_all_its_processes_together_is_bounded() -> None:
    # five children of 150 MB each: each is far under memory_mb alone, together three times over it
    program = (
        """import os, time
kids = []
for _ in range(5):
    pid = os.fork()
    if pid == 0:
        block = bytearray(150 << 20)
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
"""
        + GOOD
    )
    result = run(program)
    assert (result.status, result.reason) == ("limit", "memory_limit")
    assert result.peak_bytes > LIMITS.memory_mb << 20  # it was the watch, not one process's own limit
    assert run(GOOD).status == "pass"


def test_disk_is_bounded_for_the_folder_tmp_and_dev_shm_together() -> None:
    # the program frees what it wrote before its tests run: the bound itself, not a full disk, decides
    bound = LIMITS.disk_mb << 20
    assert grade(DISK_FILL.format(bound=bound)) == ("incorrect", "failed:AssertionError")
    # left full, it is a bound hit: unknown, whatever the program made of the failed write
    filler = "i = 0\ntry:\n    while True:\n        open(f'f{i}', 'wb').write(b'x' * (15 << 20))\n        i += 1\n"
    assert grade(filler + "except OSError:\n    pass\n" + GOOD.replace("+ 1", "+ 2")) == ("unknown", "disk_limit")
    assert grade("open('big', 'wb').write(b'x' * (20 << 20))\n" + GOOD) == ("unknown", "file_limit")
    assert grade(GOOD) == ("correct", "passed")


def test_threads_past_the_process_bound_are_unknown_and_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    program = (
        "import threading, time\nfor _ in range(1000):\n    threading.Thread(target=time.sleep, args=(5,)).start()\n"
    )
    calls: list[str] = []
    real = code_grading.run_tests

    def counted(*args: object, **kwargs: object) -> sandbox.RunResult:
        calls.append("run")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(code_grading, "run_tests", counted)
    assert grade(program + GOOD) == ("unknown", "process_limit")
    assert grade(program + GOOD) == ("unknown", "process_limit")
    assert len(calls) == 2  # a bound hit is run again, never answered from the cache
    assert grade(GOOD + "# once\n") == ("correct", "passed")
    assert grade(GOOD + "# once\n") == ("correct", "passed")
    assert len(calls) == 3  # a verdict is remembered


def test_the_programs_files_never_touch_the_hosts_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    # whatever TMPDIR is, no folder of the host holds a program's files for another program to read:
    # bubblewrap copies them from memory into the sandbox's own tmpfs
    def no_host_folder(*args: object, **kwargs: object) -> str:
        raise AssertionError("a host folder was made for a program")

    monkeypatch.setattr(tempfile, "mkdtemp", no_host_folder)
    monkeypatch.setenv("TMPDIR", str(Path.cwd()))
    program = "import os\nassert sorted(os.listdir('.')) == ['harness.py', 'solution.py', 'tests.py']\n" + GOOD
    assert run(program).status == "pass"
