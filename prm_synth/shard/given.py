"""Given solutions (`problems.kind: solutions`): sampling is skipped, everything after it is unchanged.

A shard's `GivenSolution` items become the `Solution`s a sampling request would have made: the given text
split by the configured step strategy (losslessly), or the given steps as they are; graded by the
configured grader; grouped by problem in the order the rows came, each keeping its given id. The labeler
then labels them through its path for given solutions (`label_solutions`: the same annotators, scheduler
and shard pooling as sampled ones), and each row carries the labels its source gave (`given_first_error`,
`given_labels`). A text solution whose label does not fit the steps it splits into is rejected ("bad_label").
"""

from __future__ import annotations

from dataclasses import dataclass

from prm_synth.annotate.jobs import ProgressCallback
from prm_synth.annotate.labeler import make_labeler
from prm_synth.annotate.result import LabelResult, Progress, quiet
from prm_synth.config import PipelineConfig
from prm_synth.engines.base import Engine
from prm_synth.grading.registry import grade_completions, make_grader
from prm_synth.problems.given import GivenSolution, SourceItem, check_given_label, problem_of
from prm_synth.prompting.steps import splitter
from prm_synth.prompting.thinking import engine_markers
from prm_synth.records import Problem, reject
from prm_synth.records.solutions import Sampled, Solution

__all__ = ["ShardLabeled", "given_solutions", "label_shard", "problem_of"]


@dataclass
class ShardLabeled:
    """What labeling a shard made: its problems (given solutions': their questions, in row order), the
    labeler's result (given: its `sampled` holds the given solutions, none drawn), and how many problems
    (given: solutions) were loaded."""

    problems: list[Problem]
    labeled: LabelResult
    loaded: int


def given_solutions(items: list[SourceItem], config: PipelineConfig, engine: Engine) -> tuple[list[Problem], Sampled]:
    """The shard's given solutions as `Solution`s grouped by problem (row order), and the rejections of
    those whose labels do not fit their steps; nothing is sampled (`completions`, `tokens`: 0)."""
    markers = engine_markers(config.policy, engine)
    split, grader = splitter(config.steps, markers), make_grader(config.grader)
    by_problem: dict[str, list[GivenSolution]] = {}
    for item in items:
        if isinstance(item, GivenSolution):
            by_problem.setdefault(item.problem.id, []).append(item)
    out = Sampled()
    problems = []
    for rows in by_problem.values():
        problem = rows[0].problem  # a question's rows share its id, and so its problem
        problems.append(problem)
        steps_of = [list(g.steps) if g.steps is not None else split(g.text or "") for g in rows]
        texts = ["".join(steps) for steps in steps_of]  # the given text exactly (lossless split)
        verdicts = grade_completions(grader, [(t, "stop") for t in texts], grader.key(problem), markers)
        for index, (g, steps, verdict) in enumerate(zip(rows, steps_of, verdicts, strict=True)):
            label = list(g.given_ratings) if g.given_ratings is not None else g.given_first_error
            _, _, bad = check_given_label(label, len(steps))
            if bad is not None:
                detail = f"the given label {bad} (the solution splits into {len(steps)} steps)"
                payload = {"steps": steps, "label": label}
                out.rejected.append(reject(g.id, problem.id, problem.source, "split", "bad_label", detail, payload))
                continue
            out.solutions.append(Solution(problem, index, steps, verdict, tokens=0, given_id=g.id))
    return problems, out


def label_shard(
    engine: Engine,
    config: PipelineConfig,
    fingerprint: str,
    items: list[SourceItem],
    problems: list[Problem],
    progress: Progress = quiet,
    on_progress: ProgressCallback | None = None,
) -> ShardLabeled:
    """Label a shard: its problems' solutions sampled and labeled (`Labeler.label`), or, for given solutions
    (problems.kind solutions), those labeled as sampled ones are, each row with the labels it came with."""
    labeler = make_labeler(config, fingerprint)
    if config.problems.kind != "solutions":
        return ShardLabeled(problems, labeler.label(engine, problems, progress, on_progress), len(problems))
    problems, given = given_solutions(items, config, engine)
    labeled = labeler.label_solutions(engine, given.solutions, progress, on_progress)
    labeled.sampled = given
    came_with = {g.id: g for g in items if isinstance(g, GivenSolution)}
    for record in labeled.records:
        g = came_with[record.id]
        record.given_first_error = g.given_first_error
        record.given_labels = list(g.given_ratings) if g.given_ratings is not None else None
    return ShardLabeled(problems, labeled, len(came_with))
