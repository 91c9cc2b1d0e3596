"""Stage 3 of the data flow: label. The one place that decides what each annotate method means.

Two kinds of labelers behind one interface:
- per solution (mc, binary): the pipeline samples solutions first; each solution gets an annotator
  and becomes exactly one row;
- per question (omegaprm): the labeler draws its own rollouts from the bare question and builds a
  tree; each root-to-leaf path becomes a row, and a question without a path is rejected.
Each method also says what it costs (its budget line), how rows relate to inputs (the reconcile
rule of `summary`) and how its labels were made (the dataset card). One class per method, found by
its config class in `LABELERS`: adding a method is one config class, one labeler class and one
entry there. `make_labeler` is the only dispatch on the annotate method in the code base.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Protocol

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.changepoint import FirstPhasePool
from prm_synth.annotate.jobs import JobsAfter, ProgressCallback, Refused, SolutionJob
from prm_synth.annotate.labeler_base import (
    LabelerBase,
    SearchingLabeler,
    new_scheduler,
    refused_row,
    split_evenly,
)
from prm_synth.annotate.mc import per_step_mc
from prm_synth.annotate.omega import OmegaResult, omegaprm
from prm_synth.annotate.omega_tree import tree_to_json
from prm_synth.annotate.protocol import Annotator
from prm_synth.annotate.result import LabelResult, Progress, quiet
from prm_synth.annotate.search import SolutionRun, sampled_share
from prm_synth.annotate.token_ledger import Spend
from prm_synth.config import BinaryConfig, MCConfig, OmegaConfig, PipelineConfig
from prm_synth.engines.base import Engine, GenerationResult, RequestRefused
from prm_synth.grading.math import Verdict
from prm_synth.grading.registry import grade_answer
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.prompting.steps import splitter
from prm_synth.prompting.thinking import engine_markers
from prm_synth.records import (
    Problem,
    RejectReason,
    ShardStats,
    VerdictStatus,
    reject,
)
from prm_synth.records.solutions import Sampled, Solution, solution_id
from prm_synth.sampling.sample import read_solutions, sampling_request

OnProgress = ProgressCallback | None  # the live progress's callback, where a run shows one


class Labeler(Protocol):
    method: str

    def label(
        self, engine: Engine, problems: list[Problem], progress: Progress = quiet, on_progress: OnProgress = None
    ) -> LabelResult:
        """Label a shard's problems (sampling their solutions first where the method needs them)."""
        ...

    def label_solutions(
        self, engine: Engine, solutions: list[Solution], progress: Progress = quiet, on_progress: OnProgress = None
    ) -> LabelResult:
        """Label solutions we are given (evaluation on ProcessBench-format files) exactly as `label`
        labels the ones it samples: the same annotators, the same shard pooling, the same rows."""
        ...

    def annotate_given(self, steps: list[str], final_status: VerdictStatus, key: str) -> Annotator[Annotation]:
        """The annotator of one solution (`label_solutions` runs it for each, then pools)."""
        ...

    def budget_line(self) -> str: ...

    def card_text(self) -> str: ...

    def reconciles(self, stats: ShardStats, rows: int, rejected: int, samples_per_problem: int) -> bool: ...


def make_labeler(config: PipelineConfig, fingerprint: str = "") -> Labeler:
    """The labeler of `config.annotate`: the only place that branches on the annotate method."""
    try:
        labeler = LABELERS[type(config.annotate)]
    except KeyError:
        raise TypeError(f"no labeler for annotate config {type(config.annotate).__name__}") from None
    return labeler(config, fingerprint)


class SolutionLabeler(LabelerBase):
    """A per-solution method: one annotator and one row per sampled solution."""

    def label(
        self, engine: Engine, problems: list[Problem], progress: Progress = quiet, on_progress: OnProgress = None
    ) -> LabelResult:
        """Sample each problem's solutions and label them, sharing one engine stream: a problem's
        annotators start as soon as its own solutions are back (no drain between the two stages)."""
        scheduler = new_scheduler(engine, self.config, self.budget, on_progress)
        markers = engine_markers(self.config.policy, engine)
        futures = scheduler.submit([sampling_request(p, self.config) for p in problems])
        samples = self.config.sampling.samples_per_problem
        by_problem: dict[str, Sampled] = {}
        pool = self._first_phase_pool([p.id for p in problems])

        def jobs_of(problem: Problem, result: GenerationResult) -> list[SolutionJob[Annotation]]:
            sampled = by_problem[problem.id] = read_solutions(problem, result, self.config, markers)
            if pool is not None:
                pool.solutions(problem.id, [s.id for s in sampled.solutions])
            return [self._job(s, pool) for s in sampled.solutions]

        def refused(problem: Problem, error: RequestRefused) -> None:
            if pool is not None:
                pool.solutions(problem.id, [])
            # every solution the request was to sample is rejected, so the counts reconcile as usual
            rows = [
                refused_row(solution_id(problem.id, j), problem, "sample", str(error), None) for j in range(samples)
            ]
            by_problem[problem.id] = Sampled(rejected=rows)

        jobs = (
            JobsAfter(future, partial(jobs_of, problem), partial(refused, problem))
            for problem, future in zip(problems, futures, strict=True)
        )
        try:
            annotations = self._jobs_run(scheduler, jobs, len(problems) * samples, progress, pool)
        finally:  # a failed run has not read every problem yet: their sampling must not run for nobody
            scheduler.stream.give_up(futures)
        sampled = Sampled()
        for problem in problems:  # input order, whatever order the annotators finished in
            sampled += by_problem[problem.id]
        records, rejected = self._rows(engine, scheduler, sampled.solutions, annotations)
        return LabelResult(records, rejected, scheduler.stats, sampled=sampled, spend=scheduler.spend)


class MCLabeler(SolutionLabeler):
    """mc: k rollouts from every step prefix of every sampled solution."""

    method = "mc"

    def __init__(self, config: PipelineConfig, fingerprint: str) -> None:
        super().__init__(config, fingerprint)
        self.annotate: MCConfig = config.annotate  # type: ignore[assignment]

    def annotate_given(self, steps: list[str], final_status: VerdictStatus, key: str) -> Annotator[Annotation]:
        a = self.annotate
        return per_step_mc(steps, final_status, a.k, a.stop_at_first_zero, in_order=self.budget.limited)

    def budget_line(self) -> str:
        stop = ", stopping at the first prefix with MC 0" if self.annotate.stop_at_first_zero else ""
        return f"k = {self.annotate.k} rollouts from every step prefix{stop}"

    def card_text(self) -> str:
        return (
            "Per-step Monte Carlo estimation (Math-Shepherd): every step prefix of a sampled solution is "
            "continued by the policy and the share of continuations reaching the gold answer is its MC value."
        )


class BinaryLabeler(SolutionLabeler, SearchingLabeler):
    """binary: a first-error search per sampled solution (the changepoint search, the default, or a bisection
    with a test)."""

    method = "binary"
    annotate: BinaryConfig

    def annotate_given(self, steps: list[str], final_status: VerdictStatus, key: str) -> Annotator[Annotation]:
        return self._search(steps, final_status, key, None)

    def _annotator(self, s: Solution, pool: FirstPhasePool | None) -> Annotator[Annotation]:
        return self._search(s.steps, s.verdict.status, s.id, pool)

    def _search(
        self, steps: list[str], final_status: VerdictStatus, key: str, pool: FirstPhasePool | None
    ) -> Annotator[Annotation]:
        # a stable share of the correct-answer solutions measures the shard's rate of process errors
        check = self.search.checks(key)
        verify = sampled_share(key, self.annotate.verify_correct)
        # a shard's changepoint searches (those with a pool) are all labeled again once the shard is
        # done (`_pool`): their own labels would be overwritten unread
        run = SolutionRun(verify=verify, check=check, pool=pool, key=key, relabeled=pool is not None)
        return self.search.annotator(steps, final_status, run)

    def _first_phase_pool(self, problem_ids: list[str]) -> FirstPhasePool | None:
        """search_test changepoint: the searches go on under priors pooled from the first phases of the
        solutions of the shard's first half of problems (`FirstPhasePool`)."""
        return self.search.first_phase_pool(problem_ids)

    def _pool(self, solutions: list[Solution], annotations: dict[str, Any]) -> None:
        """search_test changepoint: label every solution again under the priors pooled from the whole
        shard, each with what its problem's other solutions say about the problem's luck. Done once
        all searches are finished, over the set of them, so no row depends on the order they
        finished in (run.max_in_flight, batch sizes) or on other shards."""
        self.search.relabel([annotations[s.id] for s in solutions], [(s.problem.id, s.steps) for s in solutions])

    def budget_line(self) -> str:
        return f"first-error search per solution, {self.search.describe()}"

    def card_text(self) -> str:
        return self.search.card_text()


class OmegaLabeler(SearchingLabeler):
    """omegaprm: one search tree per question (it draws its own rollouts), one row per root-to-leaf path."""

    method = "omegaprm"
    annotate: OmegaConfig

    def annotate_given(self, steps: list[str], final_status: VerdictStatus, key: str) -> Annotator[Annotation]:
        """OmegaPRM's own way to place a given solution's first error: its bisection with its test."""
        return self.search.annotator(steps, final_status)

    def label(
        self, engine: Engine, problems: list[Problem], progress: Progress = quiet, on_progress: OnProgress = None
    ) -> LabelResult:
        scheduler = new_scheduler(engine, self.config, self.budget, on_progress)
        markers = engine_markers(self.config.policy, engine)
        split = splitter(self.config.steps, markers)
        jobs = (
            SolutionJob(
                key=p.id,
                problem_key=p.id,
                user_prompt=policy_user_prompt(p.question),
                gold=self.grader.key(p),
                annotator=omegaprm(self.annotate, split),
            )
            for p in problems
        )
        results: dict[str, OmegaResult | Refused] = self._jobs_run(scheduler, jobs, len(problems), progress)
        out = LabelResult(counters=scheduler.stats, spend=scheduler.spend)
        for p in problems:  # input order
            result = results[p.id]
            if isinstance(result, Refused):
                out.rejected.append(refused_row(f"{p.id}-t", p, "annotate", result.message, None))
                continue
            if self.config.output.save_trees:
                out.trees[p.id] = tree_to_json(result.tree)
            paths = [] if result.screened_out else result.paths()
            if not paths:
                reason: RejectReason = "screened_out" if result.screened_out else "no_paths"
                detail = (
                    "the first rollouts were all right or all wrong (screening)"
                    if result.screened_out
                    else "no rollout of the question gave a state to label"
                )
                out.rejected.append(
                    reject(f"{p.id}-t", p.id, p.source, "annotate", reason, detail, {"stop": result.stop_reason})
                )
                continue
            spend = scheduler.spend.get(p.id, Spend())
            shares = zip(
                paths, split_evenly(spend.rollouts, len(paths)), split_evenly(spend.tokens, len(paths)), strict=True
            )
            for i, (path, r_share, t_share) in enumerate(shares):
                complete = path.final_status is not None
                verdict = (
                    grade_answer(self.grader, path.text, self.grader.key(p), markers)
                    if complete
                    else Verdict(status="unknown", extracted=None, reason="partial_path")
                )
                out.records.append(
                    self._record(
                        engine,
                        p,
                        f"{p.id}-t{i}",
                        path.steps,
                        verdict,
                        path.annotation,
                        r_share,
                        t_share,
                        complete,
                        out_of_tokens=p.id in scheduler.out_of_tokens,
                    )
                )
        return out

    def budget_line(self) -> str:
        a = self.annotate
        return (
            f"OmegaPRM tree search, k = {a.k} rollouts a state, prefixes decided by "
            f"{self.search.describe()}; at most {a.rollout_budget} rollouts and {a.search_limit} selections "
            f"a question"
        )

    def card_text(self) -> str:
        return (
            "OmegaPRM tree search: the policy's rollouts from each question grow a tree of solution prefixes; "
            "each prefix's MC value comes from rollouts, a bisection locates first errors, and every "
            "root-to-leaf path is one row."
        )


# The labeler of each annotate config class: one entry per method.
LABELERS: dict[type, type[LabelerBase]] = {MCConfig: MCLabeler, BinaryConfig: BinaryLabeler, OmegaConfig: OmegaLabeler}
