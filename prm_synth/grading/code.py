"""Code with tests: the solution's last fenced Python block runs against the problem's `tests` (source
that defines `check(candidate)` or plain asserts) and `entry_point`, in the bubblewrap sandbox
(prm_synth/grading/sandbox.py). Passing every test is correct, failing is incorrect, a limit hit or a
sandbox fault is unknown with its reason. Verdicts are cached (a program and its tests give the same one),
except a sandbox that could not be made."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from prm_synth.config.grader import SandboxLimits
from prm_synth.grading.keys import dump_key, json_key, load_key
from prm_synth.grading.math import Verdict
from prm_synth.grading.sandbox import run_tests
from prm_synth.records import Problem

MAX_PROGRAM_CHARS = 100_000


def default_workers() -> int:
    """Sandboxed runs at once by default (`grader.sandbox.workers`: None): min(4, CPUs)."""
    return max(1, min(4, os.cpu_count() or 1))


_FENCE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def last_code_block(text: str) -> str | None:
    """The last fenced block (```python, ```py or a bare ```), an unclosed last fence included."""
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    return blocks[-1] if blocks else None


@functools.lru_cache(maxsize=8192)
def _run(program: str, tests: str, entry_point: str, limits: SandboxLimits) -> Verdict:
    """One program's verdict, cached for the process's life (the sampled solution and the rollouts that
    end on the same program, across every grader of the run, run it once)."""
    result = run_tests(program, tests, entry_point, limits)
    if result.status == "pass":
        return Verdict("correct", None, "passed")
    if result.status == "fail":
        return Verdict("incorrect", None, result.reason)
    return Verdict("unknown", None, result.reason)


class CodeGrader:
    kind = "code"

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits

    def key(self, problem: Problem) -> str:
        return dump_key(json_key(problem))

    def grade(self, text: str, key: str) -> Verdict:
        data = load_key(key)
        tests, entry_point = data.get("tests"), data.get("entry_point")
        if not isinstance(tests, str) or not tests.strip() or not isinstance(entry_point, str):
            return Verdict("unknown", None, "no_tests")
        program = last_code_block(text)
        if program is None or not program.strip():
            return Verdict("unknown", None, "no_answer")
        if len(program) > MAX_PROGRAM_CHARS:
            return Verdict("unknown", None, "too_long")
        prefix = str(data.get("prefix") or "")  # HumanEval's prompt (imports, helpers) before the solution
        verdict = _run(prefix + "\n" + program, tests, entry_point, self.limits)
        if verdict.reason == "sandbox_unavailable":
            _run.cache_clear()  # never remembered: the next program tries to make a sandbox again
        return verdict

    def grade_many(self, texts: Sequence[str], key: str) -> list[Verdict]:
        """`grade` of each text, in order, the distinct ones run at once in a bounded pool of threads (each
        thread waits on its own sandbox process: the GIL is free while it runs). A text that repeats is
        run once: the verdicts are the same as one by one, whatever the pool's size or timing."""
        distinct = list(dict.fromkeys(texts))
        workers = min(self.limits.workers or default_workers(), len(distinct))
        if workers <= 1:
            verdicts = [self.grade(t, key) for t in distinct]
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prm-synth-sandbox") as pool:
                verdicts = list(pool.map(lambda t: self.grade(t, key), distinct))
        by_text = dict(zip(distinct, verdicts, strict=True))
        return [by_text[t] for t in texts]

    def canonical(self, text: str, key: str) -> str | None:
        return None  # programs are not voted on (majority takes math, choice or exact)

    def with_answer(self, key: str, answer: str) -> str:
        return dump_key({**load_key(key), "answer": answer})
