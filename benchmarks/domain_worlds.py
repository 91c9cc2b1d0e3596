"""Label quality in the simulated worlds beyond math (prm_synth/simulated/domains.py): code with
tests run in the sandbox (bugs at known steps, some hidden by a later step), multiple choice, and no gold
(the majority answer is the gold, wrong on a known share of the problems).

Per world: good / bad precision of the labels the labeler emits (against the truth recomputed from each
row's steps), and in the no-gold worlds the majority's accuracy per agreement level next to the truth
(how often the pseudo-gold equals the chain's real answer), level by level.

The no-gold worlds: where the policy shares a misconception, every rollout agrees with the wrong
pseudo-gold, so the rollouts alone cannot see it (`no_gold_rollouts`: the labeler alone). `no_gold` runs
the whole shard as `prm-synth run` does (process_shard): a judge (simulated/domains.DomainJudge,
the realistic error profile, misconception steps read at its right-answer recall: not an oracle), the
canaries and soft consensus, each row carrying its pseudo-gold's doubt (grading/majority.row_doubts):
read from the held-out gold's accuracy per agreement level. `no_gold_blind` is the same with the gold
removed: the doubt then comes from the votes alone (1 - share), and no agreement table is made.
`no_gold_strict`: the labeler alone, keeping only pseudo-golds with 7 of 8 votes.

Settings were chosen on seeds 0-3 (the development seeds: the default); 1010-1011 were called held-out and
shaped the worlds since (used, issue 57); the held-out seeds are 1012-1013 (`--seeds 1012-1013`).
Used by benchmarks/fidelity.py; run alone:
`python benchmarks/domain_worlds.py [--problems N] [--seeds 0-3] [--worlds no_gold,...]`, one JSON
line last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prm_synth.annotate.labeler import make_labeler  # noqa: E402
from prm_synth.config import PipelineConfig  # noqa: E402
from prm_synth.grading.majority import accuracy_table, agreement_level  # noqa: E402
from prm_synth.pipeline import ShardInput, process_shard  # noqa: E402
from prm_synth.sampling.votes import pseudo_gold  # noqa: E402
from prm_synth.simulated.domains import (  # noqa: E402
    DomainJudge,
    DomainPolicy,
    DomainWorld,
    Form,
    parse_chain,
    true_first_error,
    world_problems,
)
from prm_synth.simulated.engines import JUDGE_PROFILES  # noqa: E402

DEVELOPMENT = range(0, 4)  # settings are chosen here
USED = range(1010, 1012)  # once held-out, looked at since (issue 57)
HELD_OUT = range(1012, 1014)  # seeds no setting was chosen on
NO_GOLD = {"form": "math", "step_error": 0.06, "recover": 0.05, "trap": 0.3, "trap_error": 0.7}
WORLDS: dict[str, dict[str, Any]] = {
    "code": {"form": "code", "step_error": 0.1, "recover": 0.1},
    "choice": {"form": "choice", "step_error": 0.1, "recover": 0.05},
    "no_gold": NO_GOLD,
    "no_gold_blind": NO_GOLD,
    "no_gold_rollouts": NO_GOLD,
    "no_gold_strict": NO_GOLD,
}
MAJORITY = {"kind": "majority", "of": "math", "votes": 8, "min_agreement": 0.5}
GRADERS: dict[str, dict[str, Any]] = {
    "code": {"kind": "code", "sandbox": {"cpu_s": 2, "wall_s": 60}},
    "choice": {"kind": "choice"},
    "no_gold": MAJORITY,
    "no_gold_blind": MAJORITY,
    "no_gold_rollouts": MAJORITY,
    # the labeler alone, keeping only the pseudo-golds with 7 of 8 votes: the misconception rarely gets them
    "no_gold_strict": MAJORITY | {"min_agreement": 0.875},
}
JUDGED = ("no_gold", "no_gold_blind")  # the whole shard: judge, canaries, soft consensus
JUDGE_SAMPLES = 8  # judge votes per row (chosen on seeds 0-3)
JUDGE_SELECT = "all"


@dataclass
class WorldScore:
    rows: int = 0
    good: int = 0
    good_right: int = 0
    bad: int = 0
    bad_right: int = 0
    rollouts: int = 0
    rejected: int = 0
    seconds: float = 0.0
    majority: dict[str, int] = field(default_factory=dict)  # ShardStats.majority-shaped counts
    pseudo_wrong: int = 0  # problems whose pseudo-gold is not the chain's real answer
    pseudo_total: int = 0
    truth: dict[str, list[int]] = field(default_factory=dict)  # per agreement level: [pseudo-gold right, all]
    consensus_rejected: int = 0  # rows the judged worlds' consensus (or judge) rejected

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rows": self.rows,
            "good_precision": round(self.good_right / self.good, 4) if self.good else None,
            "bad_precision": round(self.bad_right / self.bad, 4) if self.bad else None,
            "good_labels": self.good,
            "bad_labels": self.bad,
            "rollouts": self.rollouts,
            "seconds": round(self.seconds, 1),
        }
        if self.pseudo_total:
            out["majority_wrong_rate"] = round(self.pseudo_wrong / self.pseudo_total, 4)
            out["no_majority"] = self.rejected
            out["problems_with_pseudo_gold"] = self.pseudo_total
            out["consensus_rejected"] = self.consensus_rejected
            out["agreement_accuracy"] = [
                {"level": lv, "right": r, "total": t} for lv, r, t in accuracy_table(self.majority)
            ]
            out["agreement_truth"] = [
                {"level": lv, "right": r, "total": t} for lv, (r, t) in sorted(self.truth.items())
            ]
        return out


def config_for(world: str, seed: int) -> PipelineConfig:
    problems = {"kind": "humaneval"} if world == "code" else {"kind": "builtin"}
    data: dict[str, Any] = {
        "name": f"domain-{world}",
        "problems": problems,  # the world's own problems are passed to the labeler directly
        "grader": GRADERS[world],
        "policy": {"kind": "simulated", "seed": seed},  # unused: the world's DomainPolicy answers
        "sampling": {"samples_per_problem": 1},
        "steps": {"strategy": "code" if world == "code" else "line"},
    }
    if world in JUDGED:
        judge = JUDGE_PROFILES["realistic"].model_dump(mode="json") | {"seed": seed}
        # every row is asked (select: all): against a pseudo-gold the rollouts pin nothing for sure
        data |= {"judge": {"engine": judge, "samples": JUDGE_SAMPLES, "select": JUDGE_SELECT}, "consensus": {}}
    return PipelineConfig.model_validate(data)


def _count(out: WorldScore, form: Form, rows: list[Any]) -> None:
    for row in rows:
        chain = parse_chain(row.question)
        assert chain is not None
        first = true_first_error(form, chain, row.steps)
        out.rows += 1
        for i, label in enumerate(row.labels):
            truly_good = first == -1 or i < first
            if label is True:
                out.good += 1
                out.good_right += truly_good
            elif label is False:
                out.bad += 1
                out.bad_right += not truly_good


def score(world: str, problems: int, seed: int) -> WorldScore:
    started = time.perf_counter()
    spec = WORLDS[world]
    form: Form = spec["form"]
    engine = DomainPolicy(DomainWorld(seed=seed, **spec))
    config = config_for(world, seed)
    items = world_problems(form, problems, seed)
    if world == "no_gold_blind":  # no gold at all: nothing to hold out, the doubt comes from the votes
        items = [replace(p, gold_answer="") for p in items]
    out = WorldScore()
    if world.startswith("no_gold"):
        votes = pseudo_gold(engine, items, config)  # what process_shard does first, repeated for the truth
        out.majority, out.rejected = votes.audit.to_counts(), len(votes.rejected)
        for p in votes.problems:
            chain = parse_chain(p.question)
            assert chain is not None
            right = p.gold_answer == str(chain.answer)
            out.pseudo_total += 1
            out.pseudo_wrong += not right
            cell = out.truth.setdefault(agreement_level(json.loads(p.grading or "{}")["pseudo_gold_share"]), [0, 0])
            cell[0] += right
            cell[1] += 1
        if world not in JUDGED:
            items = votes.problems
    if world in JUDGED:
        judge = DomainJudge(engine.world, config.judge.engine if config.judge else None)  # type: ignore[arg-type]
        shard = process_shard(engine, config, ShardInput(0, list(items)), config.fingerprint(), judge_engine=judge)
        out.rollouts = shard.stats.rollouts
        out.majority = shard.stats.majority  # the card's table is the run's own, compared with the truth
        out.consensus_rejected = shard.stats.rejected - out.rejected
        _count(out, form, shard.records)
    else:
        result = make_labeler(config).label(engine, items)
        out.rollouts = result.stats.rollouts
        _count(out, form, result.records)
    out.seconds = time.perf_counter() - started
    return out


def pooled(world: str, problems: int, seeds: list[int]) -> WorldScore:
    total = WorldScore()
    for seed in seeds:
        s = score(world, problems, seed)
        for name in ("rows", "good", "good_right", "bad", "bad_right", "rollouts", "rejected", "seconds") + (
            "consensus_rejected",
        ):
            setattr(total, name, getattr(total, name) + getattr(s, name))
        total.pseudo_wrong += s.pseudo_wrong
        total.pseudo_total += s.pseudo_total
        for k, v in s.majority.items():
            total.majority[k] = total.majority.get(k, 0) + v
        for level, (r, t) in s.truth.items():
            cell = total.truth.setdefault(level, [0, 0])
            cell[0] += r
            cell[1] += t
    return total


def run(problems: int, seeds: list[int], worlds: list[str] | None = None) -> dict[str, Any]:
    return {w: pooled(w, problems, seeds).as_dict() for w in worlds or list(WORLDS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=60, help="problems per world and seed")
    parser.add_argument(
        "--seeds",
        default=f"{DEVELOPMENT.start}-{DEVELOPMENT.stop - 1}",
        help="development 0-3 (default); held-out 1012-1013 (1010-1011 are used)",
    )
    parser.add_argument("--worlds", default=",".join(WORLDS))
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    results = run(args.problems, seeds, args.worlds.split(","))
    for world, r in results.items():
        print(
            f"{world:16s} good {r['good_precision']}  bad {r['bad_precision']}  rows {r['rows']}  "
            f"labels {r['good_labels']}/{r['bad_labels']}  {r['seconds']} s",
            flush=True,
        )
    print(json.dumps({"benchmark": "domain_worlds", "seeds": args.seeds, "problems": args.problems} | results))


if __name__ == "__main__":
    main()
