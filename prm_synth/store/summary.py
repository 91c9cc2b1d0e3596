"""Counts and label statistics of an output folder (the run summary and `prm-synth inspect`).

Row counts are those of the shard files, each checked against its marker's checksum (a damaged file
raises `shards.CorruptShardError`); a marker's own row counts are not trusted. The other counts
(inputs, rollouts, tokens) are the markers' stats, summed."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from prm_synth.config import ConfigError, rows_reconcile, validate_config
from prm_synth.records import ConsensusStats, JudgeStats, ShardStats, VerifyStats
from prm_synth.records.canaries import CanaryStats, precision_report
from prm_synth.store.audit_counts import audit_report, miss_line
from prm_synth.store.given_labels import against_given
from prm_synth.store.left_open import sample_in
from prm_synth.store.limit import KeptPastLimit
from prm_synth.store.readers import dataset_shards, iter_records, iter_tables, read_manifest

# What `estimated_precision` cannot promise, said wherever it is shown.
PRECISION_LIMIT = (
    "The audit judge's own error is read from planted errors, which are easier to find than natural ones: a judge "
    "that errs on natural rows unlike on planted ones is not corrected for; where a human-labeled set exists, "
    "`prm-synth eval labels` compares."
)


def _label_statistics(root: str | Path) -> tuple[dict[str, Any], int]:
    """The label statistics and the number of rows they were computed from."""
    steps = labeled = bad = rows = with_error = 0
    final = Counter()
    row_kind: Counter[str] = Counter()  # whole rows (every label consensus kept) and partial ones
    row_labels: Counter[str] = Counter()
    first_errors: Counter[int] = Counter()
    sources: Counter[str] = Counter()
    for table in iter_tables(root, "data"):
        names = ["labels", "first_error_mc", "final_correct", "label_source"]
        reasons = table.column("unlabeled_reason").to_pylist() if "unlabeled_reason" in table.column_names else None
        cols = table.select(names).to_pydict()
        for j, (labels, first, final_correct, label_source) in enumerate(
            zip(cols["labels"], cols["first_error_mc"], cols["final_correct"], cols["label_source"], strict=True)
        ):
            partial = reasons is not None and "below_target" in (reasons[j] or [])
            kept_labels = sum(lab is not None for lab in labels)
            row_kind["partial" if partial else "whole"] += 1
            row_labels["partial" if partial else "whole"] += kept_labels
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
        # rows kept whole and rows kept with only their labels that reach the target (`below_target`)
        "whole_rows": row_kind["whole"],
        "partial_rows": row_kind["partial"],
        "labels_per_whole_row": round(row_labels["whole"] / row_kind["whole"], 2) if row_kind["whole"] else None,
        "labels_per_partial_row": round(row_labels["partial"] / row_kind["partial"], 2)
        if row_kind["partial"]
        else None,
        "first_error_histogram": {str(k): v for k, v in sorted(first_errors.items())},
        "label_sources": dict(sources),
        "final": dict(final),
    }, rows


@dataclass
class RunFacts:
    """What one run of the flow did (the folder's summary holds what is in it)."""

    started_at: float  # epoch seconds: the CLI counts its start-up from it
    wall_seconds: float
    shards_run: int
    shards_skipped: int
    shards_failed: list[int]
    requests_retried: int
    dry_run: bool
    startup_seconds: float = 0.0  # set by the CLI, which knows when the command started
    # finished shards holding problems past this run's --limit, kept as they are (store/limit.py)
    kept_past_limit: KeptPastLimit | None = None
    # A dry run's measurements for the cost estimate (products.estimate.CostSample as a dict); not in to_dict:
    # the command prints the estimate made from it (`cost` in --json)
    cost_sample: dict[str, Any] | None = None


@dataclass
class RunSummary:
    """The run summary of an output folder (`summarize`), with the facts of the run that wrote it
    (`run`, set by the flow). Read by the CLI, the flow's artifacts and the dataset card; `to_dict`
    is its JSON (`prm-synth run --json`, `prm-synth inspect --json`)."""

    problems_in: int
    problems_loaded: int
    samples_per_problem: int
    solutions_sampled: int
    rows: int
    rejected: int
    rejected_by_reason: dict[str, int]
    consensus: ConsensusStats | None  # None where no consensus filter ran
    problems_labeled: int
    reconciles: bool
    shards: int
    rollouts: int
    requests_refused: int
    tokens: int
    # ungradable rollouts are left out of the evidence; many of them make labels rarer, not wrong
    unknown_rollouts: int
    unknown_rate: float
    warnings: list[str]
    # what a labeled step cost: the figure to compare methods and runs by
    rollouts_per_labeled_step: float | None
    tokens_per_labeled_step: float | None
    config_fingerprint: str
    labels: dict[str, Any] = field(default_factory=dict)  # label statistics (`_label_statistics`)
    verify: VerifyStats | None = None  # None where no verify stage ran
    run: RunFacts | None = None
    # What the judge cost (0 without one): votes asked (each one generation of the judge, the figure
    # `judge.select: needed` saves), its tokens, the rows it was asked about, its tokens a kept row.
    judge_requests: int = 0
    judge_tokens: int = 0
    rows_judged: int = 0
    rows_not_judged: int = 0  # rows not sent: the rollouts pinned them (`judge.select: needed`)
    judge_tokens_per_kept_row: float | None = None
    judge: JudgeStats | None = None  # the judge stage's counters; None without a judge
    # the rollouts' tokens (prompt and generated) per labeled step and per row whose first error was
    # located: what long solutions (thinking traces) cost, where a rollout's length grows with the steps left
    rollout_tokens_per_labeled_step: float | None = None
    rollout_tokens_per_located_error: float | None = None

    canaries: CanaryStats | None = None  # what the planted errors measured (OUT/canaries/); None without
    # the kept labels against the labels a source gave its solutions (store/given_labels.py); None: none given
    against_given: dict[str, Any] | None = None
    audit: dict[str, Any] = field(default_factory=dict)  # the kept rows' audit, summed (store/audit_counts.py)
    target_precision: float | None = None  # consensus.target_precision where soft consensus ran

    def audit_report(self) -> dict[str, Any] | None:
        """The audit's precision of the kept labels and `target_met` (store/audit_counts.py); None without."""
        return audit_report(self.audit, self.target_precision) if self.target_precision is not None else None

    def target_met(self) -> bool:
        """True only where the audit's low end for both good and bad labels reaches the target."""
        report = self.audit_report()
        return bool(report and report["target_met"])

    def miss_warning(self) -> str | None:
        """The ONE warning line of a run whose audit does not certify its target (or that had none)."""
        report = self.audit_report()
        if report is None:
            if self.consensus is not None and self.consensus.estimate:
                return "target_met false: no audit ran (audit.enabled off), so nothing independent certifies the labels"
            return None
        return miss_line(report)

    def estimated_precision(self) -> dict[str, Any] | None:
        """How right the kept labels are, as the run estimates it (judge/estimate.py): good and bad, point
        and interval, overall and per answer class, and what it rests on; None where soft consensus did
        not keep a row with an estimate."""
        if self.consensus is None or not self.consensus.estimate:
            return None
        posterior = precision_report(self.consensus.estimate, self.canaries) | {
            "rests_on": self.canaries.summary() if self.canaries else None,
            "limit": PRECISION_LIMIT,
        }
        audit = self.audit_report()
        if audit is None:  # no audit: the selection's own figure, which certifies nothing
            return posterior | {"target_met": False, "from": "posterior (no audit)"}
        # the audit leads: its interval is what the run may claim; the posterior's is kept beside it
        return {k: v for k, v in audit.items()} | {"from": "audit", "posterior": posterior}

    def precision_text(self, short: bool = False) -> str | None:
        """`estimated_precision` in words (`inspect`, the flow artifact, the card), led by the audit's low
        end and what it rests on, and by the one warning line where the run misses its target; `short`: one
        line for the run's own summary."""
        report = self.estimated_precision()
        if report is None:
            return None
        parts = []
        for kind in ("good", "bad"):
            if (e := report[kind]) is not None:
                parts.append(f"{kind} labels at least {e['low']:.3f} (95% interval {e['low']:.3f}-{e['high']:.3f})")
        warning = self.miss_warning()
        lead = f"WARNING {warning}. " if warning else f"target_met: {self.target_precision} certified. "
        if report.get("from") == "audit":
            rests = report["rests_on"]
        else:
            rests = "the posterior that chose the rows (no audit), " + (
                self.canaries.text() if self.canaries else "no planted errors (canaries off)"
            )
        if short:
            return f"{lead}{', '.join(parts) or 'no labels kept'}; {report.get('rows_audited', 0)} rows audited"
        return f"{lead}{', '.join(parts) or 'no labels kept'}; rests on {rests}. {PRECISION_LIMIT}"

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON: the counts, judge, consensus and verify counts ({} without), the run's facts."""
        nested = ("judge", "consensus", "verify", "run", "canaries", "against_given")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in nested}
        out["canaries"] = self.canaries.summary() if self.canaries else {}
        out["estimated_precision"] = self.estimated_precision()
        if self.against_given is not None:  # beside the run's own estimate: the labels a source gave
            out["against_given"] = self.against_given
        out["target_met"] = self.target_met()
        out["judge"] = self.judge.as_dict() if self.judge else {}
        out["consensus"] = self.consensus.as_dict() if self.consensus else {}
        out["verify"] = self.verify.as_dict() if self.verify else {}
        if self.run is not None:
            out |= {k: v for k, v in asdict(self.run).items() if k not in ("started_at", "cost_sample")}
        return out


def summarize(root: str | Path) -> RunSummary:
    """The run summary: row counts from the checked data, the other counts from the shard markers,
    whether they reconcile, label statistics."""
    manifest = read_manifest(root)
    entries = dataset_shards(root)
    labels, rows = _label_statistics(root)
    totals = {
        "shards": len(entries),
        "rows": rows,
        "rejected": sum(table.num_rows for table in iter_tables(root, "rejected")),
    }
    stats = sum((e.stats for e in entries), start=ShardStats())
    config = manifest.get("config", {})
    samples = config.get("sampling", {}).get("samples_per_problem", 1)
    if config.get("problems", {}).get("kind") == "solutions":
        samples = 1  # given solutions: each loaded one is one row or one rejection (none sampled)
    return RunSummary(
        problems_in=stats.inputs,
        problems_loaded=stats.problems_loaded,
        samples_per_problem=samples,
        solutions_sampled=stats.solutions_sampled,
        rows=totals["rows"],
        rejected=totals["rejected"],
        rejected_by_reason=stats.rejected_by_reason,
        consensus=stats.consensus,
        verify=stats.verify,
        problems_labeled=stats.problems_labeled,
        reconciles=_reconciles(config, stats, totals["rows"], totals["rejected"], samples),
        shards=totals["shards"],
        rollouts=stats.rollouts,
        unknown_rollouts=stats.unknown_rollouts,
        unknown_rate=round(stats.unknown_rollouts / stats.rollouts, 4) if stats.rollouts else 0.0,
        warnings=_warnings(stats) + _budget_warnings(manifest.get("config"), stats) + _left_open_warnings(root, stats),
        requests_refused=stats.requests_refused,
        tokens=stats.tokens,
        rollouts_per_labeled_step=_per(stats.rollouts, labels["labeled_steps"]),
        tokens_per_labeled_step=_per(stats.tokens, labels["labeled_steps"]),
        config_fingerprint=manifest["config_fingerprint"],
        labels=labels,
        rollout_tokens_per_labeled_step=_per(stats.rollout_tokens, labels["labeled_steps"]),
        rollout_tokens_per_located_error=_per(stats.rollout_tokens, labels["rows_with_error"]),
        canaries=CanaryStats.read(stats.canaries),
        against_given=against_given(root),
        audit=stats.audit,
        target_precision=_target(config),
        **judge_cost(stats, totals["rows"]),
    )


def _target(config: Any) -> float | None:
    """consensus.target_precision of a stored config whose consensus is soft (the default 0.97 where unset)."""
    consensus = config.get("consensus") if isinstance(config, dict) else None
    if not isinstance(consensus, dict) or consensus.get("policy", "soft") != "soft" or not config.get("judge"):
        return None
    target = consensus.get("target_precision", 0.97)
    return float(target) if isinstance(target, int | float) else 0.97


def judge_cost(stats: ShardStats, rows: int) -> dict[str, Any]:
    """The summary's judge cost fields from the summed shard stats and the rows kept."""
    judge = stats.judge
    if judge is None:
        return {}
    return {
        "judge": judge,
        "judge_requests": judge.samples - judge.reused,  # votes read from the controls were not asked again
        "judge_tokens": stats.judge_tokens,
        "rows_judged": judge.solutions + judge.refused,
        "rows_not_judged": judge.rows_skipped,
        "judge_tokens_per_kept_row": _per(stats.judge_tokens, rows),
    }


UNKNOWN_WARN_RATE = 0.05  # above this share of ungradable rollouts the summary warns


def _warnings(stats: ShardStats) -> list[str]:
    """What a user should look at before trusting the run."""
    out = []
    if stats.rollouts and stats.unknown_rollouts / stats.rollouts > UNKNOWN_WARN_RATE:
        out.append(
            f"{stats.unknown_rollouts} of {stats.rollouts} rollouts ({stats.unknown_rollouts / stats.rollouts:.1%}) "
            "could not be graded (timeouts, cut-off or answerless completions); they are left out of the "
            "evidence, so fewer steps get a label: check the grader and rollouts.max_tokens"
        )
    if refused := (stats.rejected_by_reason or {}).get("engine_refused"):
        out.append(
            f"{refused} row(s) were refused by the engine (see their detail in rejected/): they are not done, "
            "the next run of the same command asks for them again"
        )
    return out


def _budget_warnings(config: Any, stats: ShardStats) -> list[str]:
    """A token budget no rollout fits: the run labels nothing by rollouts, and only this says why."""
    annotate = config.get("annotate") if isinstance(config, dict) else None
    budget = annotate.get("max_rollout_tokens") if isinstance(annotate, dict) else None
    if budget is None or stats.rollouts or not stats.rows:
        return []
    return [
        f"annotate.max_rollout_tokens ({budget}) is too small for a single rollout: no prefix was rolled out, "
        "so no step was labeled by its rollouts (the rows say token_budget where a search stopped); raise it, "
        "or leave it out for no token budget"
    ]


def _left_open_warnings(root: str | Path, stats: ShardStats) -> list[str]:
    """Rows left open because the judge or verifier could not be read: counted apart from the rejections
    for content, with one of the engine's answers (the first such row's detail says it)."""
    reasons = stats.rejected_by_reason or {}
    out = []
    for reason, who in (("judge_unreadable", "judge"), ("verify_unreadable", "verifier")):
        if not (count := reasons.get(reason)):
            continue
        said = sample_in(
            next((r.get("detail") for r in iter_records(root, "rejected") if r.get("reason") == reason), "")
        )
        out.append(
            f"{count} row(s) are left open because the {who}'s answers could not be read"
            + (f" (e.g. {said})" if said else "")
            + f": they are not done, the next run of the same command asks the {who} again for them alone"
        )
    return out


def _per(total: int, count: int) -> float | None:
    return round(total / count, 2) if count else None


def _reconciles(config: dict[str, Any], stats: ShardStats, rows: int, rejected: int, samples: int) -> bool:
    """The labeling method's rule for how rows relate to inputs (config.rows_reconcile)."""
    try:
        annotate = validate_config(config, check_paths=False).annotate
    except ConfigError:  # a folder whose stored config no longer validates: nothing to judge it by
        return False
    return rows_reconcile(annotate, stats, rows, rejected, samples)
