import functools
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.grading import math as grading
from prm_synth.grading import pool as grading_pool
from prm_synth.grading.math import (
    Verdict,
    as_number,
    extract_answer,
    grade_completion,
    is_truncated,
    last_boxed,
)

# The verdicts these tests expect are the comparison's, not its time bound's: on a busy machine (CI
# with other work beside it) the default 2 s per comparison ran out on `(1,2)` against `[1,2]`. Tests
# of the bound itself pass their own `timeout_s`, which wins over this one.
grade = functools.partial(grading.grade, timeout_s=120.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{\\sqrt{\\frac{1}{2}}}", "\\sqrt{\\frac{1}{2}}"),
        ("first \\boxed{1}, then \\boxed{2}", "2"),
        ("\\fbox{7}", "7"),
        ("\\boxed {\\{1,2\\}}", "\\{1,2\\}"),
        ("\\boxed{\\boxed{3}}", "\\boxed{3}"),  # the outer box is the last top-level one
        ("\\boxed{5} and a broken \\boxed{6", "5"),
        ("The answer is 18.", "18"),
        ("The answer is: **18**.", "18"),
        ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}"),
        ("The answer is $3.5$. Done", "3.5"),
        ("the answer is \\(x+1\\)\nmore text 9", "x+1"),
        ("work\n#### 72", "72"),
        ("#### 1,234\n", "1,234"),
        ("We have 3 apples and 4 pears, total 7.", "7"),
        ("5-3 = 2", "2"),
        ("it is -4", "-4"),
        ("It costs 1,234.50 dollars.", "1,234.50"),
        ("So the total is **18**", "18"),
        ("Step 1: 3 + 4 = 7\nStep 2: 7 × 2 = 14\n", "14"),
        ("a ratio of 3/4", "3/4"),
        ("no numbers at all", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "cost 1,234.50 dollars",  # words after the number and no full stop: an unfinished sentence
        "Step 1: 3 + 4 = 7\nStep 2: then we multiply 7 by",  # unfinished: stopped mid-sentence
        "First we find 7 apples.\nNow let us think about the pears",  # the number is not on the final line
        "7 * 3 =",
        "Is it 7?",
        "__import__('os').system('touch /tmp/pytest-0/test0/pwned')",  # a path holds a number
        "eval(0)",
        "$\\frac{1}{2}$",  # LaTeX: the last number of it would be 2, which is wrong
        "x" * 300 + " 7",  # a final line longer than an answer sentence
        "the value 7 and then many more words follow it here.",  # more than four words after the number
    ],
)
def test_last_number_fallback_reads_only_an_answer_like_final_line(text: str) -> None:
    assert extract_answer(text) is None


def test_extract_answer_precedence_and_fallback() -> None:
    assert extract_answer("The answer is 3. Actually \\boxed{4}") == "4"  # a box wins over "the answer is"
    assert extract_answer("#### 5\nThe answer is 6.") == "6"
    assert extract_answer("we get 12", last_number_fallback=False) is None
    assert last_boxed("nothing") is None


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\dfrac{3}{4}}", "3/4"),
        ("So she has 1,234 marbles.", "1234"),
        ("#### 1,000", "1000"),
        ("Step 1: 8 × 9 = 72\n#### 72", "72"),
        ("The answer is 18.", "18"),
        ("The answer is 72.0", "72"),
        ("\\boxed{\\sqrt{\\frac{1}{2}}}", "\\frac{\\sqrt{2}}{2}"),
        ("\\boxed{1} no wait \\boxed{2}", "2"),
        ("\\boxed{x+1}", "1+x"),
        ("\\boxed{(1,2)}", "(1,2)"),
        ("\\boxed{\\{2,1\\}}", "\\{1,2\\}"),
        ("\\boxed{[0,1)}", "[0,1)"),
        ("\\boxed{\\$18}", "18"),
        ("\\boxed{50\\%}", "50"),
        ("\\boxed{-\\frac{1}{2}}", "-0.5"),
        ("The answer is 18 apples.", "18"),
        ("\\boxed{2^{10}}", "1024"),
    ],
)
def test_equivalent_forms_are_correct(text: str, gold: str) -> None:
    v = grade(text, gold)
    assert v.status == "correct", v


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("\\boxed{2}", "3"),
        ("#### 72", "73"),
        ("\\boxed{\\boxed{1}} then \\boxed{2}", "1"),  # last box wins
        ("\\boxed{0.333}", "1/3"),  # exact comparison: a rounded decimal is not the fraction
        ("\\boxed{x+2}", "x+1"),
        ("\\boxed{(1,2)}", "[1,2]"),
        ("\\boxed{2\\pi}", "\\pi"),
    ],
)
def test_different_answers_are_incorrect(text: str, gold: str) -> None:
    v = grade(text, gold)
    assert v.status == "incorrect", v


def test_unknowns() -> None:
    assert grade("I am not sure.", "3") == Verdict("unknown", None, "no_answer")
    assert grade("we get 3", "3", last_number_fallback=False) == Verdict("unknown", None, "no_answer")
    assert grade("we get 3", "3").status == "correct"
    assert grade("\\boxed{" + "1+" * 600 + "1}", "1201").reason == "too_long"
    for tower in ("10^{10^{10}}", "(1+x)^{100000}", "100000000!", "(10^{10})!", "9^{9^{9^{9}}}"):
        v = grade(f"\\boxed{{{tower}}}", "5")
        assert v == Verdict("unknown", tower, "too_complex")


def test_model_text_is_never_executed(tmp_path: Path) -> None:
    # The folder name holds a number equal to the gold answer, as pytest's first temp folder "pytest-0" does:
    # the verdict must not depend on where the test happens to run.
    marker = tmp_path / "pytest-0" / "pwned"
    marker.parent.mkdir()
    payload = f"__import__('os').system('touch {marker}')"
    for text in (payload, f"\\boxed{{{payload}}}", f"The answer is {payload}.", f"#### {payload}"):
        for gold in ("0", "x+1"):
            assert grade(text, gold).status != "correct"
    assert not marker.exists()


def test_interval_set_tuple_latex_never_crash() -> None:
    for text in (
        "\\boxed{(1,2)}",
        "\\boxed{[1, \\infty)}",
        "\\boxed{\\{1,2,3\\}}",
        "\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}",
        "\\boxed{x \\in (0, 1]}",
        "\\boxed{\\frac{1}{0}}",
        "\\boxed{}}{{",
        "\\boxed{\\text{(B)}}",
        "\\boxed{a=1, b=2}",
    ):
        for gold in ("(1,2)", "\\{1,2\\}", "B", "3", "\\frac{", "}{"):
            assert grade(text, gold).status in ("correct", "incorrect", "unknown")


def test_huge_text_is_fast() -> None:
    texts = [
        "word " * 200_000 + "#### 7",
        "1 " * 500_000 + "\n7",
        "1 " * 500_000,  # one final line far longer than an answer sentence: no fallback
        "\\boxed{" * 140_000,
        "{" * 1_000_000,
        "x" * 1_000_000,
        "The answer is " + "$" * 1_000_000,  # wrapper stripping once ran before the length limit: quadratic
        "#### " + "$" * 1_000_000,
        "The answer is " + "**" * 500_000 + "7",
    ]
    verdicts = [grade(t, "7") for t in texts]
    assert [v.status for v in verdicts[:2]] == ["correct", "correct"]
    assert all(v.status == "unknown" for v in verdicts[2:]), verdicts
    assert verdicts[6].reason == verdicts[7].reason == verdicts[8].reason == "too_long"


def test_grading_from_worker_threads() -> None:
    # Off the main thread math-verify cannot use signal.alarm; grading must still work there.
    cases = [
        ("\\boxed{y+1}", "1+y", "correct"),
        ("\\boxed{\\frac{\\sqrt{3}}{3}}", "\\frac{1}{\\sqrt{3}}", "correct"),
        ("#### 5", "5", "correct"),
        ("\\boxed{y+2}", "1+y", "incorrect"),
        ("\\boxed{(1+y)^{5000}}", "1", "unknown"),
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda c: grade(c[0], c[1]).status, cases * 3))
    assert got == [c[2] for c in cases] * 3


def test_three_verdicts_and_as_number() -> None:
    assert [grade(t, "4").status for t in ["#### 4", "#### 5", "?"]] == ["correct", "incorrect", "unknown"]
    assert as_number("1,234") == 1234
    assert as_number("-\\frac{3}{4}") == Fraction(-3, 4)
    assert as_number("72.0") == 72
    assert as_number("$5") == 5
    assert as_number("1/0") is None
    assert as_number("x") is None
    assert as_number("1,23") is None


# ---------------------------------------------------------------- the last-number fallback
_prose = st.text(alphabet=st.sampled_from("abcdefgh ,.:+-=0123456789"), max_size=80)


@settings(max_examples=200, deadline=None)
@given(
    earlier=st.lists(_prose, max_size=5),
    final=st.text(alphabet=st.sampled_from("abcdefgh ,.:+-="), max_size=60).filter(str.strip),
)
def test_fallback_never_reads_a_number_before_the_final_line(earlier: list[str], final: str) -> None:
    """Numbers on earlier lines are never an answer: a final (non-blank) line without one gives no answer."""
    assert extract_answer("\n".join([*earlier, final])) is None


@settings(max_examples=200, deadline=None)
@given(prefix=st.text(max_size=300), number=st.integers(-(10**6), 10**6))
def test_an_appended_answer_line_is_always_read(prefix: str, number: int) -> None:
    """Whatever came before, a final line "The answer is N." (the simulated policy's) grades N."""
    text = prefix.replace("\\", "/") + f"\nThe answer is {number}."
    if "\\boxed" in text or "\\fbox" in text:
        return
    assert grade(text, str(number)).status == "correct"


def test_truncated_completions_are_unknown_never_correct() -> None:
    assert is_truncated("length") and not is_truncated("stop") and not is_truncated(None)
    assert grade_completion("The answer is 7.", "7", "length") == Verdict("unknown", None, "truncated")
    assert grade_completion("The answer is 7.", "7", "stop").status == "correct"
    assert grade_completion("The answer is 7.", "7", None).status == "correct"


# ---------------------------------------------------------------- the time bound
HOSTILE = [
    ("\\boxed{100!!}", "2"),
    ("\\boxed{9!!!}", "2"),
    ("\\boxed{\\Gamma(99999999)}", "2"),
    (
        "\\boxed{\\det\\begin{pmatrix}"
        + "\\\\".join("&".join(f"x_{{{i}{j}}}" for j in range(9)) for i in range(9))
        + "\\end{pmatrix}}",
        "2",
    ),
]


def _grades(cases: list[tuple[str, str]]) -> list[Verdict]:
    return [grade(text, gold, timeout_s=1.0) for text, gold in cases]


def test_hostile_answers_are_bounded_and_agree_across_threads() -> None:
    """The bound holds in every thread (math-verify's own alarm works only in the main one), same verdicts."""
    grading._judge.cache_clear()
    on_main = _grades(HOSTILE)
    grading._judge.cache_clear()
    with ThreadPoolExecutor(max_workers=1) as pool:
        in_thread = pool.submit(_grades, HOSTILE).result(timeout=300)
    for main_verdict, thread_verdict in zip(on_main, in_thread, strict=True):
        assert main_verdict == thread_verdict
        assert main_verdict.status == "unknown", main_verdict


def test_a_killed_worker_is_replaced_and_grading_goes_on() -> None:
    grading._judge.cache_clear()
    assert grade("\\boxed{\\Gamma(99999998)}", "2", timeout_s=0.5).reason == "timeout"
    assert grade("\\boxed{z+1}", "1+z").status == "correct"
    with ThreadPoolExecutor(max_workers=4) as pool:  # more callers than workers: they wait their turn
        got = list(pool.map(lambda i: grade(f"\\boxed{{z+{i}}}", f"{i}+z").status, range(8)))
    assert got == ["correct"] * 8
    assert grading_pool.POOL._count <= grading_pool.GRADER_PROCESSES


def test_a_dead_worker_is_replaced_and_the_comparison_tried_again() -> None:
    grading._judge.cache_clear()
    worker = grading_pool.POOL._acquire()
    worker.process.kill()
    worker.process.wait()
    grading_pool.POOL._release(worker, healthy=True)  # the pool does not know yet
    assert grade("\\boxed{w+1}", "1+w") == Verdict("correct", "w+1", "math_verify")
    assert worker.process.poll() is not None and worker not in grading_pool.POOL._all


TESTS = str(Path(__file__).resolve().parents[1])


def test_a_worker_whose_libraries_print_still_answers_and_the_noise_goes_to_stderr(monkeypatch, capfd) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    pool = grading_pool.WorkerPool(1, entry="_grading_workers:noisy")
    try:
        assert pool.compare("1+z", "z+1", 30) == ("correct", "math_verify")
        assert pool.compare("2", "z+1", 30) == ("incorrect", "math_verify")
        assert pool._count == 1  # the same worker answered both: it was never taken for broken
    finally:
        pool.kill_all()
    err = capfd.readouterr().err
    assert "noise from python: comparing 1+z" in err and "noise from C" in err


def test_a_worker_that_answers_garbage_is_replaced_and_the_comparison_retried_once(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    always = grading_pool.WorkerPool(1, entry="_grading_workers:garbage")
    try:
        assert always.compare("1+z", "z+1", 30) == ("unknown", "worker_garbage")
        assert always._count == 0  # both workers that answered garbage were killed
    finally:
        always.kill_all()
    monkeypatch.setenv("PRM_TEST_GARBAGE_MARKER", str(tmp_path / "first-worker-was-bad"))
    # the worker inherits only what WORKER_ENV_KEYS names: the marker is let through for this test
    monkeypatch.setattr(grading_pool, "WORKER_ENV_KEYS", grading_pool.WORKER_ENV_KEYS | {"PRM_TEST_GARBAGE_MARKER"})
    first_bad = grading_pool.WorkerPool(1, entry="_grading_workers:garbage")
    try:
        assert first_bad.compare("1+z", "z+1", 30) == ("correct", "math_verify")
    finally:
        first_bad.kill_all()


@pytest.mark.parametrize("transient", ["timeout", "worker_died", "worker_garbage", "error:MemoryError"])
def test_a_transient_failure_is_never_remembered_as_a_verdict(monkeypatch, transient) -> None:
    grading._judge.cache_clear()
    answers = iter([("unknown", transient), ("correct", "math_verify")])
    calls = []

    def fake_compare(gold: str, extracted: str, timeout_s: float) -> tuple[str, str]:
        calls.append(extracted)
        return next(answers)

    monkeypatch.setattr(grading_pool, "compare", fake_compare)
    assert grade("\\boxed{q+1}", "1+q") == Verdict("unknown", "q+1", transient)
    assert grade("\\boxed{q+1}", "1+q") == Verdict("correct", "q+1", "math_verify")
    assert grade("\\boxed{q+1}", "1+q").status == "correct"  # a verdict is remembered
    assert calls == ["q+1", "q+1"]
    grading._judge.cache_clear()


def test_a_worker_reply_speaks_the_verdict_vocabulary() -> None:
    from typing import get_args

    from prm_synth.records import VerdictStatus

    assert set(get_args(VerdictStatus)) == grading_pool.STATUSES
    # which is why the worker's module does not import schema: every worker would load pyarrow
    code = "import sys, prm_synth.grading.pool; print('pyarrow' in sys.modules)"
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == "False\n"


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        grade("#### 1", "1", timeout_s=0)


def test_a_worker_outlives_the_thread_that_started_it() -> None:
    """PR_SET_PDEATHSIG fires when the starting *thread* ends: workers are started by a long-lived thread."""
    grading_pool.POOL.shutdown()
    grading._judge.cache_clear()
    thread = threading.Thread(target=lambda: grade("\\boxed{v+1}", "1+v"))
    thread.start()
    thread.join()
    (worker,) = grading_pool.POOL._idle
    assert grade("\\boxed{v+2}", "2+v").status == "correct"
    assert worker.process.poll() is None and grading_pool.POOL._idle == [worker]


_ORPHAN = """
import sys, threading
from prm_synth.grading import math as grading
from prm_synth.grading import pool as grading_pool
threading.Thread(target=lambda: grading.grade("\\\\boxed{\\\\Gamma(99999997)}", "2", timeout_s=600), daemon=True).start()
while not grading_pool.POOL._all:
    threading.Event().wait(0.05)
(worker,) = grading_pool.POOL._all
print(worker.process.pid, flush=True)
threading.Event().wait(600)
"""


def test_a_busy_worker_dies_with_its_parent() -> None:
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])
    }
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        deadline = time.monotonic() + 60
        while _cpu_ticks(worker_pid) < 30 and time.monotonic() < deadline:  # busy with the comparison
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while _alive(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker_pid), "the grading worker outlived its killed parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie waiting for init counts as gone
    except FileNotFoundError:
        return False


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().split(") ", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_a_forked_child_grades_with_its_own_workers() -> None:
    """A fork copies the pool; the child must not talk to the parent's workers over the shared pipes."""
    import multiprocessing

    assert grade("\\boxed{u+1}", "1+u").status == "correct"  # the parent has a worker now
    parent_workers = {w.process.pid for w in grading_pool.POOL._all}
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        status, child_workers = pool.apply(_grade_in_child)
    assert status == "correct" and not (set(child_workers) & parent_workers)
    assert grade("\\boxed{u+3}", "3+u").status == "correct"  # the parent's workers are untouched


def _grade_in_child() -> tuple[str, list[int]]:
    grading._judge.cache_clear()
    status = grade("\\boxed{u+2}", "2+u").status
    pids = [w.process.pid for w in grading_pool.POOL._all]
    grading_pool.POOL.kill_all()
    return status, pids


@settings(max_examples=50, deadline=None)
@given(
    extra=st.dictionaries(
        st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True).filter(
            lambda k: k not in grading_pool.WORKER_ENV_KEYS and not k.startswith("LC_")
        ),
        st.text(max_size=8),
        max_size=6,
    )
)
def test_a_grading_worker_inherits_no_token_or_key_only_locale_path_and_temp(extra):
    """Math-verify parses model output in the worker: the run's credentials stay in the parent."""
    environ = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "TMPDIR": "/tmp/x", "PYTHONPATH": "/a"}
    environ |= {"HF_TOKEN": "hf_secret", "OPENAI_API_KEY": "sk-secret", "AWS_SECRET_ACCESS_KEY": "s"} | extra
    env = grading_pool.worker_environment(environ, "/pkg")
    assert not {"HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", *extra} & set(env)
    assert env["PYTHONPATH"] == os.pathsep.join(["/pkg", "/a"])
    assert {k: env[k] for k in ("PATH", "LANG", "LC_ALL", "TMPDIR")} == {
        k: environ[k] for k in ("PATH", "LANG", "LC_ALL", "TMPDIR")
    }
