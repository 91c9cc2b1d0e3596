"""Multiple-choice problems from a JSONL file: a question, a list of options, the answer (a letter or an
option's text). The question shown to the policy lists the options as (A), (B), ...; a row without a
usable question, options or answer is rejected with its reason, never dropped."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

from prm_synth.config.domain_sources import ChoiceFileSource
from prm_synth.grading.choice import gold_letter
from prm_synth.problems.jsonl_rows import jsonl_rows, row_start
from prm_synth.records import Item, Problem, RejectedRecord

MAX_OPTIONS = len(string.ascii_uppercase)


def render_question(question: str, options: list[str]) -> str:
    lines = [f"({string.ascii_uppercase[i]}) {o}" for i, o in enumerate(options)]
    return question.rstrip() + "\n\n" + "\n".join(lines) + "\n\nEnd with: The answer is (X)."


def _read(index: int, row: Any, src: ChoiceFileSource, seen: set[str], gold_optional: bool) -> Item:
    source = "choice-file"
    pid, no, rejected = row_start(index, row, src.id, src.question, "choice", source)
    if rejected is not None:
        return rejected
    question, options, answer = row[src.question], row.get(src.options), row.get(src.answer)
    if (
        not isinstance(options, list)
        or not 2 <= len(options) <= MAX_OPTIONS
        or not all(isinstance(o, str) for o in options)
    ):
        return no("bad_question", f"row {index}: {src.options!r} is not a list of 2 to {MAX_OPTIONS} strings")
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        if not gold_optional:
            return no("missing_answer", f"row {index} has no {src.answer!r}")
        answer = ""
    elif not isinstance(answer, str) or gold_letter({"answer": answer, "options": options}) is None:
        return no("unparseable_answer", f"row {index}: {answer!r} is neither a letter of the options nor one's text")
    if pid in seen:
        return no("duplicate_id", f"row {index}: id {pid!r} was already used by an earlier row")
    seen.add(pid)
    return Problem(
        id=pid,
        question=render_question(question, options),
        gold_answer=answer,
        source=source,
        grading=json.dumps({"options": options}, ensure_ascii=False),
    )


def iter_choice_file(src: ChoiceFileSource, gold_optional: bool = False) -> Iterator[Item]:
    seen: set[str] = set()
    for item in jsonl_rows(src.path, "choice-file"):
        yield item if isinstance(item, RejectedRecord) else _read(item[0], item[1], src, seen, gold_optional)
