"""What every labeler shares (annotate/labeler.py holds one labeler class per method): the probe
scheduler it labels through, a row made from an annotation (`LabelerBase._record`), rows in input order
from a run of jobs, and the rejection of what a refused request was for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.budget_interval import token_budget_reasons, truncated_trace_reasons
from prm_synth.annotate.changepoint import FirstPhasePool
from prm_synth.annotate.jobs import ProgressCallback, Refused, SolutionJob
from prm_synth.annotate.protocol import Annotator
from prm_synth.annotate.result import LabelResult, Progress, quiet
from prm_synth.annotate.scheduler import ProbeScheduler
from prm_synth.annotate.search import make_search
from prm_synth.annotate.token_cost import TokenBudget
from prm_synth.annotate.token_ledger import Spend
from prm_synth.config import BinaryConfig, OmegaConfig, PipelineConfig, rows_reconcile
from prm_synth.engines.base import Engine, SamplingOptions
from prm_synth.grading.majority import gold_origin
from prm_synth.grading.math import Verdict
from prm_synth.grading.registry import grade_answer, grade_answers, make_grader
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.prompting.thinking import engine_markers
from prm_synth.records import (
    LabeledRecord,
    Problem,
    RejectedRecord,
    ShardStats,
    Stage,
    VerdictStatus,
    reject,
)
from prm_synth.records.labels import apply_rule, unlabeled_reasons
from prm_synth.records.solutions import Solution


def new_scheduler(
    engine: Engine, config: PipelineConfig, budget: TokenBudget, on_progress: ProgressCallback | None = None
) -> ProbeScheduler:
    r = config.rollouts
    markers = engine_markers(config.policy, engine)
    grader = make_grader(config.grader)
    return ProbeScheduler(
        engine,
        SamplingOptions(max_tokens=r.max_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k),
        max_batch_requests=config.run.max_batch_requests,
        max_in_flight=config.run.max_in_flight,
        grader=None
        if markers is None and grader.kind == "math"
        else (lambda text, gold: grade_answer(grader, text, gold, markers).status),
        on_progress=on_progress,
        budget=budget,
        grade_batch=(lambda texts, gold: [v.status for v in grade_answers(grader, texts, gold, markers)])
        if grader.kind == "code"
        else None,
    )


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` cut into `parts` integer shares that add up exactly (earlier shares take the remainder)."""
    if parts <= 0:
        return []
    share, extra = divmod(total, parts)
    return [share + (i < extra) for i in range(parts)]


def refused_row(row_id: str, problem: Problem, stage: Stage, message: str, payload: Any) -> RejectedRecord:
    """The rejection of what a refused engine request was for, with the engine's (the server's) words."""
    return reject(row_id, problem.id, problem.source, stage, "engine_refused", message, payload)


def report_progress(progress: Progress, done: int, total: int, scheduler: ProbeScheduler) -> None:
    """A line every tenth of the way (and at the end), so a slow engine shows it is working."""
    if done == total or done % max(1, total // 10) == 0:
        progress(f"annotated {done}/{total} ({scheduler.stats.rollouts} rollouts so far)")


class LabelerBase:
    method: str

    def __init__(self, config: PipelineConfig, fingerprint: str) -> None:
        self.config = config
        self.fingerprint = fingerprint
        # `annotate.max_rollout_tokens`, read once: the scheduler enforces it, the search ranks probes by it
        self.budget = TokenBudget.of(config.annotate)
        self.grader = make_grader(config.grader)

    def reconciles(self, stats: ShardStats, rows: int, rejected: int, samples_per_problem: int) -> bool:
        return rows_reconcile(self.config.annotate, stats, rows, rejected, samples_per_problem)

    def _record(
        self,
        engine: Engine,
        problem: Problem,
        row_id: str,
        steps: list[str],
        verdict: Verdict,
        ann: Annotation,
        rollouts: int,
        tokens: int,
        complete: bool = True,
        out_of_tokens: bool = False,
    ) -> LabeledRecord:
        rule = self.config.labels
        lab = apply_rule(ann, rule.rule, rule.significance)
        reasons = unlabeled_reasons(lab.labels, lab.first_error, ann.unlabeled_reason)
        if out_of_tokens:  # the token budget ran out: the steps it left undecided say so
            reasons = token_budget_reasons(reasons, ann.mc_total, ann.mc_unknown)
        reasons = truncated_trace_reasons(reasons, verdict.reason)
        final_correct = None if verdict.status == "unknown" or not complete else verdict.status == "correct"
        return LabeledRecord(
            id=row_id,
            problem_id=problem.id,
            source=problem.source,
            question=problem.question,
            gold_answer=problem.gold_answer,
            steps=steps,
            final_answer=verdict.extracted if complete else None,
            final_correct=final_correct,
            final_unknown_reason=(verdict.reason or "unknown") if final_correct is None else None,
            mc_values=lab.mc_values,
            mc_correct=ann.mc_correct,
            mc_total=ann.mc_total,
            mc_unknown=ann.mc_unknown,
            labels=lab.labels,
            label_source=ann.label_source,
            label_rule=rule.rule,
            first_error_mc=lab.first_error,
            annotator=self.method,  # the labeler stamps its method; the algorithms' own names do not reach rows
            policy_model=engine.model_name,
            config_fingerprint=self.fingerprint,
            rollouts=rollouts,
            tokens=tokens,
            p_good=ann.p_good,
            unlabeled_reason=reasons,
            gold_origin=gold_origin(problem),
        )

    def annotate_given(self, steps: list[str], final_status: VerdictStatus, key: str) -> Annotator[Annotation]:
        raise NotImplementedError

    def label_solutions(
        self,
        engine: Engine,
        solutions: list[Solution],
        progress: Progress = quiet,
        on_progress: ProgressCallback | None = None,
    ) -> LabelResult:
        scheduler = new_scheduler(engine, self.config, self.budget, on_progress)
        pool = self._first_phase_pool([s.problem.id for s in solutions])
        if pool is not None:
            for problem in dict.fromkeys(s.problem.id for s in solutions):
                pool.solutions(problem, [s.id for s in solutions if s.problem.id == problem])
        jobs = (self._job(s, pool) for s in solutions)
        annotations = self._jobs_run(scheduler, jobs, len(solutions), progress, pool)
        records, rejected = self._rows(engine, scheduler, solutions, annotations)
        return LabelResult(records, rejected, scheduler.stats, spend=scheduler.spend)

    def _rows(
        self, engine: Engine, scheduler: ProbeScheduler, solutions: list[Solution], annotations: dict[str, Any]
    ) -> tuple[list[LabeledRecord], list[RejectedRecord]]:
        """Pool what the method learns from the whole set, then one row (or rejection) per solution,
        in the order given: the one way every solution-labeling path ends."""
        self._pool([s for s in solutions if isinstance(annotations[s.id], Annotation)], annotations)
        records, rejected = [], []
        for s in solutions:
            ann = annotations[s.id]
            if isinstance(ann, Refused):
                rejected.append(refused_row(s.id, s.problem, "annotate", ann.message, {"steps": s.steps}))
                continue
            spend = scheduler.spend.get(s.id, Spend())
            out_of_tokens = s.id in scheduler.out_of_tokens
            records.append(
                self._record(
                    engine,
                    s.problem,
                    s.id,
                    s.steps,
                    s.verdict,
                    ann,
                    spend.rollouts,
                    spend.tokens + s.tokens,
                    out_of_tokens=out_of_tokens,
                )
            )
        return records, rejected

    def _pool(self, solutions: list[Solution], annotations: dict[str, Any]) -> None:
        """After every search of the shard is done, in input order: what a method learns from all of them."""

    def _first_phase_pool(self, problem_ids: list[str]) -> FirstPhasePool | None:
        """The shard's `FirstPhasePool` (problems in input order), where the method's searches have one."""
        return None

    def _job(self, s: Solution, pool: FirstPhasePool | None = None) -> SolutionJob[Annotation]:
        return SolutionJob(
            key=s.id,
            problem_key=s.problem.id,
            user_prompt=policy_user_prompt(s.problem.question),
            gold=self.grader.key(s.problem),
            annotator=self._annotator(s, pool),
            length=(sum(map(len, s.steps)), s.generated_tokens) if s.generated_tokens else None,
        )

    def _annotator(self, s: Solution, pool: FirstPhasePool | None) -> Annotator[Annotation]:
        return self.annotate_given(s.steps, s.verdict.status, s.id)

    def _jobs_run(
        self,
        scheduler: ProbeScheduler,
        jobs: Iterable[SolutionJob[Any]],
        total: int,
        progress: Progress,
        pool: FirstPhasePool | None = None,
    ) -> dict[str, Any]:
        results: dict[str, Any] = {}
        for job, value in scheduler.run(jobs, total=total):  # total: for the live progress too
            results[job.key] = value
            if pool is not None and isinstance(value, Refused):
                pool.deposit(job.key, None)  # no first phase will come: the pool must not wait for it
            report_progress(progress, len(results), total, scheduler)
        return results


class SearchingLabeler(LabelerBase):
    """A labeler whose rows come from a first-error search (binary, omegaprm), built once from its config
    with the labeler's token budget."""

    annotate: BinaryConfig | OmegaConfig

    def __init__(self, config: PipelineConfig, fingerprint: str) -> None:
        super().__init__(config, fingerprint)
        self.annotate = config.annotate  # type: ignore[assignment]
        self.search = make_search(self.annotate, self.budget)
