"""Long chain-of-thought lengths: builtin problems and simulated solutions of 1000 steps and more, through
step splitting, grading, the labeler, the engine stream and the shard writer.

At 1000 steps a constant per-step error rate of 0.1 would make every solution wrong in its first few
steps and every prefix's MC value zero, so these worlds use a rate near 1 / length (0.001: a solution
is right about a third of the time and an error can sit anywhere).
"""

from __future__ import annotations

import random

import pytest
from _simulated_run import pipeline_data, write_run
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from prm_synth.annotate.budget_interval import interval_of
from prm_synth.annotate.labeler import make_labeler
from prm_synth.annotate.result import LabelResult
from prm_synth.config import MAX_OPS, BuiltinSource, SimulatedPolicyConfig, validate_config
from prm_synth.engines.base import GenerationRequest
from prm_synth.grading.math import grade
from prm_synth.pipeline import iter_shards
from prm_synth.problems.sources import iter_problems
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.prompting.steps import split_steps
from prm_synth.records import Problem
from prm_synth.simulated import arithmetic
from prm_synth.simulated.engines import SimulatedPolicy
from prm_synth.store.layout import totals
from prm_synth.store.readers import dataset_shards, iter_records, read_manifest

STEPS = 1000
LONG_WORLD = {"kind": "simulated", "step_error": 0.001, "recover": 0.05, "seed": 0}


def test_the_config_takes_builtin_problems_up_to_max_ops():
    assert MAX_OPS >= STEPS
    assert BuiltinSource(min_ops=STEPS, max_ops=MAX_OPS).max_ops == MAX_OPS
    with pytest.raises(ValidationError, match="max_ops"):
        BuiltinSource(max_ops=MAX_OPS + 1)
    (problem,) = list(iter_problems(BuiltinSource(count=1, min_ops=STEPS, max_ops=STEPS)))
    assert isinstance(problem, Problem)
    chain = arithmetic.parse_question(problem.question)  # the question bound holds a whole long question
    assert chain is not None and len(chain.ops) == STEPS and str(chain.answer) == problem.gold_answer


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), ops=st.integers(1, MAX_OPS), paragraph=st.booleans())
def test_an_error_free_solution_of_any_length_splits_into_its_steps_and_grades_correct(seed, ops, paragraph):
    chain = arithmetic.generate(random.Random(seed), ops, ops)
    assert len(chain.ops) == ops and all(v > 0 for v in chain.values())
    user = policy_user_prompt(chain.question())
    assert arithmetic.parse_question(user) == chain
    fmt = "paragraph" if paragraph else "line"
    policy = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.0, step_format=fmt))
    (result,) = policy.generate([GenerationRequest(user)])
    text = result.completions[0].text
    steps = split_steps(text, fmt)
    assert "".join(steps) == text and len(steps) == ops
    assert arithmetic.true_first_error(steps) == -1
    assert grade(text, str(chain.answer)).status == "correct"
    # a continuation from the middle writes exactly the steps that are left
    middle = "".join(steps[: ops // 2])
    (rest,) = policy.generate([GenerationRequest(user, assistant_prefix=middle)])
    assert middle + rest.completions[0].text == text


def test_a_run_of_1000_step_solutions_writes_rows_whose_counts_reconcile(tmp_path):
    """Stream and shard writer at long lengths, with per-step MC stopping at the first zero (a few probes
    here: a good prefix far from the end reaches the answer only about half the time), so the test stays
    fast; a whole walk of per-step MC would cost O(steps²) rollout text. The default labeler at this
    length has its own test below."""
    problems, samples = 3, 2
    data = pipeline_data(
        problems={"kind": "builtin", "count": problems, "seed": 1, "min_ops": STEPS, "max_ops": STEPS},
        policy=LONG_WORLD,
        sampling={"samples_per_problem": samples},
        annotate={"method": "mc", "k": 4, "stop_at_first_zero": True},
        output={"shard_size": 2},
    )
    write_run(tmp_path, data)
    manifest = read_manifest(tmp_path)
    entries = dataset_shards(tmp_path)
    summed = totals(entries)
    assert summed.problems == problems and summed.shards == 2
    assert summed.rows + summed.rejected == problems * samples
    assert manifest["totals"]["rows"] == summed.rows
    rows = list(iter_records(tmp_path))
    assert len(rows) == summed.rows == problems * samples  # nothing rejected here
    stats = summed.stats
    labeler = make_labeler(validate_config(data))
    assert labeler.reconciles(stats, len(rows), summed.rejected, samples)
    assert stats.rollouts == sum(r["rollouts"] for r in rows)
    for row in rows:
        steps = row["steps"]
        assert len(steps) == STEPS and arithmetic.count_equations("".join(steps)) == STEPS
        assert len(row["labels"]) == len(row["mc_total"]) == len(row["mc_values"]) == STEPS
        truth = arithmetic.true_first_error(steps)
        assert row["final_correct"] == (truth == -1)  # recover_in_sample is off: a wrong chain stays wrong
        found = row["first_error_mc"]
        if found >= 0:  # hard labels: every step before the first zero reached the answer at least once
            assert all(row["labels"][:found]) and row["labels"][found] is False
            assert row["mc_correct"][found] == 0


@pytest.fixture(scope="module")
def default_labeled() -> LabelResult:
    """The default labeler (binary, change-point search) on three 1000-step solutions, one of them wrong."""
    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": 3, "seed": 3, "min_ops": STEPS, "max_ops": STEPS},
            "policy": LONG_WORLD,
            "sampling": {"samples_per_problem": 1},
        }
    )
    problems = [p for p in next(iter_shards(config)).items if isinstance(p, Problem)]
    return make_labeler(config).label(SimulatedPolicy(config.policy), problems)  # type: ignore[arg-type]


def test_the_default_labeler_writes_a_row_for_each_1000_step_solution(default_labeled):
    result = default_labeled
    assert len(result.records) == 3 and not result.rejected
    assert result.stats.rollouts == sum(r.rollouts for r in result.records)
    for record in result.records:
        assert len(record.steps) == len(record.labels) == len(record.mc_total) == STEPS
        assert record.final_correct == (arithmetic.true_first_error(record.steps) == -1)
        # every unlabeled step says why
        reasons = record.unlabeled_reason
        assert reasons is not None and len(reasons) == STEPS
        assert all((label is None) == (why is not None) for label, why in zip(record.labels, reasons, strict=True))
    assert any(arithmetic.true_first_error(r.steps) >= 0 for r in result.records)  # a search was needed


def test_the_default_labeler_finds_the_first_error_of_a_1000_step_solution(default_labeled):
    """At 1000 raw steps the search may spend its budget before it pins the error to one step (here: 128
    rollouts, the error at step 435); the row then says so and reports the open interval the error lies
    in (`budget_interval.py`): the steps from the last good label to where the posterior puts the error
    behind it, unlabeled `undecided_budget`, and `after_error` past them."""
    for record in default_labeled.records:
        truth = arithmetic.true_first_error(record.steps)
        if truth < 0:
            assert record.first_error_mc == -1
            continue
        assert record.rollouts > 0
        if record.first_error_mc >= 0:
            assert abs(record.first_error_mc - truth) <= 2, (record.first_error_mc, truth)
            continue
        reasons = record.unlabeled_reason
        interval = interval_of(reasons)
        assert interval is not None and truth in interval, (interval, truth)
        assert {reasons[i] for i in interval} <= {"undecided_budget", "token_budget"}
        assert len(interval) <= STEPS // 100  # located to a hundredth of the solution
        assert all(why == "after_error" for why in reasons[interval.stop :])
        assert all(record.labels[: interval.start])  # good up to the interval
