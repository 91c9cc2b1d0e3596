"""Multiple choice: the key holds `options` (a list, the first is (A)) and `answer` (a letter or an
option's text); a solution's final choice is read as "(B)", "B.", "B)", "the answer is B", \\boxed{B} or
the option's own text. A choice outside the options, or none, is unknown ("no_answer").

A letter-like option (an option whose text is a single letter, e.g. options ["B", "A"]): a single letter,
in the gold and in a solution, is always read as a letter, never as an option's text; so "The answer is
B" chooses (B), whose text is "A". choice-file rejects at load a row whose answer is a letter that is also
another option's text, and a row whose options repeat."""

from __future__ import annotations

import re
import string

from prm_synth.grading import math as math_grading
from prm_synth.grading.keys import dump_key, json_key, load_key
from prm_synth.grading.math import Verdict
from prm_synth.records import Problem

TAIL_CHARS = 4000  # only the end of a solution holds its final choice: bounds the work
LETTERS = string.ascii_uppercase
_WRAPPED_LETTER = re.compile(r"^[\s*$(\[{]*(?:option\s+)?\(?([A-Z])\)?(?:[\s.:)\]}*$]|$)", re.IGNORECASE)
_PAREN_LETTER = re.compile(r"\(([A-Z])\)")
_LINE_LETTER = re.compile(r"(?:^|\n)\s*\**\s*([A-Z])[.)]\s")
_ANSWER_LETTER = re.compile(r"\b(?:answer|choice|option)\s*(?:is|:)?\s*\**\s*\(?([A-Z])\)?(?![A-Za-z])", re.IGNORECASE)


def normalize(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def gold_letter(key: dict[str, object]) -> str | None:
    options = [str(o) for o in key.get("options") or []]  # type: ignore[union-attr]
    answer = str(key.get("answer", "")).strip()
    if len(answer) == 1 and answer.upper() in LETTERS[: len(options)]:
        return answer.upper()
    by_text = {normalize(o): LETTERS[i] for i, o in enumerate(options[: len(LETTERS)])}
    return by_text.get(normalize(answer))


def read_choice(text: str, options: list[str]) -> str | None:
    """The letter of the solution's final choice, or None."""
    valid = LETTERS[: min(len(options), len(LETTERS))]
    texts = {normalize(o): LETTERS[i] for i, o in enumerate(options[: len(valid)]) if normalize(o)}
    tail = text[-TAIL_CHARS:]
    stated = math_grading.extract_answer(tail, last_number_fallback=False)
    if stated is not None:
        m = _WRAPPED_LETTER.match(stated)
        if m and m.group(1).upper() in valid:
            return m.group(1).upper()
        if normalize(stated) in texts:
            return texts[normalize(stated)]
    for pattern in (_ANSWER_LETTER, _PAREN_LETTER):
        found = [x.upper() for x in pattern.findall(tail) if x.upper() in valid]
        if found:
            return found[-1]
    lines = [line for line in tail.splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    found = [x for x in _LINE_LETTER.findall("\n" + last) if x in valid]
    if found:
        return found[-1]
    m = _WRAPPED_LETTER.match(last)
    if m and m.group(1) in valid and len(last.strip()) <= 4:
        return m.group(1)
    named = {letter for norm, letter in texts.items() if norm in normalize(last)}
    return named.pop() if len(named) == 1 else None


class ChoiceGrader:
    kind = "choice"

    def key(self, problem: Problem) -> str:
        return dump_key(json_key(problem))

    def grade(self, text: str, key: str) -> Verdict:
        data = load_key(key)
        options = [str(o) for o in data.get("options") or []]
        gold = gold_letter(data)
        if gold is None:
            return Verdict("unknown", None, "unparseable_gold")
        chosen = read_choice(text, options)
        if chosen is None:
            return Verdict("unknown", None, "no_answer")
        return Verdict("correct" if chosen == gold else "incorrect", chosen, "choice")

    def canonical(self, text: str, key: str) -> str | None:
        return read_choice(text, [str(o) for o in load_key(key).get("options") or []])

    def with_answer(self, key: str, answer: str) -> str:
        return dump_key({**load_key(key), "answer": answer})
