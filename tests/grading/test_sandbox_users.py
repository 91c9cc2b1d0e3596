"""Users handed out host-wide (as root): a run's user is held by a lock of the whole host, so another
pipeline's program, busy with a fork bomb as its own user, leaves this pipeline's program its whole
process budget. The other pipeline is a second process here, holding its user with the same lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prm_synth.config.grader import SandboxLimits
from prm_synth.grading import sandbox, sandbox_users
from prm_synth.grading.code import CodeGrader
from prm_synth.grading.keys import dump_key

ROOT = Path(__file__).resolve().parents[2]
# the other pipeline: takes a user, fills that user's process budget with sleepers, says which user,
# and holds both until its stdin closes
OTHER = """
import subprocess, sys
from prm_synth.grading.sandbox_users import run_user
with run_user() as uid:
    sleepers = [subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "600"])
                for _ in range(int(sys.argv[1]))]
    print(uid, flush=True)
    sys.stdin.read()
    for p in sleepers:
        p.kill()
        p.wait()
"""

pytestmark = [
    pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="users are handed out only when the pipeline runs as root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed"),
]


def test_another_pipelines_fork_bomb_leaves_this_programs_budget_whole() -> None:
    limits = SandboxLimits(cpu_s=10, wall_s=120, memory_mb=512, processes=16, workers=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER, str(limits.processes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert other.stdout is not None
        taken = int(other.stdout.readline())
        with sandbox_users.run_user() as mine:
            assert mine != taken  # the other process's lock is seen here
        # eight threads: none could start as a user whose budget the other pipeline's sleepers fill
        program = "import threading\nts = [threading.Thread(target=lambda: None) for _ in range(8)]\n"
        program += "for t in ts:\n    t.start()\ndef inc(x):\n    return x + 1\n"
        key = dump_key({"tests": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"})
        verdict = CodeGrader(limits).grade(f"```python\n{program}```\n", key)
        assert (verdict.status, verdict.reason) == ("correct", "passed")
    finally:
        other.communicate(b"", timeout=120)
    assert other.returncode == 0


def test_the_lock_folder_is_private_and_refused_when_planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = tmp_path / "users"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    monkeypatch.setattr(sandbox_users, "LOCK_FOLDER", str(planted))
    with pytest.raises(sandbox_users.NoFreeUserError), sandbox_users.run_user():
        pass
    fresh = tmp_path / "fresh"
    monkeypatch.setattr(sandbox_users, "LOCK_FOLDER", str(fresh))
    with sandbox_users.run_user() as first, sandbox_users.run_user() as second:
        assert first != second  # two runs of one process too
    assert fresh.stat().st_mode & 0o777 == 0o700
