"""Code problems with tests from a JSONL file (`problems.kind: code-file`): a prompt, the tests (Python
source defining `check(candidate)`, HumanEval's form, or plain asserts) and the entry point (the name of
the function the tests call), an optional reference solution and id. Graded by `grader.kind: code` in the
sandbox (grading/code.py). Each row is checked up front: a row without a prompt, without tests, with tests
that do not compile, or with an entry point that is no plain Python name (a keyword, or a name Python
reads as another: it folds identifiers by NFKC, so `ｆ` defines `f`) is rejected with its reason (stage
"load"), never dropped, before any sampling: every solution would otherwise be graded wrong. The tests
are compiled, never run here (they run only inside the sandbox, against a solution)."""

from __future__ import annotations

import json
import keyword
import unicodedata
from collections.abc import Iterator
from typing import Any

from prm_synth.config.domain_sources import CodeFileSource
from prm_synth.problems.jsonl_rows import jsonl_rows, row_start
from prm_synth.records import Item, Problem, RejectedRecord

SOURCE = "code-file"
MAX_TESTS_CHARS = 200_000  # tests are run, not read by a model: bounded all the same


def instruction(entry_point: str) -> str:
    return f"\n\nEnd with the whole function `{entry_point}`, with its imports, in one ```python code block."


def is_plain_name(name: str) -> bool:
    """A name a function can be defined and called by as written: an identifier, no keyword, and the same
    after NFKC (Python folds identifiers so; a name that changes is found under another)."""
    return name.isidentifier() and not keyword.iskeyword(name) and unicodedata.normalize("NFKC", name) == name


def compile_error(tests: str) -> str | None:
    """Why `tests` do not compile as Python (compiled only, never run), or None when they do."""
    try:
        compile(tests, "tests.py", "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"{type(e).__name__} at line {e.lineno}: {e.msg}"
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:  # NUL bytes, nesting too deep
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


def _read(index: int, row: Any, src: CodeFileSource, seen: set[str]) -> Item:
    pid, no, rejected = row_start(index, row, src.id, src.prompt, "code", SOURCE)
    if rejected is not None:
        return rejected
    prompt, tests, entry = row[src.prompt], row.get(src.tests), row.get(src.entry_point)
    if not isinstance(tests, str) or not tests.strip():
        return no("missing_tests", f"row {index} has no tests in {src.tests!r}: grader.kind code cannot grade it")
    if len(tests) > MAX_TESTS_CHARS:
        return no("missing_tests", f"row {index}: {src.tests!r} is over {MAX_TESTS_CHARS} characters")
    if not isinstance(entry, str) or not is_plain_name(entry):
        return no("bad_question", f"row {index}: {src.entry_point!r} is not a plain Python function name ({entry!r})")
    broken = compile_error(tests)
    if broken is not None:
        return no("missing_tests", f"row {index}: the tests in {src.tests!r} do not compile ({broken})")
    solution = row.get(src.solution) if src.solution else None
    if pid in seen:
        return no("duplicate_id", f"row {index}: id {pid!r} was already used by an earlier row")
    seen.add(pid)
    return Problem(
        id=pid,
        question=prompt.rstrip() + instruction(entry),
        gold_answer=solution if isinstance(solution, str) else "",
        source=SOURCE,
        grading=json.dumps({"entry_point": entry, "tests": tests}, ensure_ascii=False, sort_keys=True),
    )


def iter_code_file(src: CodeFileSource) -> Iterator[Item]:
    seen: set[str] = set()
    for item in jsonl_rows(src.path, SOURCE):
        yield item if isinstance(item, RejectedRecord) else _read(item[0], item[1], src, seen)
