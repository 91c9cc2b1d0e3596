"""Code with tests: the solution's last fenced Python block runs against the problem's `tests` (source
that defines `check(candidate)` or plain asserts) and `entry_point`, in the bubblewrap sandbox
(prm_synth/grading/sandbox.py). Passing every test is correct, failing is incorrect, a limit hit or a
sandbox fault is unknown with its reason. Verdicts are cached (a program and its tests give the same one),
except the unknowns another try may change (REMEMBERED_UNKNOWN lists the ones kept)."""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
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


# Unknown verdicts worth remembering: the program's own doing whenever it runs, and the wall clock (a
# program that sleeps would cost `wall_s` each time it is graded again). Any other unknown (a memory,
# process or disk bound, no sandbox, no free user) may come of what ran beside it or of the host (fork
# refused with EAGAIN, an allocation refused), and such programs end fast: tried again next time.
REMEMBERED_UNKNOWN = frozenset({"cpu_limit", "output_limit", "file_limit", "wall_limit"})


class _CachedRuns:
    """One program's verdict, cached for the process's life (the sampled solution and the rollouts that
    end on the same program, across every grader of the run, run it once), but for the unknowns that a
    next try may change."""

    def __init__(self, size: int = 8192) -> None:
        self._size = size
        self._verdicts: OrderedDict[tuple[str, str, str, SandboxLimits], Verdict] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, program: str, tests: str, entry_point: str, limits: SandboxLimits) -> Verdict:
        key = (program, tests, entry_point, limits)
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
        result = run_tests(program, tests, entry_point, limits)
        if result.status == "pass":
            verdict = Verdict("correct", None, "passed")
        elif result.status == "fail":
            verdict = Verdict("incorrect", None, result.reason)
        else:
            verdict = Verdict("unknown", None, result.reason)
        if verdict.status != "unknown" or verdict.reason in REMEMBERED_UNKNOWN:
            with self._lock:
                self._verdicts[key] = verdict
                while len(self._verdicts) > self._size:
                    self._verdicts.popitem(last=False)
        return verdict

    def cache_clear(self) -> None:
        with self._lock:
            self._verdicts.clear()


_run = _CachedRuns()


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
        return _run(prefix + "\n" + program, tests, entry_point, self.limits)

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
