"""Multiple-choice problems from a JSONL file: a question, a list of options, the answer (a letter or an
option's text). The question shown to the policy lists the options as (A), (B), ...; a row without a
usable question, options or answer is rejected with its reason, never dropped. So is a row whose options
repeat (two options the same after normalization, case and punctuation: a choice of one could not be
told from the other), and one whose answer is a single letter that is also another option's text
(answer "B" with options ["B", "A"]): a single letter is always read as a letter, in the gold and in a
solution (grading/choice.py), so the row cannot say which it means."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

from prm_synth.config.domain_sources import ChoiceFileSource
from prm_synth.grading.choice import gold_letter, normalize
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
    seen_text: dict[str, int] = {}
    for i, option in enumerate(options):
        text = normalize(option)
        if text in seen_text:
            letters = f"({string.ascii_uppercase[seen_text[text]]}) and ({string.ascii_uppercase[i]})"
            return no("bad_question", f"row {index}: options {letters} are the same ({option!r}) once normalized")
        seen_text[text] = i
    if isinstance(answer, str) and len(answer.strip()) == 1 and answer.strip().isalpha():
        letter = answer.strip().upper()
        position = seen_text.get(normalize(answer))
        if position is not None and string.ascii_uppercase[position] != letter:
            return no(
                "unparseable_answer",
                f"row {index}: the answer {answer!r} is the letter ({letter}) and the text of option "
                f"({string.ascii_uppercase[position]}); a single letter is read as a letter: give the letter",
            )
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
