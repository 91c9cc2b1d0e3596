import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import pytest

from prm_synth.grading import Verdict, as_number, extract_answer, grade, grade_many, last_boxed


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
        ("cost 1,234.50 dollars", "1,234.50"),
        ("a ratio of 3/4", "3/4"),
        ("no numbers at all", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


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
    marker = tmp_path / "pwned"
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
    texts = ["word " * 200_000 + "#### 7", "1 " * 500_000, "\\boxed{" * 140_000, "{" * 1_000_000, "x" * 1_000_000]
    start = time.perf_counter()
    verdicts = [grade(t, "7") for t in texts]
    assert time.perf_counter() - start < 5
    assert verdicts[0].status == "correct"
    assert verdicts[1].status == "incorrect"
    assert all(v.status == "unknown" for v in verdicts[2:])


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


def test_grade_many_and_as_number() -> None:
    assert [v.status for v in grade_many(["#### 4", "#### 5", "?"], "4")] == ["correct", "incorrect", "unknown"]
    assert as_number("1,234") == 1234
    assert as_number("-\\frac{3}{4}") == Fraction(-3, 4)
    assert as_number("72.0") == 72
    assert as_number("$5") == 5
    assert as_number("1/0") is None
    assert as_number("x") is None
    assert as_number("1,23") is None
