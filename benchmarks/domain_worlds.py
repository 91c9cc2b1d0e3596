"""Label quality in the simulated worlds beyond math (prm_synth/engines/simulated_domains.py): code with
tests run in the sandbox (bugs at known steps, some hidden by a later step), multiple choice, and no gold
(the majority answer is the gold, wrong on a known share of the problems).

Per world: good / bad precision of the labels the labeler emits (against the truth recomputed from each
row's steps), and in the no-gold world the majority's accuracy per agreement level next to the truth
(how often the pseudo-gold equals the chain's real answer). Used by benchmarks/fidelity.py (`--domains`);
run alone: `python benchmarks/domain_worlds.py [--problems N] [--seeds 1010-1011]`, one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prm_synth.annotate.labeler import make_labeler  # noqa: E402
from prm_synth.config import PipelineConfig  # noqa: E402
from prm_synth.engines.simulated_domains import (  # noqa: E402
    DomainPolicy,
    DomainWorld,
    Form,
    parse_chain,
    true_first_error,
    world_problems,
)
from prm_synth.grading.majority import accuracy_table  # noqa: E402
from prm_synth.sampling.votes import pseudo_gold  # noqa: E402

HELD_OUT = range(1010, 1012)  # seeds no setting was chosen on
WORLDS: dict[str, dict[str, Any]] = {
    "code": {"form": "code", "step_error": 0.1, "recover": 0.1},
    "choice": {"form": "choice", "step_error": 0.1, "recover": 0.05},
    "no_gold": {"form": "math", "step_error": 0.06, "recover": 0.05, "trap": 0.3, "trap_error": 0.7},
    "no_gold_strict": {"form": "math", "step_error": 0.06, "recover": 0.05, "trap": 0.3, "trap_error": 0.7},
}
GRADERS: dict[str, dict[str, Any]] = {
    "code": {"kind": "code", "sandbox": {"cpu_s": 2, "wall_s": 60}},
    "choice": {"kind": "choice"},
    "no_gold": {"kind": "majority", "of": "math", "votes": 8, "min_agreement": 0.5},
    # the same world, keeping only the pseudo-golds with 7 of 8 votes: the misconception rarely gets them
    "no_gold_strict": {"kind": "majority", "of": "math", "votes": 8, "min_agreement": 0.875},
}


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
            out["agreement_accuracy"] = [
                {"level": lv, "right": r, "total": t} for lv, r, t in accuracy_table(self.majority)
            ]
        return out


def config_for(world: str, seed: int) -> PipelineConfig:
    problems = {"kind": "humaneval"} if world == "code" else {"kind": "builtin"}
    return PipelineConfig.model_validate(
        {
            "name": f"domain-{world}",
            "problems": problems,  # the world's own problems are passed to the labeler directly
            "grader": GRADERS[world],
            "policy": {"kind": "simulated", "seed": seed},  # unused: the world's DomainPolicy answers
            "sampling": {"samples_per_problem": 1},
            "steps": {"strategy": "code" if world == "code" else "line"},
        }
    )


def score(world: str, problems: int, seed: int) -> WorldScore:
    started = time.perf_counter()
    spec = WORLDS[world]
    form: Form = spec["form"]
    engine = DomainPolicy(DomainWorld(seed=seed, **spec))
    config = config_for(world, seed)
    items = world_problems(form, problems, seed)
    out = WorldScore()
    if world.startswith("no_gold"):
        votes = pseudo_gold(engine, items, config)
        out.majority, out.rejected = votes.audit.to_counts(), len(votes.rejected)
        for p in votes.problems:
            chain = parse_chain(p.question)
            out.pseudo_total += 1
            out.pseudo_wrong += chain is not None and p.gold_answer != str(chain.answer)
        items = votes.problems
    result = make_labeler(config).label(engine, items)
    out.rollouts = result.stats.rollouts
    for row in result.records:
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
    out.seconds = time.perf_counter() - started
    return out


def pooled(world: str, problems: int, seeds: list[int]) -> WorldScore:
    total = WorldScore()
    for seed in seeds:
        s = score(world, problems, seed)
        for name in ("rows", "good", "good_right", "bad", "bad_right", "rollouts", "rejected", "seconds"):
            setattr(total, name, getattr(total, name) + getattr(s, name))
        total.pseudo_wrong += s.pseudo_wrong
        total.pseudo_total += s.pseudo_total
        for k, v in s.majority.items():
            total.majority[k] = total.majority.get(k, 0) + v
    return total


def run(problems: int, seeds: list[int], worlds: list[str] | None = None) -> dict[str, Any]:
    return {w: pooled(w, problems, seeds).as_dict() for w in worlds or list(WORLDS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=60, help="problems per world and seed")
    parser.add_argument("--seeds", default=f"{HELD_OUT.start}-{HELD_OUT.stop - 1}", help="e.g. 1010-1011")
    parser.add_argument("--worlds", default=",".join(WORLDS))
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    results = run(args.problems, seeds, args.worlds.split(","))
    for world, r in results.items():
        print(f"{world:8s} good {r['good_precision']}  bad {r['bad_precision']}  rows {r['rows']}  {r['seconds']} s")
    print(json.dumps({"benchmark": "domain_worlds", "seeds": args.seeds, "problems": args.problems} | results))


if __name__ == "__main__":
    main()
