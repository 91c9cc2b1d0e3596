"""Solutions a source brings (`problems.kind: solutions`): RL rollouts, existing data sets, human-labeled sets.

Each raw row becomes a `GivenSolution` (one solution of one question, with its gold answer, its id and any
labels it came with) or a rejection (stage "load") with its reason:
- no question ("missing_question", "bad_question", "empty_question"), text that cannot be stored ("bad_text");
- no gold answer, neither in the row nor in the `gold_answers` file joined by question ("missing_answer",
  "empty_answer", "unparseable_answer");
- no solution: neither `solution` text nor `steps`, or empty ones ("empty_solution"); a solution that is not
  text, or steps that are not a list of non-empty strings ("bad_solution");
- a label that is neither an int nor a list of ratings -1/0/1, or one out of range for given steps
  ("bad_label"; a text solution's labels are checked once it is split, annotate/given.py);
- an id used by an earlier row ("duplicate_id"): ids are kept as the rows' ids, so they must be unique.

Rows of one question are one problem's solutions: they share its id (the `problem_id` column, else one made
from the question's text), so its prefixes are estimated once and the shard's pooling sees them together.
The rows come from sources.py's readers (a file, a folder of them, or a Hugging Face data set), which pass
them in.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prm_synth.config import SolutionFields, SolutionsSource
from prm_synth.problems.gold_answers import load_gold_answers, normalize_question
from prm_synth.problems.row_checks import bad_text, gold_from_field, load_rejection, payload_of, question_fault
from prm_synth.records import Item, Problem, RejectedRecord, RejectReason

__all__ = [
    "GivenSolution",
    "SourceItem",
    "check_given_label",
    "iter_given",
    "problem_of",
    "problems_in",
    "question_id",
    "solution_files",
]

RATINGS = (-1, 0, 1)  # PRM800K's per-step ratings: bad, neutral, good


@dataclass(frozen=True)
class GivenSolution:
    """A solution a source brought: labeled as it is, never sampled. Exactly one of `text` (split by the
    configured strategy) and `steps` (taken as given, their separators put back) is set."""

    id: str  # kept as the labeled row's id
    problem: Problem
    text: str | None = None
    steps: tuple[str, ...] | None = None
    given_first_error: int | None = None  # the earliest wrong step as given (-1: none)
    given_ratings: tuple[int, ...] | None = None  # per-step ratings as given (-1 bad, 0 neutral, 1 good)


# One source row as it leaves a loader: a problem to label, a given solution, or its rejection.
SourceItem = Item | GivenSolution


def problems_in(items: Iterable[SourceItem]) -> Iterator[Problem]:
    """The problem of each loaded item (a given solution's question's); a rejection has none."""
    for item in items:
        if isinstance(item, GivenSolution | Problem):
            yield item.problem if isinstance(item, GivenSolution) else item


def problem_of(item: SourceItem) -> str | None:
    """The problem id a loaded item belongs to (a given solution's question's); None for a rejection."""
    if isinstance(item, GivenSolution):
        return item.problem.id
    return item.id if isinstance(item, Problem) else None


SOLUTION_FILES = (".jsonl", ".ndjson", ".json", ".parquet")


def _natural(name: str) -> list[Any]:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t]


def solution_files(folder: Path) -> list[Path]:
    """The files of solutions in a folder, in natural order (numbers as numbers: verl's `2.jsonl` before
    `10.jsonl`), so dumps named by training step or date come in the order they were written."""
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SOLUTION_FILES]
    return sorted(files, key=lambda p: _natural(p.name))


def question_id(question: str) -> str:
    """The problem id of a question without one: rows of the same text (whitespace aside) share it."""
    return "q-" + hashlib.blake2b(normalize_question(question).encode(), digest_size=8).hexdigest()


def check_given_label(label: Any, steps: int | None) -> tuple[int | None, tuple[int, ...] | None, str | None]:
    """(given first error, given ratings, None) for a label cell, or (None, None, why it is no label).
    `steps`: how many steps the solution has (None: not known yet, a text still to split). A list of
    ratings gives the first error too: its first -1 (-1 where there is none)."""
    if label is None:
        return None, None, None
    if isinstance(label, bool):
        return None, None, f"is a bool ({label!r}), not an int or a list of ratings"
    if isinstance(label, float) and label.is_integer():
        label = int(label)  # a Parquet or pandas column of ints with nulls reads as floats
    if isinstance(label, int):
        if label < -1 or (steps is not None and label >= steps):
            top = "" if steps is None else f", {steps - 1}"
            return None, None, f"{label} is out of range [-1{top}] (-1: no wrong step)"
        return label, None, None
    if isinstance(label, list | tuple):
        if not all(isinstance(r, int) and not isinstance(r, bool) and r in RATINGS for r in label):
            return None, None, f"holds a rating other than -1, 0, 1: {list(label)[:10]!r}"
        if steps is not None and len(label) != steps:
            return None, None, f"has {len(label)} ratings for {steps} steps"
        ratings = tuple(int(r) for r in label)
        return next((i for i, r in enumerate(ratings) if r == -1), -1), ratings, None
    return None, None, f"is a {type(label).__name__}, not an int or a list of ratings"


class _GivenReader:
    """Raw rows to given solutions with one field mapping; remembers ids to reject duplicates."""

    def __init__(self, src: SolutionsSource, source: str) -> None:
        self.src, self.source, self.fields = src, source, src.fields
        self.gold = load_gold_answers(src.gold_answers) if src.gold_answers is not None else {}
        self.seen: set[str] = set()

    def read(self, index: int, row: Any) -> GivenSolution | RejectedRecord:
        f: SolutionFields = self.fields
        if not isinstance(row, dict):
            detail = f"row {index} is a {type(row).__name__}"
            return load_rejection(self.source, index, "not_an_object", detail, payload_of(row))
        raw_id = row.get(f.id)
        row_id = str(raw_id).strip() if raw_id is not None and str(raw_id).strip() else f"{self.source}-{index:06d}"
        problem_id: str | None = None

        def reject(reason: RejectReason, detail: str) -> RejectedRecord:
            return load_rejection(self.source, index, reason, f"row {index}: {detail}", payload_of(row), problem_id)

        if (fault := question_fault(row, f.question, index)) is not None:
            reason, detail = fault  # worded as every source words it, "row N" included
            return load_rejection(self.source, index, reason, detail, payload_of(row), problem_id)
        question = row[f.question]
        raw_problem = row.get(f.problem_id)
        problem_id = str(raw_problem).strip() if raw_problem is not None and str(raw_problem).strip() else None
        problem_id = problem_id or question_id(question)
        gold, reason = gold_from_field(row.get(f.answer), f.answer_format)
        if gold is None and reason in ("missing_answer", "empty_answer"):
            gold = self.gold.get(normalize_question(question)) or None
        if gold is None:
            joined = " nor in the gold_answers file" if self.src.gold_answers is not None else ""
            details = {
                "missing_answer": f"no gold answer in {f.answer!r}{joined}",
                "empty_answer": f"the gold answer in {f.answer!r} is empty{joined}",
            }
            reason = reason or "unparseable_answer"
            return reject(reason, details.get(reason, f"no {f.answer_format} answer in {f.answer!r}"))
        text, steps, why = self._solution(row)
        if why is not None:
            return reject(*why)
        first, ratings, bad = check_given_label(row.get(f.label), None if steps is None else len(steps))
        if bad is not None:
            return reject("bad_label", f"{f.label!r} {bad}")
        for name, value in (("id", row_id), ("problem_id", problem_id), (f.question, question), (f.answer, gold)):
            if (why_text := bad_text(value)) is not None:
                return reject("bad_text", f"{name!r} cannot be stored as UTF-8: {why_text}")
        for i, piece in enumerate(steps if steps is not None else (text or "",)):
            if (why_text := bad_text(piece)) is not None:
                return reject("bad_text", f"the solution (step {i}) cannot be stored as UTF-8: {why_text}")
        if row_id in self.seen:
            return reject("duplicate_id", f"id {row_id!r} was already used by an earlier row (ids name the rows)")
        self.seen.add(row_id)
        problem = Problem(id=problem_id, question=question, gold_answer=gold, source=self.source)
        return GivenSolution(row_id, problem, text, steps, first, ratings)

    def _solution(self, row: dict[str, Any]) -> tuple[str | None, tuple[str, ...] | None, Any]:
        """(text, None, None) or (None, steps, None), or (None, None, (reason, detail))."""
        f, sep = self.fields, self.src.step_separator
        steps = row.get(f.steps)
        if steps is not None:
            if not isinstance(steps, list | tuple) or not all(isinstance(s, str) for s in steps):
                return None, None, ("bad_solution", f"{f.steps!r} is not a list of strings")
            if not steps:
                return None, None, ("empty_solution", f"{f.steps!r} is an empty list")
            if any(not s for s in steps):
                return None, None, ("bad_solution", f"{f.steps!r} holds an empty step")
            # the separators a set stored its steps without go back, so the steps join to the text
            return None, tuple(s + sep for s in steps[:-1]) + (steps[-1],), None
        text = row.get(f.solution)
        if text is None:
            return None, None, ("empty_solution", f"neither {f.solution!r} nor {f.steps!r}")
        if not isinstance(text, str):
            return None, None, ("bad_solution", f"{f.solution!r} is a {type(text).__name__}, not text")
        if not text.strip():
            return None, None, ("empty_solution", f"{f.solution!r} is empty")
        return text, None, None


def iter_given(
    src: SolutionsSource, source: str, rows: Iterator[tuple[int, Any]]
) -> Iterator[GivenSolution | RejectedRecord]:
    """Every raw row of the source as a given solution or its rejection, in order (module doc)."""
    reader = _GivenReader(src, source)  # here: a gold_answers file that cannot be read fails at the call
    return (row if isinstance(row, RejectedRecord) else reader.read(index, row) for index, row in rows)
