"""How often the demo model (SmolLM2-135M-Instruct, vLLM on the CPU) solves builtin problems.

Samples `--samples` solutions for each of `--count` builtin problems per operation count, grades them
with the pipeline's grader, and prints a table of solve rates per (ops, temperature). The demo pipeline
picks its problems from this table, so the model solves some but not all of them.
Usage: python benchmarks/demo_solve_rate.py --ops 1 2 --count 12 --samples 4
       python benchmarks/demo_solve_rate.py --ops 1 --seeds 0 1 2 --count 6 --samples 8
"""

from __future__ import annotations

import argparse
import json
import random
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--count", type=int, default=12, help="problems per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="builtin generator seeds")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.7])
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()

    from prm_synth.config import VLLMConfig
    from prm_synth.engines.base import GenerationRequest, SamplingOptions
    from prm_synth.engines.vllm import VLLMEngine
    from prm_synth.grading.math import grade
    from prm_synth.prompting.prompts import policy_user_prompt
    from prm_synth.simulated import arithmetic

    engine = VLLMEngine(VLLMConfig(kind="vllm", model="demo", max_model_len=2048))
    rows = []
    try:
        for ops in args.ops:
            # the builtin source's problems: problem i of seed s comes from Random(f"{s}:{i}")
            problems = [
                arithmetic.generate(random.Random(f"{seed}:{i}"), ops, ops)
                for seed in args.seeds
                for i in range(args.count)
            ]
            for temperature in args.temperatures:
                t0 = time.perf_counter()
                requests = [
                    GenerationRequest(
                        user=policy_user_prompt(p.question()),
                        n=args.samples,
                        sampling=SamplingOptions(max_tokens=args.max_tokens, temperature=temperature),
                    )
                    for p in problems
                ]
                results = engine.generate(requests)
                verdicts = [
                    [grade(c.text, str(p.answer)) for c in r.completions]
                    for p, r in zip(problems, results, strict=True)
                ]
                correct = sum(v.status == "correct" for vs in verdicts for v in vs)
                total = sum(len(vs) for vs in verdicts)
                solved_some = sum(any(v.status == "correct" for v in vs) for vs in verdicts)
                tokens = sum(r.generated_tokens for r in results)
                rows.append(
                    {
                        "ops": ops,
                        "temperature": temperature,
                        "samples": total,
                        "solve_rate": round(correct / total, 3),
                        "problems_solved_at_least_once": f"{solved_some}/{len(problems)}",
                        "tokens_per_s": round(tokens / (time.perf_counter() - t0), 1),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    finally:
        engine.close()
    print(f"{'ops':>3} {'temp':>5} {'samples':>7} {'solve rate':>10} {'solved>=1':>9} {'tok/s':>7}")
    for r in rows:
        print(
            f"{r['ops']:>3} {r['temperature']:>5} {r['samples']:>7} {r['solve_rate']:>10} "
            f"{r['problems_solved_at_least_once']:>9} {r['tokens_per_s']:>7}"
        )
    print(json.dumps({"solve_rate": {f"ops={r['ops']},t={r['temperature']}": r["solve_rate"] for r in rows}}))


if __name__ == "__main__":
    main()
