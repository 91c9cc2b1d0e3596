"""The run summary in words: the two-column table `prm-synth run` and `inspect` print, and the phrases the
card and the flow artifact share (what the judge cost, how right it was measured)."""

from __future__ import annotations

from prm_synth.records import REJECT_REASONS, ConsensusStats
from prm_synth.store.given_labels import against_given_text
from prm_synth.store.summary import RunSummary


def judge_cost_text(summary: RunSummary) -> str | None:
    """What the judge cost, in words (run summary, `inspect`, card, flow artifact); None without a judge."""
    if summary.judge is None:
        return None
    skipped = f", {summary.rows_not_judged} not sent (the rollouts pinned them)" if summary.rows_not_judged else ""
    per_row = summary.judge_tokens_per_kept_row
    return (
        f"{summary.judge_requests} requests (votes asked) on {summary.rows_judged} rows{skipped}; "
        f"{summary.judge_tokens} tokens, " + (f"{per_row} a kept row" if per_row is not None else "no row kept")
    )


def judge_accuracy_short(consensus: ConsensusStats) -> str:
    """The judge's measured accuracy in one short line for the run summary (`inspect` and the card give
    it whole): per answer class, how often it named the pinned error and said -1 on clean rows."""
    parts = []
    for name in ("right", "wrong"):
        c = (consensus.by_answer or {}).get(name) or {}
        pinned, clean = c.get("pinned_votes", 0), c.get("clean_votes", 0)
        bits = [f"names the error {c.get('pinned_named', 0) / pinned:.0%} of {pinned}"] if pinned else []
        bits += [f"says clean {c.get('clean_said_clean', 0) / clean:.0%} of {clean}"] if clean else []
        if bits:
            parts.append(f"{name} answers: {', '.join(bits)}")
    return "; ".join(parts) or consensus.judge_accuracy_text().split(";")[0]


def summary_lines(summary: RunSummary) -> list[tuple[str, str]]:
    """The run summary as text, row by row: the one text rendering of the summary (`prm-synth run` prints
    it, `prm-synth inspect` draws it as a table; `to_dict` is its JSON, the card and the flow's artifact
    have their own). What only the run that wrote the folder knows is shown where `run` is set."""
    run, labels = summary.run, summary.labels
    bad = labels.get("bad_step_fraction")
    rows: list[tuple[str, str]] = [
        ("problems in", problems_in_text(summary)),
        ("rows out", str(summary.rows)),
        ("rejected", f"{summary.rejected} ({_counts(summary.rejected_by_reason)})"),
        ("reconciles", "yes" if summary.reconciles else "NO: counts do not add up"),
        ("shards", str(summary.shards) + (f" ({run.shards_run} run, {run.shards_skipped} resumed)" if run else "")),
        *([("kept past --limit", run.kept_past_limit.text())] if run and run.kept_past_limit else []),
        ("rollouts", f"{summary.rollouts} ({summary.unknown_rollouts} ungradable)"),
    ]
    if run is not None:
        rows.append(
            (
                "engine requests",
                f"{summary.requests_refused} refused, {run.requests_retried} retried, "
                f"{len(run.shards_failed)} shard(s) failed",
            )
        )
    rows += [
        ("tokens", str(summary.tokens)),
        (
            "cost per labeled step",
            f"{_one_decimal(summary.rollouts_per_labeled_step)} rollouts, "
            f"{_one_decimal(summary.tokens_per_labeled_step)} tokens",
        ),
        (
            "rollout tokens",
            f"{_one_decimal(summary.rollout_tokens_per_labeled_step)} a labeled step, "
            f"{_one_decimal(summary.rollout_tokens_per_located_error)} a located first error",
        ),
        ("steps", f"{labels.get('steps', 0)} ({labels.get('labeled_steps', 0)} labeled)"),
        ("bad steps", f"{labels.get('bad_steps', 0)}" + ("" if bad is None else f" ({bad:.1%} of labeled)")),
        ("label sources", _counts(labels.get("label_sources"))),
        ("final answers", _counts(labels.get("final"))),
        ("rows with an error", str(labels.get("rows_with_error", 0))),
        (
            "whole / partial rows",
            f"{labels.get('whole_rows', 0)} whole ({_one_decimal(labels.get('labels_per_whole_row'))} labels a row), "
            f"{labels.get('partial_rows', 0)} partial ({_one_decimal(labels.get('labels_per_partial_row'))} labels a "
            "row: only their labels that reach the target kept)",
        ),
        (
            "first error at step",
            ", ".join(f"{k}: {v}" for k, v in (labels.get("first_error_histogram") or {}).items()) or "none",
        ),
    ]
    if (cost := judge_cost_text(summary)) is not None:
        rows.append(("judge cost", cost))
    if (c := summary.consensus) is not None and c.rows:
        # the run's summary says it in one line; `inspect`'s table (no `run`) gives it whole
        accuracy = judge_accuracy_short(c) if run is not None else c.judge_accuracy_text()
        rows += [("kept by consensus", c.kept_text()), ("judge accuracy", accuracy)]
    if (precision := summary.precision_text(short=run is not None)) is not None:
        rows.append(("estimated precision", precision))
    if summary.against_given is not None:
        rows.append(("against given labels", against_given_text(summary.against_given)))
    if (v := summary.verify) is not None and v.chains:
        rows.append(
            (
                "verification chains",
                f"{v.kept} of {v.chains} kept ({v.kept / v.chains:.1%}; dropped: {_counts(v.dropped_by_reason)})",
            )
        )
    rows.append(("config fingerprint", summary.config_fingerprint))
    if run is not None:
        rows.append(("wall time", f"{run.wall_seconds:.1f} s ({run.startup_seconds:.1f} s start-up)"))
    return rows


# Why a problem is rejected before it is labeled: its source row (stage load) or, without a gold answer,
# its policy's answers reached no majority (grader.kind majority).
BEFORE_LABELING = frozenset(REJECT_REASONS[: REJECT_REASONS.index("missing_tests") + 1]) | {"no_majority"}


def problems_in_text(summary: RunSummary) -> str:
    """How many problems were read, how many went on to be labeled, and why the others did not."""
    read, loaded = summary.problems_in, summary.problems_loaded
    if loaded >= read:
        return f"{read} ({loaded} loaded)"
    reasons = {k: v for k, v in summary.rejected_by_reason.items() if k in BEFORE_LABELING}
    return f"{read} ({loaded} loaded; {read - loaded} rejected before labeling: {_counts(reasons)})"


def _counts(counts: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((counts or {}).items())) or "none"


def _one_decimal(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"
