"""Does consensus filtering buy label precision, and at what cost in kept rows?

The simulated policy (each fresh step wrong with probability `step_error`, a wrong prefix still
reaching the gold answer with probability `recover` > 0) writes solutions to builtin problems of
5-12 operations; the lead's pipeline labels them with per-step MC (k = 8, hard rule). Then a
simulated judge of accuracy 0.7, 0.8 and 0.9 judges every solution, and three datasets are read
off the same rows:

- MC-only: every row, first error = the MC first error;
- judge-only: every row the judge decided, first error = the judge's;
- consensus (agree): the rows where the two coincide.

Against the truth recomputed from the step text: exact first-error accuracy, first-error precision
(of the rows said to hold an error, the fraction at the true index), recall, fraction of
solutions kept, and MC rollouts per kept row (the judge-only dataset needs no rollouts; its cost
is judge samples). The last line is one JSON object for the 0.8 judge.

    .venv/bin/python benchmarks/consensus_quality.py [--problems 1000] [--samples 4]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

from prm_synth.arithmetic import true_first_error
from prm_synth.config import ConsensusConfig, JudgeConfig, SimulatedJudgeConfig, validate_config
from prm_synth.consensus import apply_consensus
from prm_synth.engines.simulated import SimulatedJudge, SimulatedPolicy
from prm_synth.evaluate import first_error_quality
from prm_synth.judge import judge_records
from prm_synth.pipeline import ShardInput, iter_shards, process_shard
from prm_synth.schema import LabeledRecord

ACCURACIES = (0.7, 0.8, 0.9)


def label_with_mc(args: argparse.Namespace) -> tuple[list[LabeledRecord], float]:
    config = validate_config(
        {
            "name": "consensus-quality",
            "problems": {"kind": "builtin", "count": args.problems, "seed": args.seed, "min_ops": 5, "max_ops": 12},
            "policy": {"kind": "simulated", "step_error": args.step_error, "recover": args.recover, "seed": args.seed},
            "sampling": {"samples_per_problem": args.samples},
            "annotate": {"method": "mc", "k": args.k},
            "labels": {"rule": "hard"},
            "output": {"shard_size": 100},
        }
    )
    policy = SimulatedPolicy(config.policy)
    started = time.perf_counter()
    records: list[LabeledRecord] = []
    for shard in iter_shards(config):
        assert isinstance(shard, ShardInput)
        out = process_shard(policy, config, shard, config.fingerprint())
        assert not out.rejected, out.rejected[:3]
        records += out.records
    return records, time.perf_counter() - started


def measure(
    name: str, rows: list[LabeledRecord], predict: str, total: int, rollouts: int, judge_samples: int
) -> dict[str, Any]:
    pairs = [(getattr(r, predict), true_first_error(r.steps)) for r in rows]
    q = first_error_quality(pairs)
    return {
        "labeler": name,
        "rows": len(rows),
        "exact_acc": q["exact_acc"],
        "precision": q["precision"],
        "recall": q["recall"],
        "kept_fraction": len(rows) / total,
        "rollouts_per_kept_row": rollouts / len(rows) if rows else None,
        "judge_samples_per_kept_row": judge_samples / len(rows) if rows else None,
    }


def run_accuracy(records: list[LabeledRecord], accuracy: float, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = copy.deepcopy(records)
    judge_cfg = JudgeConfig(engine=SimulatedJudgeConfig(accuracy=accuracy, seed=args.seed), samples=args.judge_samples)
    _, _, stats = judge_records(SimulatedJudge(judge_cfg.engine), rows, judge_cfg, max_batch_requests=256)
    total, rollouts, judge_samples = len(rows), sum(r.rollouts for r in rows), stats.samples
    judge_kept, _, _ = apply_consensus(rows, ConsensusConfig(policy="judge-only"))
    agree_kept, _, _ = apply_consensus(rows, ConsensusConfig(policy="agree", tolerance=0))
    return [
        measure("mc-only", rows, "first_error_mc", total, rollouts, 0),
        measure("judge-only", judge_kept, "judge_first_error", total, 0, judge_samples),
        measure("consensus", agree_kept, "first_error_mc", total, rollouts, judge_samples),
    ]


def _f(x: float | None, width: int) -> str:
    return f"{'n/a' if x is None else f'{x:.3f}':>{width}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=4, help="solutions per problem")
    parser.add_argument("--k", type=int, default=8, help="rollouts per probed prefix")
    parser.add_argument("--step-error", type=float, default=0.1)
    parser.add_argument("--recover", type=float, default=0.2)
    parser.add_argument(
        "--judge-samples", type=int, default=1, help="m votes (1: judge accuracy is exactly its setting)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    records, seconds = label_with_mc(args)
    wrong = sum(true_first_error(r.steps) != -1 for r in records)
    print(
        f"{len(records)} solutions ({wrong} with an error), step_error {args.step_error}, recover {args.recover}, "
        f"per-step MC k={args.k}, hard rule; labeled in {seconds:.1f} s; judge votes m={args.judge_samples}"
    )
    header = (
        f"{'judge acc':>9}  {'labeler':<11}{'rows':>6}{'exact acc':>11}{'fe prec':>9}{'fe rec':>8}"
        f"{'kept':>8}{'rollouts/kept':>15}{'judge/kept':>12}"
    )
    print(header)
    print("-" * len(header))
    summary: dict[str, Any] = {}
    for accuracy in ACCURACIES:
        results = run_accuracy(records, accuracy, args)
        for r in results:
            print(
                f"{accuracy:>9.1f}  {r['labeler']:<11}{r['rows']:>6}{_f(r['exact_acc'], 11)}{_f(r['precision'], 9)}"
                f"{_f(r['recall'], 8)}{_f(r['kept_fraction'], 8)}{_f(r['rollouts_per_kept_row'], 15)}"
                f"{_f(r['judge_samples_per_kept_row'], 12)}"
            )
        by = {r["labeler"]: r for r in results}
        gain = by["consensus"]["precision"] - max(by["mc-only"]["precision"], by["judge-only"]["precision"])
        print(
            f"{'':>9}  consensus precision gain over the better single labeler: {gain:+.3f}, "
            f"at {1 - by['consensus']['kept_fraction']:.1%} of solutions dropped"
        )
        if accuracy == 0.8:
            summary = {
                "mc_precision": by["mc-only"]["precision"],
                "judge_precision": by["judge-only"]["precision"],
                "consensus_precision": by["consensus"]["precision"],
                "kept_fraction": by["consensus"]["kept_fraction"],
            }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
