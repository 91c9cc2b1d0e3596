"""Long solutions: simulated thinking traces of 100, 300 and 1000 paragraph steps (fidelity.py --worlds long).

Each world is the simulated policy in thinking mode (prm_synth/simulated/engines.py, `thinking`): it
writes `<think>`, one equation a paragraph, `</think>`, then a boxed answer, and its rollouts write
the paragraphs left after their prefix, so a rollout's tokens grow with the remaining length (the
stand-in tokenizer counts whitespace words: about 5 a paragraph). A step is wrong with chance
0.7 / length, so about half the solutions hold an error and it can sit anywhere; luck 0.05, also in
the sampled solutions. Steps come from the `thinking` strategy with `max_steps` 64: the trace's
paragraphs merged evenly into 63 steps, the answer the 64th; the true first error is the merged step
that holds the first false equation.

The default labeler (the change-point search) runs with a token budget per solution
(`annotate.max_rollout_tokens`) of `BUDGET_PER_STEP` tokens a paragraph, about 40 rollouts of the
whole trace: it ranks probes per expected token and the scheduler never starts rollouts that would
not fit. Per length: good / bad precision, coverage, first-error accuracy (as fidelity.py counts them,
on the merged steps), rollout tokens (generated) per row and per located first error, the most one
row spent against its budget, and the rows whose budget ran out.

These worlds are not part of `--worlds all`: their rows take longer, and the 17 worlds keep their timing.

    python benchmarks/fidelity.py --worlds long [--problems 150] [--seed 0]
"""

from __future__ import annotations

import json
import time
from typing import Any

from prm_synth.annotate.labeler import make_labeler
from prm_synth.config import PipelineConfig
from prm_synth.problems.sources import iter_problems
from prm_synth.records import Problem
from prm_synth.simulated import arithmetic
from prm_synth.simulated.engines import SimulatedPolicy

LENGTHS = (100, 300, 1000)
MAX_STEPS = 64
BUDGET_PER_STEP = 200  # rollout tokens a solution may generate, per paragraph of its trace
NAMES = {f"long_{n}": n for n in LENGTHS}


def long_config(length: int, problems: int, seed: int, budget: int | None = None) -> PipelineConfig:
    """The pipeline of one long world (`budget`: tokens a solution; default `BUDGET_PER_STEP` x length)."""
    return PipelineConfig.model_validate(
        {
            "name": f"fidelity-long-{length}",
            "problems": {"kind": "builtin", "count": problems, "seed": seed, "min_ops": length, "max_ops": length},
            "policy": {
                "kind": "simulated",
                "thinking": {},
                "step_error": 0.7 / length,
                "recover": 0.05,
                "recover_in_sample": True,
                "seed": seed,
            },
            "sampling": {"samples_per_problem": 1},
            "steps": {"strategy": "thinking", "max_steps": MAX_STEPS},
            "annotate": {
                "method": "binary",
                "max_rollout_tokens": BUDGET_PER_STEP * length if budget is None else budget,
            },
        }
    )


def measure(length: int, problems: int, seed: int, score_cls: Any) -> dict[str, Any]:
    """One long world's figures: fidelity's headline (`score_cls`: its `Score`) and the token columns."""
    started = time.perf_counter()
    config = long_config(length, problems, seed)
    budget = config.annotate.max_rollout_tokens  # type: ignore[union-attr]
    chosen = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    result = make_labeler(config).label(SimulatedPolicy(config.policy), chosen)  # type: ignore[arg-type]
    score = score_cls()
    error_tokens = spent_max = out = 0
    for row in result.records:
        score.add(row)
        spent = result.spend[row.id].generated
        spent_max = max(spent_max, spent)
        out += "token_budget" in (row.unlabeled_reason or [])
        if arithmetic.true_first_error(row.steps) >= 0:
            error_tokens += spent
    score.all_rollouts = result.stats.rollouts
    score.unknown = result.stats.unknown_rollouts
    head = score.headline()
    generated = sum(result.spend[row.id].generated for row in result.records)
    return {
        "good_precision": head["good_precision"],
        "bad_precision": head["bad_precision"],
        "coverage": head["coverage"],
        "first_error_accuracy": head["first_error_accuracy"],
        "rollouts_per_question": head["rollouts_per_question"],
        "rollout_tokens_per_question": round(generated / max(1, len(result.records))),
        "rollout_tokens_per_located_error": round(error_tokens / score.located) if score.located else None,
        "token_budget": budget,
        "max_rollout_tokens_spent": spent_max,
        "inside_budget": spent_max <= budget,
        "rows_out_of_tokens": out,
        "rows": len(result.records),
        "rows_with_error": score.with_error,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(problems: int, seed: int, score_cls: Any) -> dict[str, Any]:
    """Print each length's figures as it finishes, then one JSON line of all of them; return that."""
    worlds: dict[str, dict[str, Any]] = {}
    cols = (
        "good_precision",
        "bad_precision",
        "coverage",
        "first_error_accuracy",
        "rollout_tokens_per_located_error",
        "max_rollout_tokens_spent",
        "token_budget",
        "rows_out_of_tokens",
    )
    short = ("good_prec", "bad_prec", "coverage", "first_err", "tok/located", "max spent", "budget", "out_of_tok")
    print(f"{'world':<10}" + "".join(f"{c:>13}" for c in short))
    for name, length in NAMES.items():
        figures = worlds[name] = measure(length, problems, seed, score_cls)
        cells = ["-" if figures[c] is None else str(figures[c]) for c in cols]
        print(f"{name:<10}" + "".join(f"{c:>13}" for c in cells), flush=True)
    out = {"worlds": worlds, "max_steps": MAX_STEPS, "budget_per_step": BUDGET_PER_STEP, "problems": problems}
    print(json.dumps(out))
    return out
