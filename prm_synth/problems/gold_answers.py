"""Gold answers joined by question text: a file of questions and answers (GSM8K's, MATH's) for sets of
solutions that carry none (ProcessBench), read by `prm-synth eval labels --gold-answers` and by
`problems.kind: solutions` (`gold_answers:`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prm_synth.errors import PrmSynthInputError
from prm_synth.problems.row_checks import gold_from_field


class BenchFileError(PrmSynthInputError):
    """A benchmark or gold-answer file that cannot be read as one (exit 2); the message names the row."""


def json_rows(path: Path, lines: bool) -> list[Any]:
    """The rows of a JSON list file, or of a JSON-lines file; BenchFileError naming what is not JSON."""
    try:
        text = path.read_text()
        if lines:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        rows = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BenchFileError(f"{path}: not JSON{' lines' if lines else ''} ({type(e).__name__}: {e})") from None
    if not isinstance(rows, list):
        raise BenchFileError(f"{path}: expected a JSON list of samples")
    return rows


def normalize_question(text: str) -> str:
    """Join key for problem text: whitespace runs collapse (files differ in spacing, not in words)."""
    return " ".join(text.split())


def gold_from_answer(answer: str) -> str:
    """GSM8K's answer column ends in '#### 72': the gold answer is what follows (read exactly as the
    problem loader reads it); other text is taken as is."""
    if "####" in answer:
        gold, _ = gold_from_field(answer, "gsm8k")
        return gold or ""
    return answer.strip()


def load_gold_answers(path: str | Path) -> dict[str, str]:
    """Normalized problem text -> gold answer, from JSON lines (or a JSON list) with a question field
    (`question` or `problem`) and an answer field (`answer`, GSM8K's '#### N' understood)."""
    path = Path(path)
    gold: dict[str, str] = {}
    for i, row in enumerate(json_rows(path, lines=path.suffix != ".json")):
        if not isinstance(row, dict):
            raise BenchFileError(f"{path} row {i}: not an object")
        question = row.get("question", row.get("problem"))
        answer = row.get("answer")
        if isinstance(question, str) and answer is not None:
            gold[normalize_question(question)] = gold_from_answer(str(answer))
    return gold
