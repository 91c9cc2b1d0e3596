"""What the dataset card says about the grader (`grader.kind`) when it is not today's math grader: how a
final outcome was checked, and under `majority` that the gold answers are pseudo-gold, with how often the
majority answer matched a held-out gold at each agreement level (from the shard markers' counts)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prm_synth.grading.majority import AGREEMENT_BINS, accuracy_table
from prm_synth.records import ShardStats
from prm_synth.store.readers import dataset_shards

KIND_TEXT = {
    "choice": "a multiple-choice grader: the solution's final choice (a letter or an option's text) against "
    "the gold option",
    "exact": "an exact-match grader: the stated answer, normalized, against the gold answer and its aliases",
    "code": "running the solution's last fenced Python block against the problem's tests in a bubblewrap "
    "sandbox (no network, read-only file system, no home folder, limits on CPU, wall time, memory, "
    "processes and output; a limit hit or a sandbox fault is ungradable, never right)",
}


def level_span(level: str) -> str:
    """An audit level (a bin's lower edge) as the span of shares it holds: "0.6 to <0.7", "1.0"."""
    if level == "1.0" or level.startswith("<"):
        return level
    edges = [f"{e:.1f}" for e in AGREEMENT_BINS]
    upper = edges[edges.index(level) + 1] if level in edges[:-1] else "1.0"
    return f"{level} to <{upper}"


def majority_counts(dataset_dir: str | Path) -> dict[str, int]:
    stats = sum((e.stats for e in dataset_shards(dataset_dir)), start=ShardStats())
    return stats.majority


def grader_facts(dataset_dir: str | Path, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The card's grader paragraph and agreement table; None under the default math grader."""
    grader = config.get("grader") or {}
    kind = grader.get("kind", "math")
    if kind == "math":
        return None
    if kind != "majority":
        return {"text": f"Final outcomes were graded by {KIND_TEXT[kind]}.", "table": []}
    counts = majority_counts(dataset_dir)
    inner = grader.get("of", "math")
    text = (
        f"No gold answers were used: each problem's gold is a pseudo-gold, the most common final answer "
        f"(read by the `{inner}` grader) among {grader.get('votes')} samples of the policy, kept where it had at "
        f"least {grader.get('min_agreement')} of the votes; rows made against it say so in `gold_origin`. "
        f"{counts.get('kept', 0)} problems got a pseudo-gold, {counts.get('rejected', 0)} were rejected "
        f"(`no_majority`)."
    )
    table = [
        {"level": level_span(level), "right": right, "total": total, "accuracy": f"{right / total:.3f}"}
        for level, right, total in accuracy_table(counts)
    ]
    if table:
        text += (
            " The problems' own gold answers were held out from labeling and used only to measure how often the "
            "majority answer was right, by agreement level (the winning answer's share of the votes):"
        )
    return {"text": text, "table": table}
