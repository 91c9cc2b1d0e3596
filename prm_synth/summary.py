"""Counts and label statistics of an output folder (the run summary and `prm-synth inspect`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from prm_synth.shards import iter_tables, read_manifest


def label_statistics(root: str | Path) -> dict[str, Any]:
    """Streams the finished shards column-wise; memory holds one shard at a time."""
    steps = labeled = bad = rows = with_error = 0
    final = Counter()
    first_errors: Counter[int] = Counter()
    sources: Counter[str] = Counter()
    for table in iter_tables(root, "data"):
        cols = table.select(["labels", "first_error_mc", "final_correct", "label_source"]).to_pydict()
        for labels, first, final_correct, label_source in zip(
            cols["labels"], cols["first_error_mc"], cols["final_correct"], cols["label_source"], strict=True
        ):
            rows += 1
            steps += len(labels)
            labeled += sum(lab is not None for lab in labels)
            bad += sum(lab is False for lab in labels)
            sources.update(label_source)
            final["unknown" if final_correct is None else "correct" if final_correct else "incorrect"] += 1
            if first >= 0:
                with_error += 1
                first_errors[first] += 1
    return {
        "steps": steps,
        "labeled_steps": labeled,
        "bad_steps": bad,
        "bad_step_fraction": round(bad / labeled, 4) if labeled else None,
        "rows_with_error": with_error,
        "first_error_histogram": {str(k): v for k, v in sorted(first_errors.items())},
        "label_sources": dict(sources),
        "final": dict(final),
    }


def summarize(root: str | Path) -> dict[str, Any]:
    manifest = read_manifest(root)
    totals = manifest["totals"]
    stats = totals.get("stats", {})
    config = manifest.get("config", {})
    samples = config.get("sampling", {}).get("samples_per_problem", 1)
    load_rejected = stats.get("inputs", 0) - stats.get("problems_loaded", 0)
    if config.get("annotate", {}).get("method") == "omegaprm":
        # A tree gives any number of rows: every problem has rows or a rejection (checked per shard).
        reconciles = stats.get("problems_labeled", 0) + totals["rejected"] >= stats.get("inputs", 0)
    else:
        # Every input row ends as labeled rows (one per sampled solution) or as rejected rows.
        reconciles = totals["rows"] + totals["rejected"] == load_rejected + stats.get("problems_loaded", 0) * samples
    return {
        "problems_in": stats.get("inputs", 0),
        "problems_loaded": stats.get("problems_loaded", 0),
        "samples_per_problem": samples,
        "rows": totals["rows"],
        "rejected": totals["rejected"],
        "rejected_by_reason": stats.get("rejected_by_reason", {}),
        "consensus": _consensus(stats.get("judge", {}).get("consensus")),
        "problems_labeled": stats.get("problems_labeled", 0),
        "reconciles": reconciles,
        "shards": totals["shards"],
        "rollouts": stats.get("rollouts", 0),
        "tokens": stats.get("tokens", 0),
        "config_fingerprint": manifest["config_fingerprint"],
        "labels": label_statistics(root),
    }


def _consensus(counts: dict[str, Any] | None) -> dict[str, Any]:
    """Consensus counts summed over shards, with the fractions recomputed from them."""
    if not counts:
        return {}
    from prm_synth.consensus import consensus_summary

    return counts | consensus_summary(counts)
