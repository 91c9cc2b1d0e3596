"""Stage 2 of the data flow: sample solutions from the policy, split them into steps, grade them.

One request of n samples a problem. In the pipeline these requests go into the labeler's probe
scheduler (`ProbeScheduler.submit`), so a problem's annotators start as soon as its own solutions are
back and the engine never drains between sampling and labeling. A completion with no text to split is
rejected (stage "split") with the text kept.
"""

from __future__ import annotations

from prm_synth.config import PipelineConfig
from prm_synth.engines.base import Engine, GenerationRequest, GenerationResult, SamplingOptions
from prm_synth.grading.registry import grade_completions, make_grader
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.prompting.steps import splitter
from prm_synth.prompting.thinking import ThinkingMarkers, resolve_markers
from prm_synth.records import Problem, reject
from prm_synth.records.solutions import Sampled, Solution, solution_id


def sampling_request(problem: Problem, config: PipelineConfig) -> GenerationRequest:
    """The one request (n = samples per problem) that samples a problem's solutions."""
    sampling = SamplingOptions(
        max_tokens=config.sampling.max_tokens,
        temperature=config.sampling.temperature,
        top_p=config.sampling.top_p,
        top_k=config.sampling.top_k,
    )
    return GenerationRequest(
        user=policy_user_prompt(problem.question), n=config.sampling.samples_per_problem, sampling=sampling
    )


def read_solutions(
    problem: Problem, result: GenerationResult, config: PipelineConfig, markers: ThinkingMarkers | None = None
) -> Sampled:
    """A problem's sampling result, split into steps and graded; an empty completion is rejected.
    `markers`: a thinking policy's, as its engine resolved them (None: from the config alone)."""
    markers = markers or resolve_markers(config.policy)
    split = splitter(config.steps, markers)
    grader = make_grader(config.grader)
    out = Sampled(tokens=result.prompt_tokens + result.generated_tokens, completions=len(result.completions))
    # graded together: a `code` grader runs the programs at once (grading/code.py), others one by one
    verdicts = grade_completions(
        grader, [(c.text, c.finish_reason) for c in result.completions], grader.key(problem), markers
    )
    for j, (completion, verdict) in enumerate(zip(result.completions, verdicts, strict=True)):
        steps = split(completion.text)
        if not steps:
            detail = "the policy produced no text to split into steps"
            out.rejected.append(
                reject(
                    solution_id(problem.id, j),
                    problem.id,
                    problem.source,
                    "split",
                    "empty_solution",
                    detail,
                    {"text": completion.text},
                )
            )
            continue
        share = completion.generated_tokens + result.prompt_tokens // max(1, len(result.completions))
        out.solutions.append(Solution(problem, j, steps, verdict, share, completion.generated_tokens))
    return out


def sample_solutions(engine: Engine, problems: list[Problem], config: PipelineConfig) -> Sampled:
    """Every problem's solutions in as few engine calls as the batch size allows (benchmarks, tools;
    the pipeline samples through the labeler's scheduler so sampling and labeling share the engine)."""
    out = Sampled()
    step = config.run.max_batch_requests
    for start in range(0, len(problems), step):
        batch = problems[start : start + step]
        results = engine.generate([sampling_request(p, config) for p in batch])
        for problem, result in zip(batch, results, strict=True):
            out += read_solutions(problem, result, config)
    return out
