"""Grader inputs that could only grade nonsense are rejected at load, each with its reason, before any
sampling: an `exact` gold that normalizes to nothing, `code-file` tests that do not compile or an entry
point that is no plain name, `choice` options that repeat or an answer letter that is another option's
text. What a letter-like option reads as is shown as the docs state it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from prm_synth.config import validate_config
from prm_synth.config.domain_sources import ChoiceFileSource, CodeFileSource
from prm_synth.config.grader import GraderConfig
from prm_synth.grading.exact import ExactGrader
from prm_synth.grading.keys import dump_key
from prm_synth.grading.registry import make_grader
from prm_synth.pipeline import iter_shards
from prm_synth.problems.sources import iter_problems
from prm_synth.records import Problem, RejectedRecord


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _loaded(data: dict[str, Any]) -> list[Any]:
    """The items a run's shards hold, as `prm-synth run` loads them."""
    config = validate_config(data | {"policy": {"kind": "simulated"}})
    return [item for shard in iter_shards(config) for item in shard.items]


def test_an_exact_gold_that_normalizes_to_nothing_is_refused_at_load(tmp_path: Path) -> None:
    rows = [
        {"question": "Shout?", "answer": "!!!"},
        {"question": "Article?", "answer": "the"},
        {"question": "Capital?", "answer": "Paris"},
        {"question": "Aliased?", "answer": "...", "also": ["forty two"]},
        {"question": "Zero?", "answer": "0"},
    ]
    path = _write(tmp_path / "qa.jsonl", rows)
    problems = {"kind": "file", "path": str(path), "fields": {"aliases": "also"}}
    items = _loaded({"problems": problems, "grader": {"kind": "exact"}})
    refused = [i for i in items if isinstance(i, RejectedRecord)]
    assert [(r.reason, r.stage) for r in refused] == [("unparseable_answer", "load")] * 2
    assert "'!!!' normalizes to nothing" in (refused[0].detail or "") and "'the'" in (refused[1].detail or "")
    assert [i.gold_answer for i in items if isinstance(i, Problem)] == ["Paris", "...", "0"]
    # the same file under the math grader loads as before: the refusal is the exact grader's
    plain = _loaded({"problems": {"kind": "file", "path": str(path)}})
    assert all(isinstance(i, Problem) for i in plain)


NOTHING_WORDS = st.sampled_from([*"!?.,;:'\"()[] ", " the ", " a ", " an "])


@given(st.lists(NOTHING_WORDS, max_size=6).map("".join))
def test_an_answer_is_never_graded_right_against_a_gold_of_nothing(answer: str) -> None:
    grader = ExactGrader()
    for gold in ("!!!", "the", " a "):
        verdict = grader.grade(f"The answer is {answer}", dump_key({"answer": gold}))
        assert verdict.status != "correct"


def test_code_file_tests_that_do_not_compile_and_entry_points_not_plain_names_are_rejected(tmp_path: Path) -> None:
    good_tests = "def check(candidate):\n    assert candidate(1) == 2\n"
    rows = [
        {"id": "ok", "prompt": "Inc.", "tests": good_tests, "entry_point": "inc"},
        {"id": "syntax", "prompt": "Inc.", "tests": "def check(candidate:\n    pass\n", "entry_point": "inc"},
        {"id": "nul", "prompt": "Inc.", "tests": "assert inc(1) == 2\x00\n", "entry_point": "inc"},
        {"id": "keyword", "prompt": "Inc.", "tests": good_tests, "entry_point": "class"},
        {"id": "fullwidth", "prompt": "Inc.", "tests": good_tests, "entry_point": "\uff49nc"},  # NFKC: "inc"
        {"id": "ligature", "prompt": "Inc.", "tests": good_tests, "entry_point": "\ufb01nd"},  # NFKC: "find"
    ]
    items = list(iter_problems(CodeFileSource(path=_write(tmp_path / "code.jsonl", rows))))
    assert [i.id for i in items if isinstance(i, Problem)] == ["ok"]
    rejected = {i.problem_id: i for i in items if isinstance(i, RejectedRecord)}
    assert {k: r.reason for k, r in rejected.items()} == {
        "syntax": "missing_tests",
        "nul": "missing_tests",
        "keyword": "bad_question",
        "fullwidth": "bad_question",
        "ligature": "bad_question",
    }
    assert "do not compile (SyntaxError at line 1" in (rejected["syntax"].detail or "")
    assert "plain Python function name" in (rejected["keyword"].detail or "")


def test_choice_rows_with_repeated_options_or_an_ambiguous_letter_are_rejected(tmp_path: Path) -> None:
    rows = [
        {"id": "repeat", "question": "Pick", "options": ["Red", "blue", "red!"], "answer": "B"},
        {"id": "blank", "question": "Pick", "options": ["!!!", "???"], "answer": "A"},
        {"id": "ambiguous", "question": "Grade?", "options": ["B", "A", "C"], "answer": "B"},
        {"id": "own", "question": "Grade?", "options": ["A", "B"], "answer": "B"},
        {"id": "letters", "question": "Grade?", "options": ["B", "A", "C"], "answer": "C"},
    ]
    items = list(iter_problems(ChoiceFileSource(path=_write(tmp_path / "mc.jsonl", rows), id="id")))
    rejected = {i.problem_id: i for i in items if isinstance(i, RejectedRecord)}
    assert {k: r.reason for k, r in rejected.items()} == {
        "repeat": "bad_question",
        "blank": "bad_question",
        "ambiguous": "unparseable_answer",
    }
    assert "(A) and (C) are the same" in (rejected["repeat"].detail or "")
    kept = {p.id: p for p in items if isinstance(p, Problem)}
    assert set(kept) == {"own", "letters"}
    # a single letter is read as a letter, never as an option's text: "B" chooses (B), whose text is "A"
    grader = make_grader(GraderConfig(kind="choice"))
    key = grader.key(kept["letters"])
    assert grader.grade("The answer is B", key).extracted == "B"
    assert grader.grade("The answer is (C)", key).status == "correct"
    assert grader.grade("The answer is B", key).status == "incorrect"
