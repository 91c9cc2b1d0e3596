"""One shard of problems in, labeled records and rejected records out: the library's main job.

problems ─▶ sample ─▶ split ─▶ grade ─▶ annotate ─▶ label rule ─▶ (judge ─▶ consensus) ─▶ records

Plain Python: the Prefect flow (flows/synthesize.py) only schedules shards and writes them.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from typing import Any

from prm_synth.annotate import make_annotator
from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.labels import apply_rule
from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
from prm_synth.config import PipelineConfig
from prm_synth.engines.base import Engine, GenerationRequest, SamplingOptions
from prm_synth.grading import Verdict, grade
from prm_synth.problems import Item, Problem, iter_problems
from prm_synth.prompts import policy_user_prompt
from prm_synth.schema import LabeledRecord, RejectedRecord
from prm_synth.steps import split_steps


@dataclass
class ShardInput:
    index: int
    items: list[Item]


@dataclass
class ShardOutput:
    records: list[LabeledRecord] = field(default_factory=list)
    rejected: list[RejectedRecord] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    trees: dict[str, Any] = field(default_factory=dict)  # problem id -> OmegaPRM tree (node-link JSON)


def iter_shards(config: PipelineConfig, limit: int | None = None) -> Iterator[ShardInput]:
    """Cut the problem stream into shards of `output.shard_size` source rows, lazily."""
    items: Iterable[Item] = iter_problems(config.problems)
    if limit is not None:
        items = islice(items, limit)
    it = iter(items)
    index = 0
    while chunk := list(islice(it, config.output.shard_size)):
        yield ShardInput(index, chunk)
        index += 1


def system_prompt(engine_config: Any) -> str | None:
    return getattr(engine_config, "system_prompt", None)


def _rejected(item_id: str, problem: Problem, stage: str, reason: str, detail: str, payload: Any) -> RejectedRecord:
    return RejectedRecord(
        id=item_id,
        problem_id=problem.id,
        source=problem.source,
        stage=stage,
        reason=reason,
        detail=detail,
        payload=json.dumps(payload, ensure_ascii=False)[:4000],
    )


@dataclass
class _Solution:
    problem: Problem
    index: int
    steps: list[str]
    verdict: Verdict
    tokens: int

    @property
    def id(self) -> str:
        return solution_id(self.problem.id, self.index)


def solution_id(problem_id: str, index: int) -> str:
    """The stable id of a problem's index-th sampled solution (the row id, and its rejection's)."""
    return f"{problem_id}-s{index}"


def sample_solutions(
    engine: Engine, problems: list[Problem], config: PipelineConfig
) -> tuple[list[_Solution], list[RejectedRecord], int]:
    """n solutions per problem in as few engine calls as the batch size allows; split and grade them."""
    sampling = SamplingOptions(
        max_tokens=config.sampling.max_tokens,
        temperature=config.sampling.temperature,
        top_p=config.sampling.top_p,
    )
    system = system_prompt(config.policy)
    solutions: list[_Solution] = []
    rejected: list[RejectedRecord] = []
    tokens = 0
    step = config.annotate.max_batch_requests
    for start in range(0, len(problems), step):
        batch = problems[start : start + step]
        requests = [
            GenerationRequest(
                user=policy_user_prompt(p.question),
                system=system,
                n=config.sampling.samples_per_problem,
                sampling=sampling,
            )
            for p in batch
        ]
        for problem, result in zip(batch, engine.generate(requests), strict=True):
            tokens += result.prompt_tokens + result.generated_tokens
            for j, completion in enumerate(result.completions):
                steps = split_steps(completion.text, config.steps.strategy, config.steps.pattern)
                if not steps:
                    rejected.append(
                        _rejected(
                            solution_id(problem.id, j),
                            problem,
                            "split",
                            "empty_solution",
                            "the policy produced no text to split into steps",
                            {"text": completion.text},
                        )
                    )
                    continue
                verdict = grade(completion.text, problem.gold_answer)
                share = completion.generated_tokens + result.prompt_tokens // max(1, len(result.completions))
                solutions.append(_Solution(problem, j, steps, verdict, share))
    return solutions, rejected, tokens


def _scheduler(engine: Engine, config: PipelineConfig) -> ProbeScheduler:
    ann_cfg = config.annotate
    return ProbeScheduler(
        engine,
        SamplingOptions(
            max_tokens=ann_cfg.rollout_max_tokens, temperature=ann_cfg.rollout_temperature, top_p=config.sampling.top_p
        ),
        max_batch_requests=ann_cfg.max_batch_requests,
        max_in_flight=ann_cfg.max_in_flight,
    )


Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def label_solutions(
    engine: Engine,
    config: PipelineConfig,
    problems: list[Problem],
    fingerprint: str,
    out: ShardOutput,
    progress: Progress = _quiet,
) -> ProbeScheduler:
    """Sample solutions, then annotate each one (per-step MC or binary search); records in input order."""
    solutions, split_rejects, sampling_tokens = sample_solutions(engine, problems, config)
    progress(f"sampled {len(solutions)} solutions of {len(problems)} problems; annotating")
    out.rejected += split_rejects
    out.stats["sampling_tokens"] = sampling_tokens
    scheduler = _scheduler(engine, config)
    by_key = {s.id: s for s in solutions}
    system = system_prompt(config.policy)
    jobs = (
        SolutionJob(
            key=s.id,
            problem_key=s.problem.id,
            user_prompt=policy_user_prompt(s.problem.question),
            gold=s.problem.gold_answer,
            annotator=make_annotator(config.annotate, s.steps, s.verdict.status, s.id),
            system_prompt=system,
        )
        for s in solutions
    )
    annotated: dict[str, LabeledRecord] = {}
    for job, ann in scheduler.run(jobs):
        s = by_key[job.key]
        rollouts, tokens = scheduler.spend.get(job.key, [0, 0])
        annotated[job.key] = _record(
            config, engine, fingerprint, s.problem, s.id, s.steps, s.verdict, ann, rollouts, tokens + s.tokens
        )
        _report(progress, len(annotated), len(solutions), scheduler)
    out.records = [annotated[s.id] for s in solutions]  # input order, whatever order annotators finished in
    return scheduler


def _report(progress: Progress, done: int, total: int, scheduler: ProbeScheduler) -> None:
    """A line every tenth of the way (and at the end), so a slow engine shows it is working."""
    if done == total or done % max(1, total // 10) == 0:
        progress(f"annotated {done}/{total} ({scheduler.stats.rollouts} rollouts so far)")


def label_trees(
    engine: Engine,
    config: PipelineConfig,
    problems: list[Problem],
    fingerprint: str,
    out: ShardOutput,
    progress: Progress = _quiet,
) -> ProbeScheduler:
    """OmegaPRM: one search tree per question (it draws its own rollouts), one row per root-to-leaf path."""
    from prm_synth.annotate.omega import omegaprm, split_evenly, tree_to_json

    scheduler = _scheduler(engine, config)
    split = partial(split_steps, strategy=config.steps.strategy, pattern=config.steps.pattern)
    system = system_prompt(config.policy)
    jobs = (
        SolutionJob(
            key=p.id,
            problem_key=p.id,
            user_prompt=policy_user_prompt(p.question),
            gold=p.gold_answer,
            annotator=omegaprm(config.annotate, split),
            system_prompt=system,
        )
        for p in problems
    )
    results = {}
    for job, result in scheduler.run(jobs):
        results[job.key] = result
        _report(progress, len(results), len(problems), scheduler)
    for p in problems:  # input order
        result = results[p.id]
        if config.annotate.save_trees:
            out.trees[p.id] = tree_to_json(result.tree)
        paths = [] if result.screened_out else result.paths()
        if not paths:
            reason = "screened_out" if result.screened_out else "no_paths"
            detail = (
                "the first rollouts were all right or all wrong (screening)"
                if result.screened_out
                else "no rollout of the question gave a state to label"
            )
            out.rejected.append(_rejected(f"{p.id}-t", p, "annotate", reason, detail, {"stop": result.stop_reason}))
            continue
        rollouts, tokens = scheduler.spend.get(p.id, [0, 0])
        for i, (path, r_share, t_share) in enumerate(
            zip(paths, split_evenly(rollouts, len(paths)), split_evenly(tokens, len(paths)), strict=True)
        ):
            verdict = (
                grade(path.text, p.gold_answer)
                if path.final_status is not None
                else Verdict(status="unknown", extracted=None, reason="partial_path")
            )
            out.records.append(
                _record(
                    config,
                    engine,
                    fingerprint,
                    p,
                    f"{p.id}-t{i}",
                    path.steps,
                    verdict,
                    path.annotation,
                    r_share,
                    t_share,
                    complete=path.final_status is not None,
                )
            )
    return scheduler


def _record(
    config: PipelineConfig,
    engine: Engine,
    fingerprint: str,
    problem: Problem,
    row_id: str,
    steps: list[str],
    verdict: Verdict,
    ann: Annotation,
    rollouts: int,
    tokens: int,
    complete: bool = True,
) -> LabeledRecord:
    lab = apply_rule(ann, config.labels.rule, config.labels.significance)
    return LabeledRecord(
        id=row_id,
        problem_id=problem.id,
        source=problem.source,
        question=problem.question,
        gold_answer=problem.gold_answer,
        steps=steps,
        final_answer=verdict.extracted if complete else None,
        final_correct=None if verdict.status == "unknown" or not complete else verdict.status == "correct",
        mc_values=lab.mc_values,
        mc_correct=ann.mc_correct,
        mc_total=ann.mc_total,
        labels=lab.labels,
        label_source=ann.label_source,
        label_rule=config.labels.rule,
        first_error_mc=lab.first_error,
        annotator=ann.method,
        policy_model=engine.model_name,
        config_fingerprint=fingerprint,
        rollouts=rollouts,
        tokens=tokens,
    )


def process_shard(
    engine: Engine,
    config: PipelineConfig,
    shard: ShardInput,
    fingerprint: str,
    judge_engine: Engine | None = None,
    progress: Progress = _quiet,
) -> ShardOutput:
    started = time.perf_counter()
    out = ShardOutput()
    problems = [it for it in shard.items if isinstance(it, Problem)]
    out.rejected += [it for it in shard.items if isinstance(it, RejectedRecord)]

    label = label_trees if config.annotate.method == "omegaprm" else label_solutions
    scheduler = label(engine, config, problems, fingerprint, out, progress)
    t_annotated = time.perf_counter()

    judge_stats: dict[str, Any] = {}
    if config.judge is not None and judge_engine is not None:
        from prm_synth.judge import judge_records

        judge_stats = judge_records(judge_engine, out.records, config.judge, config.annotate.max_batch_requests)
    if config.consensus is not None:
        from prm_synth.consensus import apply_consensus

        out.records, consensus_rejected, consensus_stats = apply_consensus(out.records, config.consensus)
        out.rejected += consensus_rejected
        judge_stats["consensus"] = consensus_stats
    for r in out.rejected:
        r.config_fingerprint = fingerprint
    labeled = _check_nothing_lost(problems, out)

    sched = scheduler.stats
    sampling_tokens = out.stats.pop("sampling_tokens", 0)
    records = out.records
    out.stats = {
        "inputs": len(shard.items),
        "problems_loaded": len(problems),
        "problems_labeled": labeled,
        "rows": len(records),
        "rejected": len(out.rejected),
        "rejected_by_reason": dict(Counter(r.reason for r in out.rejected)),
        "final_correct": sum(1 for r in records if r.final_correct),
        "final_unknown": sum(1 for r in records if r.final_correct is None),
        "rollouts": sched.rollouts,
        "engine_calls": sched.engine_calls,
        "probes_asked": sched.probes_asked,
        "probes_reused": sched.probes_reused,
        "sampling_tokens": sampling_tokens,
        "rollout_tokens": sched.generated_tokens + sched.prompt_tokens,
        "judge_tokens": judge_stats.get("tokens", 0),
        "tokens": sampling_tokens + sched.generated_tokens + sched.prompt_tokens + judge_stats.get("tokens", 0),
        "seconds": {"annotate": t_annotated - started, "judge": time.perf_counter() - t_annotated},
        **({"judge": judge_stats} if judge_stats else {}),
    }
    return out


def _check_nothing_lost(problems: list[Problem], out: ShardOutput) -> int:
    """Every loaded problem has labeled rows or a rejected row with a reason; returns how many have rows."""
    with_rows = {r.problem_id for r in out.records}
    with_reason = {r.problem_id for r in out.rejected}
    lost = [p.id for p in problems if p.id not in with_rows and p.id not in with_reason]
    if lost:  # a bug, never a data problem: refuse to write a shard that silently dropped problems
        raise RuntimeError(f"{len(lost)} problem(s) ended with neither rows nor a rejection: {lost[:5]}")
    return sum(1 for p in problems if p.id in with_rows)
