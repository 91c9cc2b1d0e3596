"""A small finished dataset written with ShardStore, shaped like a simulated run.

Label patterns cover every case the views must handle: all steps good, an error in the middle with
a recovered (True) label after it, an unlabeled tail, a bad first step, an unlabeled first step
(nothing to supervise), and an error followed by an unprobed step. One step holds the Math-Shepherd
tag, so the two views that use it as a marker must skip that row.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from prm_synth.config import validate_config
from prm_synth.records import LabeledRecord, RejectedRecord, ShardStats
from prm_synth.store.shards import ShardStore

PATTERNS: list[list[bool | None]] = [
    [True, True, True],
    [True, False, False, True],
    [True, None, None],
    [False, False],
    [None, True],
    [True, True, False, None],
]
PROBLEMS = 24
ROWS_PER_PROBLEM = 3
PROBLEMS_PER_SHARD = 8
TAGGED_ROW = "p007-s2"  # its second step (a supervised one) contains "ки"

CONFIG = {
    "name": "fixture",
    "problems": {"kind": "builtin", "count": PROBLEMS + 2, "seed": 0},
    "policy": {"kind": "simulated", "seed": 0},
    "sampling": {"samples_per_problem": ROWS_PER_PROBLEM},
    "annotate": {"method": "mc", "k": 8},
    "judge": {"engine": {"kind": "simulated-judge"}, "samples": 3},
    "consensus": {"policy": "agree"},
    "output": {"shard_size": PROBLEMS_PER_SHARD},
}


def _record(problem: int, sample: int) -> LabeledRecord:
    labels = PATTERNS[(problem * ROWS_PER_PROBLEM + sample) % len(PATTERNS)]
    rid = f"p{problem:03d}-s{sample}"
    steps = [f"Step {i + 1}: {problem} + {i} = {problem + i}.\n" for i in range(len(labels))]
    if rid == TAGGED_ROW:
        steps[1] = "Mark the step ки here.\n"
    first_error = next((i for i, lab in enumerate(labels) if lab is False), -1)
    return LabeledRecord(
        id=rid,
        problem_id=f"builtin-{problem:03d}",
        source="builtin",
        question=f"  Compute {problem} plus the next numbers.\n",
        gold_answer=str(problem),
        steps=steps,
        final_answer=str(problem),
        final_correct=first_error < 0,
        mc_values=[None if lab is None else (1.0 if lab else 0.0) for lab in labels],
        mc_correct=[0 if lab is None else 8 * int(lab) for lab in labels],
        mc_total=[0 if lab is None else 8 for lab in labels],
        labels=labels,
        label_source=["none" if lab is None else "mc" for lab in labels],
        label_rule="hard",
        first_error_mc=first_error,
        annotator="mc",
        policy_model="simulated-arithmetic",
        config_fingerprint="fixturefp",
        rollouts=8 * sum(lab is not None for lab in labels),
        tokens=100,
        judge_first_error=first_error,
        judge_votes=[first_error] * 3,
        consensus=True,
        judge_model="simulated-judge",
    )


def make_dataset(root: Path) -> list[dict[str, Any]]:
    """Write the dataset into `root`; return its record rows."""
    config = validate_config(CONFIG)
    dump = config.model_dump(mode="json")
    store = ShardStore(root, "fixturefp")
    store.prepare(dump, yaml.safe_dump(dump))
    rows: list[dict[str, Any]] = []
    for shard in range(PROBLEMS // PROBLEMS_PER_SHARD):
        problems = range(shard * PROBLEMS_PER_SHARD, (shard + 1) * PROBLEMS_PER_SHARD)
        records = [_record(p, s).to_row() for p in problems for s in range(ROWS_PER_PROBLEM)]
        rejected = [
            RejectedRecord(
                f"rej-{shard}-a",
                f"builtin-x{shard}",
                "builtin",
                "consensus",
                "judge_disagrees",
                config_fingerprint="fixturefp",
            ).to_row(),
        ]
        if shard == 0:
            rejected.append(
                RejectedRecord(
                    "rej-0-b", None, "builtin", "load", "bad_answer", config_fingerprint="fixturefp"
                ).to_row()
            )
        reasons = Counter(r["reason"] for r in rejected)
        stats = ShardStats(
            inputs=len(problems) + len(rejected),
            problems_loaded=len(problems) + len(rejected),
            rows=len(records),
            rejected=len(rejected),
            rejected_by_reason=dict(reasons),
            rollouts=sum(r["rollouts"] for r in records),
        )
        store.write_shard(shard, records, rejected, problems=len(problems), stats=stats)
        rows += records
    store.write_manifest(dump)
    return rows


def expected_labels(row: dict[str, Any]) -> list[bool] | None:
    """The view rule restated independently: stop before an unlabeled step, after a bad one."""
    out: list[bool] = []
    for lab in row["labels"]:
        if lab is None:
            break
        out.append(lab)
        if lab is False:
            break
    return out or None
