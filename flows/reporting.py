"""What a run shows while and after it works: a progress bar, a progress artifact, summary artifacts."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from rich.progress import Progress

from prm_synth.annotate.labeler import make_labeler
from prm_synth.config import PipelineConfig
from prm_synth.engines import model_name


class ShardProgress:
    """Shards done out of the expected total (None when the source cannot say how many)."""

    def __init__(self, total: int | None, terminal: bool) -> None:
        self.total, self.done = total, 0
        self.artifact = create_progress_artifact(0.0, description="shards finished or resumed")
        self.bar: Progress | None = None
        if terminal:
            self.bar = Progress(transient=False)
            self.bar.start()
            self.task = self.bar.add_task("labeling shards", total=total)

    def advance(self) -> None:
        self.done += 1
        if self.bar:
            self.bar.advance(self.task)
        if self.total:
            with contextlib.suppress(Exception):  # progress is best effort; the run is what matters
                update_progress_artifact(self.artifact, min(100.0, 100.0 * self.done / self.total))

    def close(self) -> None:
        if self.bar:
            self.bar.stop()
        with contextlib.suppress(Exception):
            update_progress_artifact(self.artifact, 100.0)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "run"


def publish_run_artifacts(summary: dict[str, Any], config: PipelineConfig) -> None:
    """A table of counts and a markdown summary with label statistics, attached to the flow run."""
    labels = summary.get("labels", {})
    consensus = summary.get("consensus", {})
    rows = [
        {"count": "problems in", "value": summary["problems_in"]},
        {"count": "rows out", "value": summary["rows"]},
        {"count": "rejected", "value": summary["rejected"]},
        *({"count": f"rejected: {k}", "value": v} for k, v in sorted(summary["rejected_by_reason"].items())),
        {"count": "kept by consensus", "value": consensus.get("kept", "n/a")},
        {"count": "rollouts", "value": summary["rollouts"]},
        {"count": "tokens", "value": summary["tokens"]},
        {"count": "shards", "value": summary["shards"]},
    ]
    key = _slug(config.name)
    create_table_artifact(rows, key=f"{key}-counts", description="prm-synth run counts")
    markdown = "\n".join(
        [
            f"# prm-synth run: {config.name}",
            "",
            f"- policy: `{model_name(config.policy)}`",
            f"- annotator: `{config.annotate.method}`: {make_labeler(config).budget_line()}; rule `{config.labels.rule}`",
            f"- config fingerprint: `{summary['config_fingerprint']}`",
            f"- counts reconcile: **{summary['reconciles']}**",
            f"- wall time: {summary.get('wall_seconds', 0):.1f} s",
            "",
            "## Label statistics",
            "",
            "| statistic | value |",
            "|---|---|",
            *(f"| {k} | {json.dumps(v) if isinstance(v, dict) else v} |" for k, v in labels.items()),
            *_consensus_section(consensus),
        ]
    )
    create_markdown_artifact(markdown, key=f"{key}-summary", description="prm-synth label statistics")


def _consensus_section(consensus: dict[str, Any]) -> list[str]:
    """Kept fraction, per-source counts and the agreement matrix (MC first error × judge's)."""
    if not consensus.get("rows"):
        return []
    agreement = consensus.get("agreement", {})
    return [
        "",
        "## Consensus",
        "",
        f"- kept {consensus.get('kept', 0)} of {consensus['rows']} ({consensus.get('kept_fraction') or 0:.1%})",
        f"- by source: `{json.dumps(consensus.get('by_source', {}), sort_keys=True)}`",
        "",
        "| MC first error, judge first error | rows |",
        "|---|---|",
        *(f"| {pair} | {n} |" for pair, n in sorted(agreement.items())),
    ]
