"""How right are the kept labels, and does the run's own `estimated_precision` say so? (issue #49)

Each case is a full pipeline (the default labeler, a `judge` section of 3 samples, the default `soft`
consensus, the default canaries) over builtin problems, run shard by shard through `process_shard` as
`prm-synth run` runs it. Against the truth recomputed from the step text: kept rows, kept good- and
bad-label precision; beside it the run's estimate (ConsensusStats.estimate: point and interval) and
whether the interval holds the measured precision. Cases (world, judge profile):

- plain, realistic: each fresh step wrong at 0.1, luck 0.05, a sampled solution's error may still end on
  the gold answer (recover_in_sample);
- repair, realistic / correlated: the policy repairs early slips (`repair`), so right answers often
  hide an early error; `correlated` misses errors exactly there (right answers, early steps) and its
  votes on one row repeat one reading;
- plain, oracle: an always-right judge;
- slip_repair, realistic: the policy repairs early slips in wrong-answer rows as much as in right ones
  (`repair_goes_on`), so the rollouts place the first error late there too (issue 57;
  benchmarks/results/canaries-continued-2026-12-07.md: chosen on seeds 4-11, 300-302 used, reported on 320-324).

- plain, realistic, audited by a stronger judge (`audit.judge` a simulated judge of higher accuracy),
  with the default audit size (30 rows) and with `audit.rows: 40` (`strong-audit-rows-40`): the run's
  `target_met` can only be true where an independent audit certifies it.

Every run is audited (the `audit` section's defaults, shard/audit.py): beside the measured precision, the
audit's interval (`estimated_precision`), `target_met`, and whether the interval holds the measured
precision, counted only where the check could fail (measured below 1, or the interval's high end below 1).

Seeds: development 0-3 (the default; settings are chosen here; 4-11 chose the continued canaries); used (looked
at, then something changed): 100-102, 200-202, 300-309, 325-334; reported once, after the last choice: 320-324;
held-out from here: 335 on (`--seeds 335 336 ...`).

    .venv/bin/python benchmarks/label_precision.py [--problems 60] [--seeds 0 1 2 3] [--report]

Beside kept rows: whole rows (every step labeled) and partial rows (consensus left some steps
`below_target`) apart, with labels a row for each, the kept good and bad labels, and the kept rows a
trainer's view exports (`trainable`: the first step labeled); judge requests a row with the audit's. The last line is one JSON object: per case, per seed and on
average, the figures above; `--report` also writes benchmarks/results/label_precision-seeds-<seeds>-<date>.md.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from prm_synth.config import validate_config
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.records import LabeledRecord, ShardStats
from prm_synth.records.canaries import CanaryStats, precision_report
from prm_synth.shard.audit import AuditRun, carried_target
from prm_synth.simulated.arithmetic import true_first_error
from prm_synth.simulated.engines import JUDGE_PROFILES, SimulatedJudge, SimulatedPolicy
from prm_synth.store.audit_counts import audit_report

WORLDS: dict[str, dict[str, Any]] = {
    "plain": {"step_error": 0.1, "recover": 0.05, "recover_in_sample": True},
    "repair": {"step_error": 0.1, "recover": 0.05, "recover_in_sample": True, "repair": 0.6},
    # the policy repairs early slips in wrong-answer rows as much as in right ones (issue 57)
    "slip_repair": {
        "step_error": 0.1,
        "recover": 0.05,
        "recover_in_sample": True,
        "repair": 0.6,
        "repair_goes_on": True,
    },
}
CASES = (
    ("plain", "realistic"),
    ("repair", "realistic"),
    ("repair", "correlated"),
    ("plain", "oracle"),
    ("slip_repair", "realistic"),
    ("plain", "realistic+strong-audit"),
    ("plain", "realistic+strong-audit-rows-40"),
)
DEVELOPMENT_SEEDS = [0, 1, 2, 3]
# once called held-out, looked at since (issue 57): 100-102, 200-202 shaped the redesign; 300-309 were read by the
# audit's report before its estimator changed, 300-302 by the canaries' before their design changed
# 325-334: reported on once, then the judge's request count changed (the controls' votes read back, rows
# unchanged) because the budget those runs showed was over: used from then on
USED_SEEDS = [100, 101, 102, 200, 201, 202, *range(300, 310), *range(325, 335)]
# reported on once after the last choice: 320-324 (the continued canaries); the next report takes 335 on
REPORTED_SEEDS = [320, 321, 322, 323, 324]
# a stronger audit judge than the realistic one: what `audit.judge` may name (another model)
STRONG_AUDIT = {
    "kind": "simulated-judge",
    "model_name": "simulated-strong-judge",
    "errors": {
        "recall_wrong_answer": 0.98,
        "recall_right_answer": 0.95,
        "off_by": 0.02,
        "false_alarm": 0.01,
        "format_failure": 0.01,
    },
}


def config_for(
    world: str,
    profile: str,
    seed: int,
    problems: int,
    shard_size: int | None = None,
    canaries: dict[str, Any] | None = None,
) -> Any:
    profile, _, audit = profile.partition("+")
    judge = JUDGE_PROFILES[profile].model_dump(mode="json") | {"seed": seed}
    audit_section: dict[str, Any] = {}
    if audit.startswith("strong-audit"):  # `strong-audit-all`: every kept row audited (a census)
        audit_section = {"judge": {"engine": STRONG_AUDIT | {"seed": seed + 7}}}
        audit_section |= {"rows": 1_000_000} if audit.startswith("strong-audit-all") else {}
        audit_section |= {"rows": int(audit.rpartition("-")[2])} if audit.startswith("strong-audit-rows-") else {}
        if audit.endswith(("-1", "-2")):  # `strong-audit-all-1`: one vote a row (two: -2)
            audit_section["judge"]["samples"] = int(audit[-1])
    return validate_config(
        {
            "audit": audit_section,
            "name": "label-precision",
            "problems": {"kind": "builtin", "count": problems, "seed": seed, "min_ops": 5, "max_ops": 12},
            "policy": {"kind": "simulated", "seed": seed, **WORLDS[world]},
            "sampling": {"samples_per_problem": 1},
            "judge": {"engine": judge, "samples": 3},
            "consensus": {},
            "canaries": canaries or {},
            "output": {"shard_size": shard_size or problems},
        }
    )


def label_counts(rows: list[LabeledRecord]) -> dict[str, int]:
    """Kept good and bad labels, rows kept with some steps left below the target, rows a view exports."""
    return {
        "good_labels": sum(r.labels.count(True) for r in rows),
        "bad_labels": sum(r.labels.count(False) for r in rows),
        "partial": sum(1 for r in rows if "below_target" in (r.unlabeled_reason or [])),
        "whole": sum(1 for r in rows if "below_target" not in (r.unlabeled_reason or [])),
        "labels_per_whole_row": per_row([r for r in rows if "below_target" not in (r.unlabeled_reason or [])]),
        "labels_per_partial_row": per_row([r for r in rows if "below_target" in (r.unlabeled_reason or [])]),
        "trainable": sum(1 for r in rows if r.labels and r.labels[0] is not None),
    }


def per_row(rows: list[LabeledRecord]) -> float | None:
    return round(sum(sum(x is not None for x in r.labels) for r in rows) / len(rows), 2) if rows else None


def holds(interval: dict[str, Any] | None, measured: float | None) -> bool | None:
    """Whether the interval holds the measured precision; None where the check could not fail (nothing
    measured, or measured 1.0 under a high end of 1.0)."""
    if interval is None or measured is None or (measured >= 1.0 and interval["high"] >= 1.0):
        return None
    return bool(interval["low"] <= measured <= interval["high"])


def precision(rows: list[LabeledRecord]) -> dict[str, float | None]:
    good = good_right = bad = bad_right = 0
    for r in rows:
        truth = true_first_error(r.steps)
        for i, label in enumerate(r.labels):
            right = truth == -1 or i < truth
            if label is True:
                good, good_right = good + 1, good_right + right
            elif label is False:
                bad, bad_right = bad + 1, bad_right + (not right)
    return {"good": good_right / good if good else None, "bad": bad_right / bad if bad else None}


def run_case(
    world: str,
    profile: str,
    seed: int,
    problems: int,
    shard_size: int | None = None,
    canaries: dict[str, Any] | None = None,
) -> dict[str, Any]:
    config = config_for(world, profile, seed, problems, shard_size, canaries)
    policy, judge = SimulatedPolicy(config.policy), SimulatedJudge(config.judge.engine)
    auditor = SimulatedJudge(config.audit.judge.engine) if config.audit.judge.engine is not None else None
    kept: list[LabeledRecord] = []
    stats = ShardStats()
    written: list[ShardStats] = []
    for shard in iter_shards(config):
        # as `prm-synth run` does: a shard reads the audit of the shards max_parallel_shards before it
        target = carried_target(config, written[: max(0, shard.index - config.run.max_parallel_shards + 1)])
        run = AuditRun(auditor, target)
        out = process_shard(policy, config, shard, config.fingerprint(), judge_engine=judge, audit=run)
        kept += out.records
        stats = stats + out.stats
        written.append(out.stats)
    measured = precision(kept)
    canaries = CanaryStats.read(stats.canaries)
    estimate = precision_report(stats.consensus.estimate if stats.consensus else {}, canaries)
    posterior_alone = precision_report(stats.consensus.estimate if stats.consensus else {})  # no canaries
    inside = {}
    for kind in ("good", "bad"):
        e, m = estimate.get(kind), measured[kind]
        inside[kind] = None if e is None or m is None else bool(e["low"] <= m <= e["high"])
    audit = audit_report(stats.audit, config.consensus.target_precision) or {}
    audit_holds = {k: holds(audit.get(k), measured[k]) for k in ("good", "bad")}
    right = [r for r in kept if r.final_correct]
    hidden = sum(1 for r in right if true_first_error(r.steps) >= 0)
    return {
        "kept": len(kept),
        **label_counts(kept),
        "measured": {k: None if v is None else round(v, 4) for k, v in measured.items()},
        "estimated": {k: estimate[k] for k in ("good", "bad")},
        "posterior_bad_interval": [alone["low"], alone["high"]] if (alone := posterior_alone["bad"]) else None,
        "inside": inside,
        "judge_requests_per_row": round(
            (stats.judge.samples - stats.judge.reused) / max(stats.rows + stats.rejected, 1), 3
        )
        if stats.judge
        else None,
        "audit": {k: audit.get(k) for k in ("good", "bad", "target_met", "rows_audited", "estimator", "rests_on")},
        "audit_holds": audit_holds,
        "target_met": audit.get("target_met"),
        "audit_requests_per_row": round(
            (stats.audit.get("requests", 0) + stats.audit.get("canary_requests", 0))
            / max(stats.rows + stats.rejected, 1),
            3,
        ),
        # the canaries' and the clean controls' judge requests
        "canary_judge_requests_per_row": round(c.judge_requests / max(stats.rows + stats.rejected, 1), 3)
        if (c := CanaryStats.read(stats.canaries))
        else 0.0,
        "canaries": c.summary() if (c := CanaryStats.read(stats.canaries)) else None,
        "kept_right_hiding_error": f"{hidden}/{len(right)}",
    }


def main() -> None:
    from _report import ReportFlag, write_report  # benchmarks/ is on sys.path: run as a script

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=60)
    parser.add_argument("--shard-size", type=int, default=None, help="problems a shard (default: all in one)")
    parser.add_argument("--seeds", type=int, nargs="*", default=DEVELOPMENT_SEEDS, help="development 0-3 (default)")
    parser.add_argument("--cases", nargs="*", default=[f"{w}/{p}" for w, p in CASES])
    parser.add_argument("--report", action=ReportFlag)
    args = parser.parse_args()
    started = time.perf_counter()
    result: dict[str, Any] = {"problems": args.problems, "seeds": args.seeds, "cases": {}}
    for case in args.cases:
        world, profile = case.split("/")
        runs = {seed: run_case(world, profile, seed, args.problems, args.shard_size) for seed in args.seeds}
        mean = {
            **{
                k: round(sum(r[k] for r in runs.values()) / len(runs), 2)
                for k in ("kept", "whole", "partial", "trainable", "good_labels", "bad_labels")
            },
            **{
                f"{k}_precision": round(sum(r["measured"][k] or 0.0 for r in runs.values()) / len(runs), 4)
                for k in ("good", "bad")
            },
            "inside": sum(bool(v) for r in runs.values() for v in r["inside"].values()),
            "audit_holds": f"{sum(v is True for r in runs.values() for v in r['audit_holds'].values())}/"
            f"{sum(v is not None for r in runs.values() for v in r['audit_holds'].values())}",
            "target_met": sum(bool(r["target_met"]) for r in runs.values()),
            "target_met_while_below": sum(
                bool(r["target_met"]) and any(m is not None and m < 0.97 - 0.01 for m in r["measured"].values())
                for r in runs.values()
            ),
            "audit_requests_per_row": round(sum(r["audit_requests_per_row"] for r in runs.values()) / len(runs), 3),
            "canary_judge_requests_per_row": round(
                sum(r["canary_judge_requests_per_row"] for r in runs.values()) / len(runs), 3
            ),
            "judge_requests_per_row": round(
                sum(r["judge_requests_per_row"] or 0 for r in runs.values()) / len(runs), 3
            ),
        }
        for seed, r in runs.items():
            print(
                f"{case:22} seed {seed}: kept {r['kept']:3} (whole {r['whole']} at {r['labels_per_whole_row']} "
                f"labels a row, partial {r['partial']} at {r['labels_per_partial_row']}, trainable {r['trainable']}, "
                f"labels {r['good_labels']}/{r['bad_labels']})  measured {r['measured']}  "
                f"audit good {r['audit']['good']} bad {r['audit']['bad']}  target_met {r['target_met']}  "
                f"audit holds {r['audit_holds']}  requests a row: judge {r['judge_requests_per_row']} "
                f"+ audit {r['audit_requests_per_row']} + canaries {r['canary_judge_requests_per_row']}",
                flush=True,
            )
        print(f"{case:22} mean: {mean}", flush=True)
        result["cases"][case] = {"mean": mean, "runs": runs}
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))
    head = {case: c["mean"] for case, c in result["cases"].items()}
    write_report("label_precision", head, page=f"label_precision-seeds-{'-'.join(map(str, args.seeds))}")


if __name__ == "__main__":
    main()
