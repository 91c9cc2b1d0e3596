"""Canaries the policy continues (issue 57 part 1): the planted prefix (a natural step, the step cut
after its changed result, no restatement of the problem changed), the policy writing the rest, both
answer classes, clean controls judged for false alarms, the late-placement rate measured and read by
the posterior; and the world where the policy repairs slips in wrong-answer rows as much as right ones."""

from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.judge.posterior import late_mixture, late_prior
from prm_synth.shard.canaries import NUMBER, plant_in_prefix, plantable, result_span
from prm_synth.simulated import arithmetic

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_a_continued_plant_cuts_the_step_after_its_changed_result_so_no_step_contradicts_itself():
    steps = ["12 + 5 = 17\n", "17 × 3 = 51\n", "51 - 4 = 47. The answer is \\boxed{47}."]
    planted = plant_in_prefix(steps, 2, random.Random(0))
    assert planted is not None and len(planted.steps) == 3 and planted.steps[:2] == steps[:2]
    assert planted.steps[2] == f"51 - 4 = {planted.after}. " and planted.before == "47"
    assert "47" not in planted.steps[2]  # the old result is not stated beside the new one
    middle = plant_in_prefix(steps, 0, random.Random(1))
    assert middle is not None and middle.steps == [f"12 + 5 = {middle.after}\n"]


@given(st.lists(st.sampled_from(["3 + 4 = 7\n", "7 × 2 = 14\n", "Ava has 3 shells.\n", "so 21\n"]), min_size=1))
@settings(max_examples=100, deadline=None)
def test_no_plant_changes_a_number_the_question_gives(steps):
    question = "Ava has 3 shells. She finds 4 more. How many does she have?"
    for i in plantable(steps, question, len(steps)):
        span = result_span(steps[i])
        assert span is not None and span[0] not in NUMBER.findall(question)
    assert 2 not in plantable(["3 + 4 = 7\n", "7 × 2 = 14\n", "Ava has 3 shells.\n"], question, 3)


@given(
    st.lists(st.floats(0.0, 1.0), min_size=2, max_size=30).filter(lambda p: sum(p) > 0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 0.9),
)
@settings(max_examples=200, deadline=None)
def test_late_placement_moves_mass_only_to_earlier_steps_and_keeps_a_distribution(weights, late, hazard):
    prior = [w / sum(weights) for w in weights]
    for out in (late_prior(prior, late, hazard), late_mixture(prior, late)):
        assert abs(sum(out) - 1.0) < 1e-9 and min(out) >= -1e-12
        assert out[-1] == prior[-1]  # "no error" is the hidden share's, never moved
        for j in range(len(prior) - 1):  # what lies at or before j only grows
            assert sum(out[: j + 1]) >= sum(prior[: j + 1]) - 1e-9
    assert late_prior(prior, 0.0, hazard) == prior == late_prior(prior, late, 0.0)


def test_a_change_point_is_doubted_by_the_odds_of_a_repaired_slip_before_it():
    """Rollouts sure the first error is step 4 (of 6): each earlier step holds a repaired slip with odds
    hazard * late / (1 - hazard) against none, so a later change-point and a higher late rate doubt it more."""
    sure = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    out = late_prior(sure, 0.5, 0.1)
    odds = 0.1 * 0.5 / 0.9
    assert abs(out[4] - 1.0 / (1.0 + 4 * odds)) < 1e-12 and all(abs(out[i] - odds * out[4]) < 1e-12 for i in range(4))
    assert (
        late_prior(sure, 0.8, 0.1)[4] < out[4] and late_prior([0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.5, 0.1)[1] > out[4]
    )
    assert late_mixture(sure, 0.3)[4] == 0.7


def test_the_late_rate_is_what_the_canaries_planted_steps_make_likeliest():
    from prm_synth.records import LabeledRecord
    from prm_synth.shard.canaries import measure

    def canary(p_good: list[float], final_correct: bool = False) -> LabeledRecord:
        n = len(p_good)
        first = next(i for i, p in enumerate(p_good) if p < 0.5)
        labels = [i < first for i in range(n)]
        return LabeledRecord(
            id="s", problem_id="p", source="t", question="q", gold_answer="1", steps=[f"step {i}" for i in range(n)],
            final_answer="2", final_correct=final_correct, mc_values=[None] * n, mc_correct=[0] * n,
            mc_total=[0] * n, labels=labels, label_source=["mc"] * n, label_rule="r", first_error_mc=first,
            annotator="a", policy_model="m", config_fingerprint="f", rollouts=0, tokens=0, p_good=p_good,
        )  # fmt: skip

    at = canary([0.99, 0.99, 0.01, 0.0, 0.0])  # placed at the planted step 2
    late = canary([0.99, 0.99, 0.99, 0.99, 0.01])  # placed at 4: the policy repaired the slip at 2
    assert measure([(at, 2)] * 10).late_rate("wrong") < 0.1  # a posterior mean: ten canaries leave some doubt
    assert measure([(at, 2)] * 40).late_rate("wrong") < measure([(at, 2)] * 10).late_rate("wrong")
    assert 0.3 < measure([(at, 2)] * 5 + [(late, 2)] * 5).late_rate("wrong") < 0.7
    assert measure([(late, 2)] * 10).late_rate("wrong") > 0.8
    assert measure([(late, 2)] * 10, continued=False).late_rate("wrong") == 0.0  # in-place canaries: no evidence
    assert measure([(late, 2)] * 10).late_rate("right") == 0.0  # per class


def test_the_repair_world_puts_repaired_slips_in_wrong_answer_rows_and_leaves_the_default_world_alone():
    from prm_synth.config import SimulatedPolicyConfig
    from prm_synth.engines.base import GenerationRequest, SamplingOptions
    from prm_synth.prompting.prompts import policy_user_prompt
    from prm_synth.simulated.engines import SimulatedPolicy

    def solutions(**world: object) -> list[tuple[bool, int, list[str], arithmetic.ChainProblem]]:
        policy = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.15, recover=0.05, seed=2, **world))
        rng, out = random.Random(0), []
        for _ in range(300):
            problem = arithmetic.generate(rng, 8, 12)
            req = GenerationRequest(
                user=policy_user_prompt(problem.question()), n=1, sampling=SamplingOptions(max_tokens=512)
            )
            text = policy.generate([req])[0].completions[0].text
            steps = text.split("\n")
            out.append(
                (
                    arithmetic.last_value(text) == problem.values()[-1],
                    arithmetic.true_first_error(steps),
                    steps,
                    problem,
                )
            )
        return out

    def repaired_in_wrong(rows: list[tuple[bool, int, list[str], arithmetic.ChainProblem]]) -> int:
        # a wrong answer whose first error is an early slip the next step repaired (it goes on from the truth)
        return sum(
            1
            for right, first, steps, problem in rows
            if not right and 0 <= first < len(steps) - 1 and steps[first + 1].startswith(f"{problem.values()[first]} ")
        )

    assert repaired_in_wrong(solutions(repair=0.6, repair_goes_on=True)) >= 5
    assert repaired_in_wrong(solutions(repair=0.6)) == 0  # before: a repaired slip was the solution's last error
    assert solutions() == solutions(repair_goes_on=True)  # read only with repair: the default world is unchanged


def test_a_run_plants_canaries_the_policy_continued_in_both_classes_and_measures_controls(tmp_path):
    from _simulated_run import pipeline_data, write_run
    from typer.testing import CliRunner

    from prm_synth.cli import app
    from prm_synth.simulated.engines import JUDGE_PROFILES

    data = pipeline_data(
        judge={"engine": JUDGE_PROFILES["realistic"].model_dump(mode="json"), "samples": 3},
        consensus={},
        output={"shard_size": 40},
    )
    root = write_run(tmp_path / "run", data, limit=40)
    rows = [c for p in sorted((root / "canaries").glob("shard-*.json")) for c in json.loads(p.read_text())]
    assert rows and {r["final_correct"] for r in rows} == {True, False}  # both answer classes
    for r in rows:  # the planted step is the canary's true first error, and the policy wrote the rest
        assert arithmetic.true_first_error(r["steps"]) == r["planted_step"]
        k, question = r["planted_step"], arithmetic.parse_question(r["question"])
        assert question is not None and arithmetic.count_equations("".join(r["steps"])) == len(question.ops)
        assert r["final_correct"] == (arithmetic.last_value("".join(r["steps"])) == question.answer)
        assert r["steps"][k].count("=") == 1  # the planted step holds one result: never the old beside the new
    report = json.loads(CliRunner().invoke(app, ["inspect", str(root), "--json"]).output)
    rests = report["estimated_precision"]["posterior"]["rests_on"]  # the canaries (the audit leads)
    assert rests["controls"]["rows"] > 0 and rests["controls"]["judge_false_alarm"] is not None
    assert rests["judge_requests"] >= 3 * rests["planted"]  # every canary and control judged with every sample
    for answer in ("right", "wrong"):
        placed = rests[answer]["rollouts"]
        if rests[answer]["canaries"]:
            assert abs(sum(placed[k] for k in ("at", "before", "after", "missed")) - 1.0) < 1e-9
            assert rests[answer]["rollouts_late_rate"] is not None


@given(
    st.lists(st.integers(0, 29), min_size=1, max_size=30, unique=True),
    st.lists(st.floats(0.0, 0.99), max_size=20),
    st.integers(0, 2**32),
)
@settings(max_examples=200, deadline=None)
def test_a_canary_stands_on_a_candidate_step_near_where_the_shards_first_errors_stand(candidates, found, seed):
    from prm_synth.shard.canaries import natural_step

    at = natural_step(sorted(candidates), 30, found, random.Random(seed))
    assert at in candidates
    if len(found) >= 5 and len(set(found)) == 1 and int(found[0] * 30) in candidates:
        assert abs(at - int(found[0] * 30)) <= 1  # one place the shard's errors stand: the canary is there
    assert natural_step([], 30, found, random.Random(seed)) is None


def test_the_judge_reads_the_clean_controls_votes_instead_of_asking_again_and_the_rows_are_the_same():
    """A clean control is a data row the judge stage asks the same prompt at the same sample indices: its
    votes are served from the controls' answers. Rows (tokens included) are those of a shard that asks
    again; the judge is asked fewer requests, and the summary counts only those asked."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import label_precision as lp

    import prm_synth.pipeline as pipeline
    import prm_synth.shard.canaries as canaries_module
    from prm_synth.pipeline import iter_shards, process_shard
    from prm_synth.simulated.engines import SimulatedJudge, SimulatedPolicy
    from prm_synth.store.summary import judge_cost

    config = lp.config_for("plain", "realistic", 1, 60)  # a shard with clean controls (seed 0's has none)

    def run(reuse: bool, monkeypatch_target=pipeline):
        policy, judge = SimulatedPolicy(config.policy), SimulatedJudge(config.judge.engine)
        shard = next(iter(iter_shards(config)))
        real = canaries_module.run_canaries
        if not reuse:  # the controls' votes withheld: the judge stage asks them again
            monkeypatch_target.run_canaries = lambda *a, **k: replace(real(*a, **k), drawn={})
        try:
            return process_shard(policy, config, shard, config.fingerprint(), judge_engine=judge)
        finally:
            monkeypatch_target.run_canaries = real

    reused, asked_again = run(True), run(False)
    assert [r.to_row() for r in reused.records] == [r.to_row() for r in asked_again.records]
    assert reused.stats.judge.reused > 0 and asked_again.stats.judge.reused == 0
    assert reused.stats.judge.samples == asked_again.stats.judge.samples  # the same votes read
    assert reused.stats.judge.requests == asked_again.stats.judge.requests - reused.stats.judge.reused
    assert judge_cost(reused.stats, 1)["judge_requests"] == reused.stats.judge.samples - reused.stats.judge.reused
