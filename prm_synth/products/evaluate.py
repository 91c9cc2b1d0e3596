"""Measuring label quality: a judge or our labeler against human labels, a dataset against the truth.

- ProcessBench's metric: accuracy on the erroneous samples (the predicted earliest error equals the
  label), accuracy on the correct samples (the prediction is -1), and their harmonic mean (F1).
  A missing prediction (the judge gave no verdict) is a wrong one.
- `evaluate_judge`: a judge on a ProcessBench-format file (`problem`, `steps`, `label`).
- `evaluate_labels`: our labeler (policy + annotator + labeling rule) on such a file, with gold
  answers joined from a second file by problem text.
- `evaluate_dataset`: a dataset made with the simulated policy against the truth recomputed from
  its step text, before and after consensus.

ProcessBench and BIG-Bench Mistake are evaluation sets: measure on them, never tune to them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prm_synth.annotate.labeler import make_labeler
from prm_synth.config import JudgeConfig, PipelineConfig
from prm_synth.engines.base import Engine
from prm_synth.errors import PrmSynthInputError
from prm_synth.grading.math import grade
from prm_synth.grading.quality import first_error_quality, step_label_quality
from prm_synth.judge.ask import CRITIQUE, judge_solutions
from prm_synth.judge.consensus import record_from_payload
from prm_synth.judge.verify import VERIFIER_PROMPT
from prm_synth.problems.gold_answers import (
    BenchFileError,
    json_rows,
    normalize_question,
)
from prm_synth.prompting.prompts import VERIFY_PROMPT_VERSION
from prm_synth.records import Problem
from prm_synth.records.solutions import Solution
from prm_synth.simulated import arithmetic
from prm_synth.simulated.solvable import check_policy_can_solve
from prm_synth.store.given_labels import processbench_metric  # a run over given labels reports it too
from prm_synth.store.readers import iter_records, read_manifest

# read from here too (the commands, tests): the gold-answer join and ProcessBench's metric live below this room

# ------------------------------------------------------------------ ProcessBench files


@dataclass(frozen=True)
class BenchSample:
    id: str
    problem: str
    steps: list[str]
    label: int  # earliest wrong step, -1 if none


def load_processbench(path: str | Path, limit: int | None = None) -> list[BenchSample]:
    """A ProcessBench-format file: a JSON list, or JSON lines; fields problem, steps, label (id optional).

    A malformed row is an error naming the row: an evaluation set is not silently thinned.
    """
    path = Path(path)
    rows = json_rows(path, lines=path.suffix == ".jsonl")
    samples = []
    for i, row in enumerate(rows[:limit] if limit is not None else rows):
        where = f"{path} row {i}"
        if not isinstance(row, dict):
            raise BenchFileError(f"{where}: not an object")
        steps, label, problem = row.get("steps"), row.get("label"), row.get("problem")
        if not isinstance(problem, str):
            raise BenchFileError(f"{where}: 'problem' must be a string")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, str) for s in steps):
            raise BenchFileError(f"{where}: 'steps' must be a non-empty list of strings")
        if not isinstance(label, int) or isinstance(label, bool) or not -1 <= label < len(steps):
            raise BenchFileError(f"{where}: 'label' must be an int in [-1, {len(steps) - 1}], got {label!r}")
        samples.append(BenchSample(str(row.get("id", f"row-{i}")), problem, steps, label))
    return samples


# ------------------------------------------------------------------ the metric


def format_metric(m: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}"

    return (
        f"error acc {pct(m['error_acc'])} ({m['n_error']} samples)  "
        f"correct acc {pct(m['correct_acc'])} ({m['n_correct']} samples)  F1 {pct(m['f1'])}"
    )


# ------------------------------------------------------------------ judge on a bench file


def evaluate_judge(
    engine: Engine,
    samples: Sequence[BenchSample],
    config: JudgeConfig,
    max_batch_requests: int = 256,
    verifier: bool = False,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(metric + judge stats, one prediction row per sample).

    `verifier`: ask with the verifier prompt and read each chain's first incorrect step as its answer
    (a generative verifier trained on the `verifier` view), instead of ProcessBench's critique prompt."""
    prompt = VERIFIER_PROMPT if verifier else CRITIQUE
    items = [(s.problem, s.steps) for s in samples]
    verdicts, stats = judge_solutions(engine, items, config, max_batch_requests, prompt)
    predictions = [
        {
            "id": s.id,
            "label": s.label,
            "prediction": v.first_error,
            "votes": v.votes,
            "match": v.first_error == s.label,
            "judge_model": engine.model_name,
            "prompt_version": VERIFY_PROMPT_VERSION if verifier else config.prompt_version,
            "answers": v.texts,  # the judge's raw words, to audit the parser against
        }
        for s, v in zip(samples, verdicts, strict=True)
    ]
    metric = processbench_metric([s.label for s in samples], [v.first_error for v in verdicts])
    return metric | {"judge": stats.as_dict(), "judge_model": engine.model_name}, predictions


# ------------------------------------------------------------------ our labeler on a bench file


# ProcessBench steps are paragraphs without their separators: the labeler's continuation prompts
# need the text as the policy would have written it, so a blank line goes back between steps.
STEP_SEPARATOR = "\n\n"


def bench_steps(steps: Sequence[str]) -> list[str]:
    return [s + STEP_SEPARATOR for s in steps[:-1]] + [steps[-1]]


def evaluate_labels(
    engine: Engine,
    samples: Sequence[BenchSample],
    gold: dict[str, str],
    config: PipelineConfig,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Label each sample's given steps with the pipeline's annotator and rule; compare first errors.

    Samples without a gold answer cannot be labeled: they are counted in `skipped_no_gold` and
    listed in the predictions with `skipped: true`, never silently dropped. A policy that cannot
    solve the samples' problems (the simulated one) is refused first (PolicyCannotSolveError).
    """
    check_policy_can_solve(config.policy, ((s.id, s.problem) for s in samples))
    labeler = make_labeler(config)
    solutions: list[Solution] = []
    sample_of: dict[str, str] = {}  # row id -> sample id
    per_problem: dict[str, int] = {}
    skipped = []
    for s in samples:
        answer = gold.get(normalize_question(s.problem))
        if answer is None:
            skipped.append(s)
            continue
        steps = bench_steps(s.steps)
        # Samples of one problem text are one problem's solutions, as in a run: prefixes estimated
        # once, and the shard pooling shares the problem's luck between them.
        problem_id = "q-" + hashlib.blake2b(normalize_question(s.problem).encode(), digest_size=8).hexdigest()
        index = per_problem[problem_id] = per_problem.get(problem_id, -1) + 1
        problem = Problem(id=problem_id, question=s.problem, gold_answer=answer, source="processbench")
        solution = Solution(problem, index, steps, grade("".join(steps), answer), tokens=0)
        solutions.append(solution)
        sample_of[solution.id] = s.id
    # The labeler's own path for given solutions: the same annotators and the same shard pooling
    # as `prm-synth run`, so these figures are those of the labels a run writes.
    result = labeler.label_solutions(engine, solutions)
    first_errors: dict[str, int] = {}
    rollouts: dict[str, int] = {}
    for row in result.records:
        first_errors[sample_of[row.id]] = row.first_error_mc
        rollouts[sample_of[row.id]] = row.rollouts
    refused = {sample_of[r.id]: r.detail or r.reason for r in result.rejected}  # the engine refused its rollouts
    labeled = [s for s in samples if s.id in first_errors]
    predictions: list[dict[str, Any]] = []
    for s in samples:
        if s.id in first_errors:
            pred = first_errors[s.id]
            predictions.append(
                {"id": s.id, "label": s.label, "prediction": pred, "match": pred == s.label, "rollouts": rollouts[s.id]}
            )
        else:
            reason = f"engine refused: {refused[s.id]}" if s.id in refused else "no gold answer for this problem text"
            predictions.append({"id": s.id, "label": s.label, "prediction": None, "skipped": True, "reason": reason})
    metric = processbench_metric([s.label for s in labeled], [first_errors[s.id] for s in labeled])
    total_rollouts = result.stats.rollouts
    return metric | {
        "labeled": len(labeled),
        "skipped_no_gold": len(skipped),
        "refused": len(refused),
        "rollouts": total_rollouts,
        "rollouts_per_sample": total_rollouts / len(labeled) if labeled else None,
        "engine_calls": result.stats.engine_calls,
        "policy_model": engine.model_name,
        "annotator": labeler.method,
        "label_rule": config.labels.rule,
    }, predictions


# ------------------------------------------------------------------ a simulated dataset vs the truth


def _quality(rows: list[dict[str, Any]]) -> dict[str, Any]:
    truths = [arithmetic.true_first_error(r["steps"]) for r in rows]
    judged = [(r["judge_first_error"], t) for r, t in zip(rows, truths, strict=True) if r.get("judge_votes")]
    return {
        "rows": len(rows),
        "first_error_mc": first_error_quality((r["first_error_mc"], t) for r, t in zip(rows, truths, strict=True)),
        "step_labels": step_label_quality((r["labels"], t) for r, t in zip(rows, truths, strict=True)),
        "first_error_judge": first_error_quality(judged) if judged else None,
        "rollouts": sum(r["rollouts"] for r in rows),
    }


class NotSimulatedError(PrmSynthInputError):
    """The dataset's truth cannot be recomputed (it was not made with the simulated policy)."""


def as_labeled(row: dict[str, Any]) -> dict[str, Any]:
    """A kept row as the labeler left it, before consensus completed or changed its labels
    (`labels_before_consensus`; rows written before that column existed are taken as they are)."""
    before = row.get("labels_before_consensus")
    if before is None:
        return row
    first = next((i for i, label in enumerate(before) if label is False), -1)
    return {**row, "labels": before, "first_error_mc": first}


def evaluate_dataset(root: str | Path) -> dict[str, Any]:
    """Bad-label precision/recall of a simulated-policy dataset, before and after consensus.

    Before: every labeled row as the labeler left it, the kept ones (their labels before consensus
    completed them, `as_labeled`) plus those the consensus filter rejected (their payload is the full
    record). After: the kept rows only.
    """
    manifest = read_manifest(root)
    policy = manifest.get("config", {}).get("policy", {})
    if policy.get("kind") != "simulated":
        raise NotSimulatedError(
            f"{root} was made with policy kind {policy.get('kind')!r}: the truth is recomputable only for the "
            "simulated policy on builtin problems"
        )
    kept = list(iter_records(root, "data"))
    dropped = [
        record_from_payload(r["payload"]).to_row() for r in iter_records(root, "rejected") if r["stage"] == "consensus"
    ]
    before, after = _quality([as_labeled(r) for r in kept] + dropped), _quality(kept)
    return {
        "before_consensus": before,
        "after_consensus": after,
        "kept_fraction": len(kept) / (len(kept) + len(dropped)) if kept or dropped else None,
        "consensus_rejected": len(dropped),
        "rollouts_per_kept_row": before["rollouts"] / len(kept) if kept else None,
    }
