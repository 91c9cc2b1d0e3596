"""What one `grade` call costs on each path: the in-process exact-number path and the math-verify worker path.

- numeric: "... The answer is N." against an integer gold (the simulated policy's and GSM8K's shape);
- worker: a LaTeX answer that needs math-verify (sympy) in a worker process, every call a cache miss;
- cached: the same LaTeX comparison again (the verdict cache);
- start: starting one worker process (once per worker, and after each kill on a missed deadline);
- hostile: a comparison that misses its deadline (`timeout_s`), then the worker is killed and replaced;
- code batch: `--programs` distinct programs (a short loop, then HumanEval-style tests) graded by the `code`
  grader one by one (`grader.sandbox.workers: 1`) and as one batch in its pool (the default, min(4, CPUs)),
  each run in its own bubblewrap sandbox; the speedup is their ratio, measured in the same run.

    .venv/bin/python benchmarks/grading_cost.py [--calls 300] [--programs 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from prm_synth.config.grader import SandboxLimits
from prm_synth.grading import code as code_grading
from prm_synth.grading import math as grading
from prm_synth.grading import pool as grading_pool
from prm_synth.grading import sandbox
from prm_synth.grading.code import CodeGrader
from prm_synth.grading.keys import dump_key
from prm_synth.grading.math import grade

CODE_TESTS = "def check(candidate):\n    assert candidate(3) == 4\n"


def code_batch(programs: int) -> dict[str, float | int | None]:
    """Seconds to grade `programs` distinct programs one by one and as one batch (the verdict cache
    cleared before each), and their ratio."""
    if sandbox.bwrap_binary() is None:
        return {"code_programs": programs, "code_speedup": None}
    key = dump_key({"tests": CODE_TESTS, "entry_point": "inc"})
    texts = [
        f"```python\ntotal = sum(range({200_000 + i}))\ndef inc(x):\n    return x + 1\n```\n" for i in range(programs)
    ]
    limits = SandboxLimits(cpu_s=10, wall_s=120)
    seconds = {}
    verdicts = {}
    for name, workers in (("serial", 1), ("pool", None)):
        code_grading._run.cache_clear()
        grader = CodeGrader(limits.model_copy(update={"workers": workers}))
        start = time.perf_counter()
        verdicts[name] = grader.grade_many(texts, key)
        seconds[name] = time.perf_counter() - start
    assert verdicts["serial"] == verdicts["pool"], "the pool changed a verdict"
    return {
        "code_programs": programs,
        "code_workers": code_grading.default_workers(),
        "code_serial_s": round(seconds["serial"], 3),
        "code_pool_s": round(seconds["pool"], 3),
        "code_speedup": round(seconds["serial"] / seconds["pool"], 2),
        "code_all_passed": all(v.status == "correct" for v in verdicts["pool"]),
    }


def _per_call(texts_and_golds: list[tuple[str, str]]) -> list[float]:
    out = []
    for text, gold in texts_and_golds:
        start = time.perf_counter()
        grade(text, gold)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--programs", type=int, default=16, help="programs in the code batch (0: skip it)")
    args = parser.parse_args()
    n = args.calls

    grading._judge.cache_clear()
    numeric = _per_call([(f"Step 1: {i} + 1 = {i + 1}.\nThe answer is {i + 1}.", str(i + 1)) for i in range(n)])

    start = time.perf_counter()
    worker = grading_pool._Worker()
    start_s = time.perf_counter() - start
    worker.kill()

    grade("\\boxed{x+1}", "1+x")  # the pool's first worker starts here, outside the measurement
    latex = [(f"\\boxed{{\\frac{{x+{i}}}{{2}}}}", f"\\frac{{{i}+x}}{{2}}") for i in range(n)]
    worker_path = _per_call(latex)
    cached = _per_call(latex)

    hostile = []
    for i in range(3):
        start = time.perf_counter()
        grade(f"\\boxed{{\\Gamma({99999990 + i})}}", "2", timeout_s=1.0)
        grade("\\boxed{y+1}", "1+y")  # includes replacing the killed worker
        hostile.append(time.perf_counter() - start)
    grading_pool.POOL.shutdown()

    def ms(xs: list[float]) -> tuple[float, float]:
        return statistics.median(xs) * 1e3, sorted(xs)[int(0.95 * (len(xs) - 1))] * 1e3

    rows = [
        ("numeric (in-process)", *ms(numeric)),
        ("worker (math-verify)", *ms(worker_path)),
        ("cached verdict", *ms(cached)),
        ("worker start", start_s * 1e3, start_s * 1e3),
        ("hostile (1 s deadline + respawn)", *ms(hostile)),
    ]
    print(f"{'path':36} {'median ms':>10} {'p95 ms':>10}")
    for name, med, p95 in rows:
        print(f"{name:36} {med:10.3f} {p95:10.3f}")
    code = code_batch(args.programs) if args.programs > 0 else {}
    if code.get("code_speedup") is not None:
        print(
            f"code batch of {code['code_programs']}: one by one {code['code_serial_s']} s, "
            f"pool of {code['code_workers']} {code['code_pool_s']} s, speedup {code['code_speedup']}x"
        )
    print(
        json.dumps(
            {
                "calls": n,
                "numeric_ms": round(ms(numeric)[0], 4),
                "worker_ms": round(ms(worker_path)[0], 3),
                "cached_ms": round(ms(cached)[0], 4),
                "worker_start_ms": round(start_s * 1e3, 1),
                "hostile_ms": round(ms(hostile)[0], 1),
            }
            | code
        )
    )


if __name__ == "__main__":
    main()
