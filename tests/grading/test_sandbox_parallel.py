"""Programs graded in a batch run at once in a bounded pool (`grader.sandbox.workers`), each in its own
sandbox, with the verdicts of one-by-one grading in the batch's order. Nothing waits on timing: overlap
is shown by a barrier two runs must reach together (a generous deadline), not by a stopwatch."""

from __future__ import annotations

import os
import threading

import pytest

from prm_synth.config import validate_config
from prm_synth.config.grader import SandboxLimits
from prm_synth.grading import code as code_grading
from prm_synth.grading import sandbox
from prm_synth.grading.code import CodeGrader
from prm_synth.grading.keys import dump_key
from prm_synth.grading.registry import grade_completions

pytestmark = pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")

LIMITS = SandboxLimits(cpu_s=2, wall_s=120, memory_mb=512, processes=16, workers=3)
TESTS = "def check(candidate):\n    assert candidate(1) == 2\n"
KEY = dump_key({"tests": TESTS, "entry_point": "inc"})


def program(i: int, right: bool) -> str:
    # each run leaves a marker of its own in its folder and checks that no other run's is there
    body = f"""import os
open("marker-{i}", "w").write("x")
others = [n for n in os.listdir(".") if n.startswith("marker-") and n != "marker-{i}"]
assert not others, others
def inc(x):
    return x + {1 if right else 2}
"""
    return f"Solution {i}.\n\n```python\n{body}```\n"


def test_a_batch_gives_the_one_by_one_verdicts_in_order_each_in_its_own_sandbox() -> None:
    texts = [program(i, right=i % 3 != 0) for i in range(9)] + [program(1, True), "no code here"]
    code_grading._run.cache_clear()
    serial = [CodeGrader(LIMITS.model_copy(update={"workers": 1})).grade(t, KEY) for t in texts]
    code_grading._run.cache_clear()
    batch = CodeGrader(LIMITS).grade_many(texts, KEY)
    assert batch == serial
    assert [v.status for v in batch] == ["incorrect" if i % 3 == 0 else "correct" for i in range(9)] + [
        "correct",
        "unknown",
    ]


def test_runs_overlap_up_to_the_pool_size(monkeypatch: pytest.MonkeyPatch) -> None:
    barrier = threading.Barrier(2, timeout=120)  # two runs must be in flight together, or this breaks
    active, most = [0], [0]
    lock = threading.Lock()
    real = code_grading.run_tests

    def counted(*args: object, **kwargs: object) -> sandbox.RunResult:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            barrier.wait()
            return real(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(code_grading, "run_tests", counted)
    code_grading._run.cache_clear()
    grader = CodeGrader(LIMITS.model_copy(update={"workers": 2}))
    verdicts = grader.grade_many([program(100 + i, True) for i in range(4)], KEY)
    assert [v.status for v in verdicts] == ["correct"] * 4
    assert most[0] == 2  # at once, and never more than the pool


def test_completions_keep_their_order_with_truncated_ones_among_them() -> None:
    grader = CodeGrader(LIMITS)
    completions = [(program(200, True), "stop"), (program(201, False), "length"), (program(202, False), "stop")]
    verdicts = grade_completions(grader, completions, KEY)
    assert [(v.status, v.reason) for v in verdicts] == [
        ("correct", "passed"),
        ("unknown", "truncated"),
        ("incorrect", verdicts[2].reason),
    ]


def test_the_pool_size_is_a_setting_outside_the_fingerprint() -> None:
    base = {"problems": {"kind": "humaneval"}, "policy": {"kind": "simulated"}, "grader": {"kind": "code"}}
    plain = validate_config(base)
    wide = validate_config(base | {"grader": {"kind": "code", "sandbox": {"workers": 8}}})
    assert wide.grader.sandbox.workers == 8 and plain.grader.sandbox.workers is None
    assert plain.fingerprint() == wide.fingerprint()
    assert 1 <= code_grading.default_workers() <= 4


@pytest.mark.skipif(
    os.geteuid() != 0, reason="as root each run in flight gets a user of its own; else one user runs all"
)
def test_a_fork_bomb_beside_a_program_does_not_spend_its_process_budget() -> None:
    bomb = "```python\nimport os\nwhile True:\n    os.fork()\n```\n"
    threads = (
        "```python\nimport threading\n"
        "for _ in range(300):\n"
        "    t = threading.Thread(target=lambda: None)\n    t.start()\n    t.join()\n"
        "def inc(x):\n    return x + 1\n```\n"
    )
    code_grading._run.cache_clear()
    grader = CodeGrader(LIMITS.model_copy(update={"workers": 2}))
    verdicts = grader.grade_many([bomb, threads, bomb.replace("True", "1"), threads.replace("300", "301")], KEY)
    assert verdicts[0].status != "correct" and verdicts[2].status != "correct"
    assert [v.status for v in (verdicts[1], verdicts[3])] == ["correct", "correct"], verdicts


def test_runs_in_flight_get_distinct_unknown_users_nobody_first(tmp_path, monkeypatch) -> None:
    """In a lock folder of its own: the real one is the whole host's, and the suite's other workers grade
    programs at the same time (test_sandbox_users.py shows two pipelines sharing the real one)."""
    import contextlib
    import pwd

    from prm_synth.grading import sandbox_users
    from prm_synth.grading.sandbox_users import NOBODY, run_user

    monkeypatch.setattr(sandbox_users, "LOCK_FOLDER", str(tmp_path / "users"))

    with run_user() as first:
        assert first == NOBODY  # one run at a time runs as nobody, as always
        with contextlib.ExitStack() as stack:
            others = [stack.enter_context(run_user()) for _ in range(3)]
            assert len({first, *others}) == 4
            for uid in others:
                with pytest.raises(KeyError):
                    pwd.getpwuid(uid)  # no user is known by it
    with run_user() as again:
        assert again == NOBODY  # given back
