"""The code grader's sandbox (bubblewrap): one test per hostile behaviour of a program under test.

Each is graded wrong or unknown with its reason within its limits, nothing outside the sandbox changes,
and the next program still runs. Limits are small so the suite stays quick; nothing waits on timing
except the wall-clock limit itself, which the assertion gives generous room.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path

import pytest
from _sandbox_programs import SECRET_HUNT

from prm_synth.config.grader import SandboxLimits
from prm_synth.grading import sandbox
from prm_synth.grading.code import CodeGrader, last_code_block
from prm_synth.grading.keys import dump_key

pytestmark = pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")

# A generous wall clock: on a loaded machine a CPU second takes many wall seconds, and the CPU limit, not
# the wall clock, must be what stops a busy loop. The sleeping program has a short wall clock of its own.
LIMITS = SandboxLimits(cpu_s=1, wall_s=120, memory_mb=512, processes=16, output_bytes=1 << 20, file_mb=4)
SHORT_WALL = LIMITS.model_copy(update={"wall_s": 3.0})
TESTS = "def check(candidate):\n    assert candidate(1) == 2\n"
KEY = dump_key({"answer": "", "tests": TESTS, "entry_point": "inc"})
GOOD = "def inc(x):\n    return x + 1\n"


def grade(program: str, limits: SandboxLimits = LIMITS, key: str = KEY) -> tuple[str, str | None, float]:
    started = time.monotonic()
    verdict = CodeGrader(limits).grade(f"Here it is.\n\n```python\n{program}```\n", key)
    return verdict.status, verdict.reason, time.monotonic() - started


def still_works() -> None:
    assert grade(GOOD)[:2] == ("correct", "passed")


def test_a_passing_program_is_correct_and_a_failing_one_incorrect() -> None:
    still_works()
    assert grade("def inc(x):\n    return x\n")[:2] == ("incorrect", "failed:AssertionError")
    plain = dump_key({"answer": "", "tests": "assert inc(2) == 3\n", "entry_point": "inc"})
    assert grade(GOOD, key=plain)[:2] == ("correct", "passed")
    assert grade("def inc(x):\n    return 0\n", key=plain)[0] == "incorrect"


def test_loops_forever() -> None:
    status, reason, took = grade("while True:\n    pass\n")
    assert (status, reason) == ("unknown", "cpu_limit")
    assert took < LIMITS.wall_s + 60
    still_works()


def test_sleeps_forever_hits_the_wall_clock() -> None:
    status, reason, took = grade("import time\ntime.sleep(3600)\n", SHORT_WALL)
    assert (status, reason) == ("unknown", "wall_limit")
    assert took < 600  # stopped long before the program would have ended
    still_works()


def test_forks_without_end() -> None:
    status, reason, _ = grade("import os\nwhile True:\n    os.fork()\n")
    assert status in ("incorrect", "unknown") and reason
    assert status != "correct"
    still_works()


def test_allocates_10_gb() -> None:
    status, reason, _ = grade("x = bytearray(10 * 1024 ** 3)\n")
    assert (status, reason) == ("unknown", "memory_limit")
    still_works()


def test_opens_a_socket() -> None:
    program = "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)\ndef inc(x):\n    return x + 1\n"
    status, reason, _ = grade(program)
    assert status == "incorrect" and reason is not None and reason.startswith("failed:")
    still_works()


def test_writes_outside_its_folder(tmp_path: Path) -> None:
    target = tmp_path / f"escape-{uuid.uuid4().hex}"  # /tmp of the host: the sandbox has a tmpfs there
    work = Path.cwd() / f"escape-{uuid.uuid4().hex}"
    program = f"open({str(target)!r}, 'w').write('x')\nopen({str(work)!r}, 'w').write('x')\n{GOOD}"
    status, _, _ = grade(program)
    assert status == "incorrect"
    assert not target.exists() and not work.exists()
    still_works()


def test_reads_a_file_in_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    secret = home / "secret.txt"
    secret.write_text("the key")
    monkeypatch.setenv("HOME", str(home))
    program = f"KEY = open({str(secret)!r}).read()\n{GOOD}"
    status, reason, _ = grade(program)
    assert (status, reason) == ("incorrect", "failed:FileNotFoundError")
    root_file = "/root/.bashrc"
    status, _, _ = grade(f"KEY = open({root_file!r}).read()\n{GOOD}")
    assert status == "incorrect"
    still_works()


def test_no_secret_of_the_pipeline_reaches_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"prm-synth-marker-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + marker)
    monkeypatch.setenv("HF_TOKEN", "hf_" + marker)
    monkeypatch.setenv("PRM_SYNTH_PLANTED", marker)
    status, reason, _ = grade(SECRET_HUNT.format(marker=marker.encode()))
    assert (status, reason) == ("incorrect", "failed:AssertionError")
    # bubblewrap itself (the sandbox's first process) is started with none of them either
    started: list[dict[str, str]] = []
    real = sandbox.subprocess.Popen

    def recording(*args: object, **kwargs: object) -> object:
        started.append(dict(kwargs.get("env") or os.environ))  # type: ignore[call-overload]
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(sandbox.subprocess, "Popen", recording)
    assert grade(f"{GOOD}# {marker}\n")[:2] == ("correct", "passed")  # a program not graded before: it runs
    assert started and all(marker not in "".join(f"{k}={v}" for k, v in env.items()) for env in started)


def test_prints_1_gb() -> None:
    status, reason, took = grade("import sys\nfor _ in range(16384):\n    sys.stdout.write('x' * 65536)\n" + GOOD)
    assert (status, reason) == ("unknown", "output_limit")
    assert took < LIMITS.wall_s + 60
    still_works()


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit\n"])
def test_exits_the_interpreter_before_the_tests(exit_call: str) -> None:
    status, reason, _ = grade(GOOD + exit_call)
    assert status == "incorrect" and reason in ("failed:SystemExit", "exited_early")
    still_works()


def test_printing_a_fake_pass_line_does_not_pass() -> None:
    program = "print('PRM_SYNTH_PASS 0000')\nimport os\nos._exit(0)\n"
    assert grade(program)[0] == "incorrect"


def test_no_sandbox_is_unknown_and_said_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(sandbox, "bwrap_binary", lambda: None)
    monkeypatch.setattr(sandbox, "_warned", set())
    marker = Path.cwd() / f"ran-{uuid.uuid4().hex}"
    program = f"open({str(marker)!r}, 'w').write('ran')\n{GOOD}"
    with caplog.at_level(logging.WARNING):
        first = grade(program)
        second = grade(program + "\n")
    assert first[:2] == second[:2] == ("unknown", "sandbox_unavailable")
    assert sum("no sandbox" in r.message for r in caplog.records) == 1
    assert not marker.exists()  # never run unsandboxed


def test_no_code_block_and_no_tests_are_unknown() -> None:
    assert CodeGrader(LIMITS).grade("I would return x + 1.", KEY).reason == "no_answer"
    assert CodeGrader(LIMITS).grade("```python\nx = 1\n```", dump_key({"answer": ""})).reason == "no_tests"
    assert last_code_block("```py\na\n```\ntext\n```python\nb\n```") == "b\n"
    assert os.path.exists(sandbox.HARNESS)
