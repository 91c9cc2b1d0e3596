"""What the pipeline itself costs, with a model that costs nothing (the simulated policy).

Labels builtin problems with the binary method at its default (the changepoint search) and per-step MC
for comparison, through
pipeline.process_shard and the shard writer, and splits the CPU time into engine (the simulated
policy writing text), grading, scheduling/annotation logic, and writing. Prints a table and, last,
one JSON line: {"problems_per_s_per_core", "grading_share", "scheduling_share", "writing_share", ...}.

    python benchmarks/pipeline_overhead.py [--problems 2000]

Both methods run once on other problems first (`warm_up`): the process's one-time costs are no
method's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as prm_synth sets it (see prm_synth/__init__.py)

import prm_synth.annotate.scheduler as scheduler_module  # noqa: E402
import prm_synth.sampling.sample as sample_module  # noqa: E402
from prm_synth.config import validate_config  # noqa: E402
from prm_synth.grading.math import grade, grade_completion  # noqa: E402
from prm_synth.pipeline import iter_shards, process_shard  # noqa: E402
from prm_synth.simulated.engines import SimulatedPolicy  # noqa: E402
from prm_synth.store.shards import ShardStore  # noqa: E402


class Timed:
    """Wraps a callable and adds its CPU time to a counter."""

    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        self.fn, self.seconds, self.calls = fn, 0.0, 0

    def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        t = time.process_time()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.process_time() - t
            self.calls += 1


WARM_UP_SEED = 1  # the measured problems are seed 0's


def warm_up(problems: int = 50) -> None:
    """Both methods once, untimed, on other problems (another seed): the process's one-time costs go
    here, not into whichever method is measured first. They are the first shard write's imports
    (datasets, about 0.2 s: 16 % of the default's CPU when it ran first on 200 problems, 40 % of MC's
    when it did), the compiled loops loaded from numba's disk cache, and the tables the change-point
    search builds once. A long run pays them once; `prm-synth run`'s own start-up is measured by
    differencing two run sizes (benchmarks/labeler_cost.py). Other problems, so the search's decision
    memo (annotate/changepoint/memo.py) holds only what any run's first problems would leave in it."""
    for method in ("binary", "mc"):
        measure(method, problems, seed=WARM_UP_SEED)


def measure(method: str, problems: int, seed: int = 0) -> dict[str, float]:
    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": problems, "seed": seed, "min_ops": 3, "max_ops": 12},
            "policy": {"kind": "simulated"},
            "sampling": {"samples_per_problem": 1},
            "annotate": {"method": method, "k": 8},
            "output": {"shard_size": 250},
        }
    )
    engine = SimulatedPolicy(config.policy)  # type: ignore[arg-type]
    engine_timer = Timed(engine.generate)
    engine.generate = engine_timer  # type: ignore[method-assign]
    # Grading, where the pipeline calls it: the scheduler's default grader (rollouts) and the sample
    # stage's (solutions). Both count into one timer.
    grade_timer = Timed(grade)
    scheduler_module.grade = grade_timer
    completion_timer = Timed(grade_completion)
    sample_module.grade_completion = completion_timer
    write_timer = Timed(ShardStore.write_shard)
    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        store = ShardStore(tmp, "bench")
        store.prepare({}, "")
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for shard in iter_shards(config):
            out = process_shard(engine, config, shard, "bench")
            write_timer(
                store,
                shard.index,
                [r.to_row() for r in out.records],
                [r.to_row() for r in out.rejected],
                len(shard.items),
                out.stats,
            )
            rows += len(out.records)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    scheduler_module.grade, sample_module.grade_completion = grade, grade_completion
    grading_s = grade_timer.seconds + completion_timer.seconds
    other = cpu - engine_timer.seconds - grading_s - write_timer.seconds
    return {
        "problems/s/core": round(problems / cpu, 1),
        "rows/s (wall)": round(rows / wall, 1),
        "engine share": round(engine_timer.seconds / cpu, 3),
        "grading share": round(grading_s / cpu, 3),
        "scheduling share": round(other / cpu, 3),
        "writing share": round(write_timer.seconds / cpu, 3),
        "grade calls": grade_timer.calls + completion_timer.calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=2000)
    args = parser.parse_args()
    warm_up()
    table = {method: measure(method, args.problems) for method in ("binary", "mc")}
    cols = list(table["binary"])
    print(f"pipeline overhead, simulated policy, {args.problems} problems of 3-12 steps, k 8 (CPU time shares)")
    print(" " * 10 + "".join(f"{c:>18}" for c in cols))
    for method, values in table.items():
        print(f"{method:<10}" + "".join(f"{values[c]:>18}" for c in cols))
    b = table["binary"]
    print(
        json.dumps(
            {
                "problems_per_s_per_core": b["problems/s/core"],
                "rows_per_s": b["rows/s (wall)"],
                "grading_share": b["grading share"],
                "scheduling_share": b["scheduling share"],
                "writing_share": b["writing share"],
                "engine_share": b["engine share"],
                "mc_problems_per_s_per_core": table["mc"]["problems/s/core"],
            }
        )
    )


if __name__ == "__main__":
    main()
