"""The probe scheduler against one engine call per probe, on the real vLLM engine (demo model, CPU).

Workload: builtin problems, one sampled solution each (the same solutions for both runs), labeled
by binary search (plain bisection, k rollouts a probe, so both runs ask for the same number of
probes whatever the rollouts say). (a) the scheduler keeps `--in-flight` problems in flight and sends
all their pending probes as one engine call; (b) one problem at a time and one engine call per probe,
as the public implementations do. Prints wall time and generated tokens/s of both and the ratio; the
last line is one JSON object {"speedup": (b time)/(a time), ...}.

    python benchmarks/scheduler_speed.py [--problems 32] [--in-flight 32] [--k 4] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is for the table and the JSON


def main() -> None:
    from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
    from prm_synth.annotate.search import binary_search
    from prm_synth.config import VLLMConfig, validate_config
    from prm_synth.engines.base import SamplingOptions
    from prm_synth.engines.vllm import VLLMEngine
    from prm_synth.pipeline import iter_shards
    from prm_synth.prompting.prompts import policy_user_prompt
    from prm_synth.sampling.sample import sample_solutions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()

    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": args.problems, "min_ops": 3, "max_ops": 6},
            "policy": {"kind": "vllm", "model": "demo", "max_model_len": 2048},
            "sampling": {"samples_per_problem": 1, "max_tokens": 160, "temperature": 0.7},
            "steps": {"strategy": "line"},
            "annotate": {"method": "binary", "search_test": "fixed", "recheck": False, "k": args.k},
            "output": {"shard_size": args.problems},
        }
    )
    assert isinstance(config.policy, VLLMConfig)
    engine = VLLMEngine(config.policy)
    problems = [p for shard in iter_shards(config) for p in shard.items if hasattr(p, "question")]
    solutions = sample_solutions(engine, problems, config).solutions
    # Searching needs at least two steps; a correct solution needs no probes at all.
    work = [s for s in solutions if len(s.steps) >= 2 and s.verdict.status != "correct"]
    sampling = SamplingOptions(max_tokens=args.max_tokens, temperature=0.7)

    def run(in_flight: int, batch: int) -> dict[str, float]:
        scheduler = ProbeScheduler(engine, sampling, max_batch_requests=batch, max_in_flight=in_flight)
        jobs = [
            SolutionJob(
                key=s.id,
                problem_key=f"{s.id}-{in_flight}",  # no estimate is shared between the two runs
                user_prompt=policy_user_prompt(s.problem.question),
                gold=s.problem.gold_answer,
                annotator=binary_search(s.steps, s.verdict.status, config.annotate),
            )
            for s in work
        ]
        started = time.perf_counter()
        done = sum(1 for _ in scheduler.run(jobs))
        wall = time.perf_counter() - started
        stats = scheduler.stats
        return {
            "solutions": done,
            "probes": stats.probes_asked,
            "engine calls": stats.engine_calls,
            "rollouts": stats.rollouts,
            "gen tokens": stats.generated_tokens,
            "wall s": round(wall, 2),
            "gen tokens/s": round(stats.generated_tokens / wall, 1),
        }

    scheduled = run(args.in_flight, 1024)
    sequential = run(1, 1)
    engine.close()

    print(f"binary search on {len(work)} demo-model solutions, k {args.k}, rollouts of <= {args.max_tokens} tokens")
    cols = list(scheduled)
    print(f"{'':<34}" + "".join(f"{c:>14}" for c in cols))
    for name, row in (
        (f"(a) scheduler, {args.in_flight} in flight", scheduled),
        ("(b) one call per probe", sequential),
    ):
        print(f"{name:<34}" + "".join(f"{row[c]:>14}" for c in cols))
    speedup = sequential["wall s"] / scheduled["wall s"]
    print(f"speedup (b time / a time): {speedup:.2f}x")
    print(
        json.dumps(
            {
                "speedup": round(speedup, 3),
                "scheduler_tokens_per_s": scheduled["gen tokens/s"],
                "sequential_tokens_per_s": sequential["gen tokens/s"],
                "scheduler_wall_s": scheduled["wall s"],
                "sequential_wall_s": sequential["wall s"],
                "in_flight": args.in_flight,
                "solutions": len(work),
            }
        )
    )


if __name__ == "__main__":
    main()
