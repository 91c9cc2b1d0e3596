"""One shard of problems in, labeled records and rejected records out: the library's main job.

problems ─▶ sample ─▶ split ─▶ grade ─▶ annotate ─▶ label rule ─▶ (judge ─▶ consensus) ─▶ records

Plain Python: the Prefect flow (flows/synthesize.py) only schedules shards and writes them.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from prm_synth.annotate import make_annotator
from prm_synth.annotate.labels import apply_rule
from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
from prm_synth.config import PipelineConfig
from prm_synth.engines.base import Engine, GenerationRequest, SamplingOptions
from prm_synth.grading import Verdict, grade
from prm_synth.problems import Problem, iter_problems
from prm_synth.prompts import policy_user_prompt
from prm_synth.schema import LabeledRecord, RejectedRecord
from prm_synth.steps import split_steps

Item = Problem | RejectedRecord


@dataclass
class ShardInput:
    index: int
    items: list[Item]


@dataclass
class ShardOutput:
    records: list[LabeledRecord] = field(default_factory=list)
    rejected: list[RejectedRecord] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


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
    text: str
    steps: list[str]
    verdict: Verdict
    tokens: int

    @property
    def id(self) -> str:
        return f"{self.problem.id}-s{self.index}"


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
                sid = f"{problem.id}-s{j}"
                if not steps:
                    rejected.append(
                        _rejected(
                            sid,
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
                solutions.append(_Solution(problem, j, completion.text, steps, verdict, share))
    return solutions, rejected, tokens


def process_shard(
    engine: Engine, config: PipelineConfig, shard: ShardInput, fingerprint: str, judge_engine: Engine | None = None
) -> ShardOutput:
    started = time.perf_counter()
    out = ShardOutput()
    problems = [it for it in shard.items if isinstance(it, Problem)]
    for it in shard.items:
        if isinstance(it, RejectedRecord):
            out.rejected.append(it)

    solutions, split_rejects, sampling_tokens = sample_solutions(engine, problems, config)
    out.rejected += split_rejects
    t_sampled = time.perf_counter()

    ann_cfg = config.annotate
    scheduler = ProbeScheduler(
        engine,
        SamplingOptions(
            max_tokens=ann_cfg.rollout_max_tokens, temperature=ann_cfg.rollout_temperature, top_p=config.sampling.top_p
        ),
        max_batch_requests=ann_cfg.max_batch_requests,
        max_in_flight=ann_cfg.max_in_flight,
    )
    by_key = {s.id: s for s in solutions}
    jobs = (
        SolutionJob(
            key=s.id,
            problem_key=s.problem.id,
            user_prompt=policy_user_prompt(s.problem.question),
            gold=s.problem.gold_answer,
            annotator=make_annotator(ann_cfg, s.steps, s.verdict.status, s.id),
            system_prompt=system_prompt(config.policy),
        )
        for s in solutions
    )
    annotated: dict[str, LabeledRecord] = {}
    for job, ann in scheduler.run(jobs):
        s = by_key[job.key]
        lab = apply_rule(ann, config.labels.rule, config.labels.significance)
        rollouts, tokens = scheduler.spend.get(job.key, [0, 0])
        annotated[job.key] = LabeledRecord(
            id=s.id,
            problem_id=s.problem.id,
            source=s.problem.source,
            question=s.problem.question,
            gold_answer=s.problem.gold_answer,
            steps=s.steps,
            final_answer=s.verdict.extracted,
            final_correct=None if s.verdict.status == "unknown" else s.verdict.status == "correct",
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
            tokens=tokens + s.tokens,
        )
    # Records in input order, whatever order the annotators finished in.
    records = [annotated[s.id] for s in solutions]
    t_annotated = time.perf_counter()

    judge_stats: dict[str, Any] = {}
    if config.judge is not None and judge_engine is not None:
        from prm_synth.judge import judge_records

        judge_stats = judge_records(judge_engine, records, config.judge, ann_cfg.max_batch_requests)
    if config.consensus is not None:
        from prm_synth.consensus import apply_consensus

        records, consensus_rejected, consensus_stats = apply_consensus(records, config.consensus)
        out.rejected += consensus_rejected
        judge_stats["consensus"] = consensus_stats
    out.records = records
    for r in out.rejected:
        r.config_fingerprint = fingerprint

    sched = scheduler.stats
    out.stats = {
        "inputs": len(shard.items),
        "problems_loaded": len(problems),
        "solutions": len(problems) * config.sampling.samples_per_problem,
        "rows": len(out.records),
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
        "tokens": sampling_tokens + sched.generated_tokens + sched.prompt_tokens,
        "seconds": {
            "sample": t_sampled - started,
            "annotate": t_annotated - t_sampled,
            "judge": time.perf_counter() - t_annotated,
        },
        **({"judge": judge_stats} if judge_stats else {}),
    }
    return out
