"""A grader's key: the string the pipeline passes around as "the gold". For math it is the gold answer
itself; the other kinds put what they need (options, aliases, tests) into JSON built from the problem's
`grading` field, with the gold answer as `answer`."""

from __future__ import annotations

import functools
import json
from typing import Any

from prm_synth.records import Problem


def json_key(problem: Problem) -> dict[str, Any]:
    """The problem's grading data (`Problem.grading`, JSON) with its gold answer as `answer`."""
    data = json.loads(problem.grading) if problem.grading else {}
    return {**data, "answer": problem.gold_answer}


def dump_key(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, sort_keys=True)


@functools.lru_cache(maxsize=4096)
def load_key(key: str) -> dict[str, Any]:
    """A JSON key back as a mapping; a key that is not one is a bare answer."""
    try:
        data = json.loads(key)
    except ValueError:
        return {"answer": key}
    return data if isinstance(data, dict) else {"answer": key}
