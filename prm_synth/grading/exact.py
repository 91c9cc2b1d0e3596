"""Short answers: the solution's stated answer (\\boxed{}, "the answer is ...", "####", else its final
line) against the gold and its `aliases`, after normalization (case, punctuation, articles, spaces); with
`tolerance`, two numbers within it are equal. Answers longer than math's limit are unknown. A gold that
normalizes to nothing (`!!!`, `the`) would match any answer that does too (`???`, `a`): such a problem
is refused at load (`load_refusal`), and a gold alias like it is never matched."""

from __future__ import annotations

import re

from prm_synth.grading import math as math_grading
from prm_synth.grading.keys import dump_key, json_key, load_key
from prm_synth.grading.math import Verdict
from prm_synth.records import Problem

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCT = re.compile(r"[^\w\s.\-/]|(?<!\d)[.\-/]|[.\-/](?!\d)")


class ExactGrader:
    kind = "exact"

    def __init__(self, tolerance: float | None = None, case_sensitive: bool = False) -> None:
        self.tolerance, self.case_sensitive = tolerance, case_sensitive

    def normalize(self, text: str) -> str:
        text = text if self.case_sensitive else text.lower()
        text = _PUNCT.sub(" ", text)
        text = _ARTICLES.sub(" ", text) if not self.case_sensitive else text
        return " ".join(text.split())

    def extract(self, text: str) -> str | None:
        stated = math_grading.extract_answer(text[-4 * math_grading.MAX_ANSWER_CHARS :], last_number_fallback=False)
        if stated is None:
            lines = [line for line in text[-math_grading.MAX_ANSWER_CHARS :].splitlines() if line.strip()]
            stated = lines[-1] if lines and len(lines[-1]) <= math_grading.FALLBACK_LINE_CHARS else None
        if stated is None or len(stated) > math_grading.MAX_ANSWER_CHARS:
            return None
        return stated.strip()

    def same(self, a: str, b: str) -> bool:
        if self.normalize(a) == self.normalize(b):
            return True
        if self.tolerance is not None:
            x, y = math_grading.as_number(a.strip()), math_grading.as_number(b.strip())
            if x is not None and y is not None:
                return abs(float(x) - float(y)) <= self.tolerance
        return False

    def key(self, problem: Problem) -> str:
        return dump_key(json_key(problem))

    def _golds(self, data: dict[str, object]) -> list[str]:
        """The gold and its aliases that mean something after normalization (or as numbers)."""
        aliases = data.get("aliases") or []
        golds = [str(data.get("answer", ""))] + [str(a) for a in aliases]  # type: ignore[union-attr]
        return [g for g in golds if self.normalize(g) or math_grading.as_number(g.strip()) is not None]

    def load_refusal(self, problem: Problem) -> str | None:
        """Why `problem` cannot be graded by this grader (refused at load), or None. Only a problem that
        has a gold is checked (under majority a problem may come without one)."""
        if not problem.gold_answer.strip():
            return None
        data = load_key(self.key(problem))
        if self._golds(data):
            return None
        return (
            f"the gold answer {problem.gold_answer[:80]!r} normalizes to nothing under grader.kind exact (case, "
            "punctuation and articles are dropped): any answer that does too would be graded right"
        )

    def grade(self, text: str, key: str) -> Verdict:
        golds = self._golds(load_key(key))
        if not golds:
            return Verdict("unknown", None, "unparseable_gold")
        stated = self.extract(text)
        if stated is None:
            return Verdict("unknown", None, "no_answer")
        right = any(self.same(stated, g) for g in golds)
        return Verdict("correct" if right else "incorrect", stated, "exact")

    def canonical(self, text: str, key: str) -> str | None:
        stated = self.extract(text)
        if stated is None:
            return None
        if self.tolerance is not None and (number := math_grading.as_number(stated)) is not None:
            return str(number)
        return self.normalize(stated) or None

    def with_answer(self, key: str, answer: str) -> str:
        return dump_key({**load_key(key), "answer": answer})
