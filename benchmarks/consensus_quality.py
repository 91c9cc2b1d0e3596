"""What does each consensus policy keep, and how right are the kept rows, against judges that err like real ones?

The simulated policy (each fresh step wrong with probability `step_error`, a wrong prefix still reaching
the gold answer with probability `recover`, sampled solutions too: some right answers follow a wrong step) writes solutions
to builtin problems of 5-12 operations; the default labeler (change-point search) labels them. Then a
simulated judge with m votes judges every row, under one error profile at a time
(engines.simulated.JUDGE_PROFILES):

- oracle: always names the true first error;
- uniform-0.8: right 80% of the time, else any other index (the errors of earlier versions);
- realistic: ProcessBench-like: flags 85% of errors when the final answer is wrong, 60% when it is right,
  names a step 1-2 off 10% of the time, false alarms on 10% of clean solutions, 5% unreadable answers;
- blind-spot: its misses coincide with the rollouts' blind spot (flags 10% of errors followed by a right
  answer), otherwise as realistic.

Each policy (agree, soft, judge-only, mc-only) filters the same rows shard by shard. Against the truth
recomputed from the step text, over the kept rows (after consensus completed them) and over all rows
(as the labeler left them): step precision (labels right / labeled steps), bad- and good-label
precision, first-error accuracy (rows whose labels pin the true first error: every step up to it
labeled, -1 when all are good), kept fraction, rows the judge completed, and for `agree` the rejected
rows whose labels were all right. The last line is one JSON object: per profile and policy the figures.

    .venv/bin/python benchmarks/consensus_quality.py [--problems 300] [--samples 2] [--judge-samples 3]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

from prm_synth.config import (
    ConsensusConfig,
    JudgeConfig,
    PipelineConfig,
    SimulatedJudgeConfig,
    validate_config,
)
from prm_synth.grading.quality import step_label_quality
from prm_synth.judge.consensus import apply_consensus, record_from_payload
from prm_synth.judge.selection import judge_selected
from prm_synth.pipeline import ShardInput, iter_shards, process_shard
from prm_synth.records import ConsensusStats, JudgeStats, LabeledRecord, Problem, ShardStats
from prm_synth.records.canaries import CanaryStats, precision_report
from prm_synth.shard.canaries import run_canaries
from prm_synth.simulated.arithmetic import true_first_error
from prm_synth.simulated.engines import JUDGE_PROFILES, SimulatedJudge, SimulatedPolicy

PROFILES = JUDGE_PROFILES
POLICIES = ("agree", "soft", "judge-only", "mc-only")  # every row judged with m votes (`select: all`)
ROWS = (*POLICIES, "soft-needed")  # soft-needed: soft with `select: needed` (the default)


def label(args: argparse.Namespace) -> tuple[list[list[LabeledRecord]], float]:
    """The rows the default labeler makes, shard by shard (consensus measures the judge per shard); each
    shard's problems are kept in `args.shard_problems` (its canaries are planted from them)."""
    config = pipeline(args)
    policy = SimulatedPolicy(config.policy)
    started = time.perf_counter()
    shards: list[list[LabeledRecord]] = []
    args.shard_problems = []
    for shard in iter_shards(config):
        assert isinstance(shard, ShardInput)
        out = process_shard(policy, config, shard, config.fingerprint())
        shards.append(out.records)
        args.shard_problems.append([p for p in shard.items if isinstance(p, Problem)])
    return shards, time.perf_counter() - started


def pipeline(args: argparse.Namespace, judge: SimulatedJudgeConfig | None = None) -> PipelineConfig:
    """The benchmark's pipeline (with `judge`: its judge section, for the canaries)."""
    judge_section = {"judge": {"engine": judge.model_dump(mode="json"), "samples": args.judge_samples}} if judge else {}
    return validate_config(
        {
            "name": "consensus-quality",
            "problems": {"kind": "builtin", "count": args.problems, "seed": args.seed, "min_ops": 5, "max_ops": 12},
            "policy": {
                "kind": "simulated",
                "step_error": args.step_error,
                "recover": args.recover,
                "recover_in_sample": True,  # right answers after a wrong step: the rollouts' blind spot
                "seed": args.seed,
            },
            "sampling": {"samples_per_problem": args.samples},
            "output": {"shard_size": args.shard_size},
        }
        | judge_section
    )


def canaries_of(shards: list[list[LabeledRecord]], judge: SimulatedJudgeConfig, args: argparse.Namespace) -> list:
    """Each shard's canaries (the default `canaries` section), labeled and judged under `judge`."""
    config = pipeline(args, judge)
    policy, engine = SimulatedPolicy(config.policy), SimulatedJudge(judge)
    problems = args.shard_problems
    return [run_canaries(policy, engine, config, rows, problems[i], i).stats for i, rows in enumerate(shards)]


def pinned_first_error(labels: Sequence[bool | None]) -> int | None:
    """The first error the labels pin (every step up to it labeled; -1: all labeled good), else None."""
    for i, lab in enumerate(labels):
        if lab is None:
            return None
        if lab is False:
            return i
    return -1


def all_right(record: LabeledRecord) -> bool:
    truth = true_first_error(record.steps)
    return all(lab is None or lab == (truth == -1 or i < truth) for i, lab in enumerate(record.labels))


def quality(rows: list[LabeledRecord]) -> dict[str, Any]:
    truths = [true_first_error(r.steps) for r in rows]
    q = step_label_quality((r.labels, t) for r, t in zip(rows, truths, strict=True))
    labeled = q["predicted"] + q["predicted_good"]
    right = q["hit"] + q["good_hit"]
    pinned = sum(pinned_first_error(r.labels) == t for r, t in zip(rows, truths, strict=True))
    return {
        "rows": len(rows),
        "step_precision": _r(right / labeled if labeled else None),
        "bad_precision": _r(q["precision"]),
        "good_precision": _r(q["good_precision"]),
        "first_error_acc": _r(pinned / len(rows) if rows else None),
    }


def judge_shards(
    shards: list[list[LabeledRecord]], judge: SimulatedJudgeConfig, args: argparse.Namespace, select: str
) -> tuple[list[list[LabeledRecord]], JudgeStats]:
    """Every shard's rows judged: `all` asks every row m votes at once, `needed` asks the rows a vote can
    change, one vote at a time until the soft posterior settles (prm_synth/judge/selection.py)."""
    judge_cfg = JudgeConfig(
        engine=judge,
        samples=args.judge_samples,
        select=select,
        calibrate=getattr(args, "calibrate", 0.1),
        skip_confidence=getattr(args, "skip_confidence", 0.99),
    )
    engine = SimulatedJudge(judge)
    judged: list[list[LabeledRecord]] = []
    total = JudgeStats()
    canaries = getattr(args, "canary_stats", [None] * len(shards))
    for i, rows in enumerate(shards):
        kept, left_open, stats = judge_selected(
            engine, copy.deepcopy(rows), judge_cfg, soft_config(args), 256, canaries=canaries[i]
        )
        # a row none of whose votes could be read is left open for the next run (judge_unreadable), as a
        # run leaves it: it is neither kept nor rejected by consensus here
        assert all(r.reason == "judge_unreadable" for r in left_open)
        judged.append(kept)
        total = _add(total, stats)
    return judged, total


def soft_config(args: argparse.Namespace) -> ConsensusConfig:
    return ConsensusConfig(
        policy="soft", confidence=args.confidence, target_precision=getattr(args, "target_precision", 0.97)
    )


def filter_rows(
    judged: list[list[LabeledRecord]], config: ConsensusConfig, rows: int, args: argparse.Namespace
) -> tuple[dict, ConsensusStats]:
    """One policy over every shard: the kept rows' quality, and the stage's counters summed."""
    kept_rows: list[LabeledRecord] = []
    rejected_right = 0
    total = ConsensusStats()
    canaries = getattr(args, "canary_stats", [None] * len(judged))
    for i, shard in enumerate(judged):
        kept, rejected, stats = apply_consensus(copy.deepcopy(shard), config, canaries=canaries[i])
        kept_rows += kept
        total = _add(total, stats)
        rejected_right += sum(all_right(record_from_payload(r.payload)) for r in rejected if r.payload)
    return quality(kept_rows) | {
        "kept_fraction": _r(len(kept_rows) / rows),
        "completed": total.completed,
        "rejected_all_right": rejected_right,
    }, total


def run_profile(shards: list[list[LabeledRecord]], judge: SimulatedJudgeConfig, args: argparse.Namespace) -> dict:
    rows = sum(len(s) for s in shards)
    judged, every = judge_shards(shards, judge, args, "all")
    out: dict[str, Any] = {"all": quality([r for s in judged for r in s])}
    for policy in POLICIES:
        config = soft_config(args) if policy == "soft" else ConsensusConfig(policy=policy)
        out[policy], stats = filter_rows(judged, config, rows, args)
        out[policy] |= cost(every, rows)
    out["judge_recall_pinned"] = _r(stats.pinned_named / stats.pinned_votes if stats.pinned_votes else None)
    out["judge_clean_rate"] = _r(stats.clean_said_clean / stats.clean_votes if stats.clean_votes else None)
    out["judge_by_answer"] = stats.by_answer_text()
    needed, spent = judge_shards(shards, judge, args, "needed")
    out["soft-needed"], soft_stats = filter_rows(needed, soft_config(args), rows, args)
    out["soft-needed"] |= cost(spent, rows)
    estimate = precision_report(soft_stats.estimate, all_canaries(getattr(args, "canary_stats", [])))
    out["target_precision"] = soft_config(args).target_precision
    out["measured_precision"] = {k: out["soft-needed"][f"{k}_precision"] for k in ("good", "bad")}
    out["estimated_precision"] = {k: estimate[k] for k in ("good", "bad")}
    alone = precision_report(soft_stats.estimate)["bad"]
    out["posterior_bad_interval"] = [alone["low"], alone["high"]] if alone else [None, None]
    out["kept_rows"] = soft_stats.kept
    return out


def all_canaries(per_shard: Sequence[CanaryStats | None]) -> CanaryStats | None:
    """The shards' canary counts summed, as a run's summary sums them (ShardStats)."""
    total = ShardStats()
    for c in per_shard:
        if c is not None:
            total = total + ShardStats(canaries=dataclasses.asdict(c))
    return CanaryStats.read(total.canaries)


def cost(stats: JudgeStats, rows: int) -> dict[str, Any]:
    """What the judge cost: votes asked (each one generation of the judge: a judge request) and tokens,
    per row, and the rows it was asked about."""
    return {
        "judge_requests_per_row": _r(stats.samples / rows if rows else None),
        "judge_tokens_per_row": _r(stats.tokens / rows if rows else None),
        "rows_judged": stats.solutions,
    }


def _add(a: Any, b: Any) -> Any:
    return (
        (ShardStats(judge=a) + ShardStats(judge=b)).judge
        if isinstance(a, JudgeStats)
        else (ShardStats(consensus=a) + ShardStats(consensus=b)).consensus
    )


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _f(x: float | None, width: int) -> str:
    return f"{'n/a' if x is None else f'{x:.3f}':>{width}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--samples", type=int, default=2, help="solutions per problem")
    parser.add_argument("--step-error", type=float, default=0.1)
    parser.add_argument("--recover", type=float, default=0.2)
    parser.add_argument("--judge-samples", type=int, default=3, help="m votes per row")
    parser.add_argument("--shard-size", type=int, default=100, help="problems per shard")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profiles", nargs="*", default=list(PROFILES), choices=list(PROFILES))
    parser.add_argument("--confidence", type=float, default=0.9, help="soft's consensus.confidence")
    parser.add_argument("--target-precision", type=float, default=0.97, help="consensus.target_precision")
    parser.add_argument("--calibrate", type=float, default=0.1, help="judge.calibrate under select: needed")
    parser.add_argument("--skip-confidence", type=float, default=0.99, help="judge.skip_confidence (needed)")
    from _report import ReportFlag, write_report  # benchmarks/ is on sys.path: run as a script

    parser.add_argument("--report", action=ReportFlag)
    args = parser.parse_args()

    shards, seconds = label(args)
    rows = [r for s in shards for r in s]
    wrong = sum(true_first_error(r.steps) != -1 for r in rows)
    print(
        f"{len(rows)} solutions ({wrong} with an error), step_error {args.step_error}, recover {args.recover}, "
        f"default labeler; labeled in {seconds:.1f} s; judge votes m={args.judge_samples}"
    )
    header = (
        f"{'profile':<12}{'policy':<12}{'kept':>7}{'step prec':>10}{'bad prec':>9}{'good prec':>10}"
        f"{'fe acc':>8}{'completed':>10}{'rej. right':>11}{'req/row':>8}{'tok/row':>8}"
    )
    print(header)
    print("-" * len(header))
    summary: dict[str, Any] = {}
    for name in args.profiles:
        judge = PROFILES[name]
        args.canary_stats = canaries_of(shards, judge, args)  # the default canaries, judged by this judge
        result = run_profile(shards, judge, args)
        summary[name] = result
        a = result["all"]
        print(
            f"{name:<12}{'(all rows)':<12}{1.0:>7.3f}{_f(a['step_precision'], 10)}{_f(a['bad_precision'], 9)}"
            f"{_f(a['good_precision'], 10)}{_f(a['first_error_acc'], 8)}"
        )
        for policy in ROWS:
            r = result[policy]
            print(
                f"{'':<12}{policy:<12}{_f(r['kept_fraction'], 7)}{_f(r['step_precision'], 10)}"
                f"{_f(r['bad_precision'], 9)}{_f(r['good_precision'], 10)}{_f(r['first_error_acc'], 8)}"
                f"{r['completed']:>10}{r['rejected_all_right']:>11}{_f(r['judge_requests_per_row'], 8)}"
                f"{r['judge_tokens_per_row']:>8.0f}"
            )
        e = result["estimated_precision"]
        print(
            f"{'':<12}soft-needed at target {result['target_precision']}: measured good/bad "
            f"{result['measured_precision']['good']}/{result['measured_precision']['bad']}, the run's estimate "
            + ", ".join(f"{k} {v['point']} [{v['low']}, {v['high']}]" for k, v in e.items() if v)
            + f" (bad from the posterior alone: [{result['posterior_bad_interval'][0]}, "
            f"{result['posterior_bad_interval'][1]}])"
        )
        print(
            f"{'':<12}judge measured in the run: names pinned errors {_f(result['judge_recall_pinned'], 0)}, "
            f"says -1 on clean rows {_f(result['judge_clean_rate'], 0)}; {result['judge_by_answer']}"
        )
    print(json.dumps(summary))
    write_report("consensus_quality", summary)


if __name__ == "__main__":
    main()
