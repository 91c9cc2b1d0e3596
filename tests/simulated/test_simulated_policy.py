from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from prm_synth.config import SimulatedPolicyConfig
from prm_synth.engines.base import GenerationRequest
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.simulated import arithmetic
from prm_synth.simulated.engines import SimulatedPolicy


def _problem(seed: int, lo: int = 3, hi: int = 8) -> arithmetic.ChainProblem:
    return arithmetic.generate(random.Random(seed), lo, hi)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def test_question_round_trips_through_the_parser():
    for seed in range(200):
        p = _problem(seed, 2, 20)
        assert arithmetic.parse_question(policy_user_prompt(p.question())) == p
        assert all(v > 0 for v in p.values())


def test_error_free_policy_writes_the_correct_chain():
    p = _problem(1)
    engine = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.0))
    (res,) = engine.generate([GenerationRequest(policy_user_prompt(p.question()), n=3)])
    for c in res.completions:
        steps = _lines(c.text)
        assert len(steps) == len(p.ops)
        assert arithmetic.true_first_error(steps) == -1
        assert c.text.endswith(f"The answer is {p.answer}.")
        assert c.generated_tokens > 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), step_error=st.floats(0.05, 0.9))
def test_wrong_chains_never_reach_the_gold_answer_without_recovery(seed, step_error):
    p = _problem(seed, 2, 12)
    engine = SimulatedPolicy(SimulatedPolicyConfig(step_error=step_error, recover=0.0, seed=seed))
    (res,) = engine.generate([GenerationRequest(policy_user_prompt(p.question()), n=8)])
    for c in res.completions:
        steps = _lines(c.text)
        first = arithmetic.true_first_error(steps)
        reached = c.text.endswith(f"The answer is {p.answer}.")
        assert reached == (first == -1)
        # every equation after the first error is arithmetically right: the wrong value is carried on
        assert all(not arithmetic.step_is_wrong(s) for s in steps[first + 1 :]) if first >= 0 else True


def test_continuations_of_a_wrong_prefix_recover_at_the_configured_rate():
    p = _problem(7, 6, 6)
    engine = SimulatedPolicy(SimulatedPolicyConfig(step_error=1.0, recover=0.3))
    (res,) = engine.generate([GenerationRequest(policy_user_prompt(p.question()))])
    wrong_prefix = _lines(res.completions[0].text)[0]
    assert arithmetic.true_first_error([wrong_prefix]) == 0
    (cont,) = engine.generate([GenerationRequest(policy_user_prompt(p.question()), wrong_prefix, n=2000)])
    reached = sum(c.text.endswith(f"The answer is {p.answer}.") for c in cont.completions)
    assert 0.25 < reached / 2000 < 0.35


def test_same_seed_same_text_and_sample_index_continues_the_sequence():
    p = _problem(3)
    prompt = policy_user_prompt(p.question())
    a = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.5, seed=1))
    b = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.5, seed=1))
    (ra,) = a.generate([GenerationRequest(prompt, n=6)])
    (rb1, rb2) = b.generate([GenerationRequest(prompt, n=4), GenerationRequest(prompt, n=2, first_sample_index=4)])
    assert [c.text for c in ra.completions] == [c.text for c in rb1.completions + rb2.completions]


def test_unknown_question_gives_an_answerless_completion():
    (res,) = SimulatedPolicy().generate([GenerationRequest("What is the meaning of life?")])
    assert "The answer is" not in res.completions[0].text


def test_per_problem_difficulty_is_drawn_once_per_problem_within_the_range():
    engine = SimulatedPolicy(SimulatedPolicyConfig(step_error_range=(0.03, 0.2), seed=5))
    rates = [engine.step_error(_problem(seed, 10, 20)) for seed in range(300)]
    assert all(0.03 <= r <= 0.2 for r in rates)
    assert max(rates) - min(rates) > 0.1  # they vary from problem to problem
    assert engine.step_error(_problem(4, 10, 20)) == rates[4]  # and stay fixed for one problem
    assert SimulatedPolicy(SimulatedPolicyConfig(step_error=0.07)).step_error(_problem(4)) == 0.07


def test_default_config_writes_the_same_text_as_before():
    """The new options default off: rows pinned against today's simulator must not change."""
    p = _problem(11, 10, 20)
    prompt = policy_user_prompt(p.question())
    plain = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.1, recover=0.2, seed=2))
    explicit = SimulatedPolicy(
        SimulatedPolicyConfig(step_error=0.1, recover=0.2, seed=2, step_error_range=None, recover_in_sample=False)
    )
    (a,) = plain.generate([GenerationRequest(prompt, n=50)])
    (b,) = explicit.generate([GenerationRequest(prompt, n=50)])
    assert [c.text for c in a.completions] == [c.text for c in b.completions]
    assert not any(  # without in-sample recovery a sampled solution with an error is never right
        arithmetic.true_first_error(_lines(c.text)) >= 0 and c.text.endswith(f"The answer is {p.answer}.")
        for c in a.completions
    )


def test_in_sample_recovery_makes_lucky_solutions_at_the_configured_rate():
    p = _problem(12, 10, 10)
    engine = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.3, recover=0.3, recover_in_sample=True, seed=1))
    (res,) = engine.generate([GenerationRequest(policy_user_prompt(p.question()), n=3000)])
    wrong = [c.text for c in res.completions if arithmetic.true_first_error(_lines(c.text)) >= 0]
    lucky = [t for t in wrong if t.endswith(f"The answer is {p.answer}.")]
    assert len(wrong) > 2000
    assert 0.26 < len(lucky) / len(wrong) < 0.34
    # a lucky solution's prefixes between its error and its last step still carry the wrong value
    for text in lucky[:50]:
        steps = _lines(text)
        first = arithmetic.true_first_error(steps)
        for i in range(first, len(steps) - 1):
            assert arithmetic.last_value("".join(steps[: i + 1])) != p.values()[i]


def _world(**kw: object) -> SimulatedPolicy:
    return SimulatedPolicy(SimulatedPolicyConfig(step_error=0.2, recover=0.1, recover_in_sample=True, seed=4, **kw))


def test_world_options_keep_the_truth_recomputable_from_the_text():
    """Step drift, a hard step, correlated rollouts, recent luck: every completion's first error is
    still where its text says, and a correct final answer after it is only by luck."""
    policy = _world(step_drift=0.4, hard_step_error=0.6, correlation=1.0, recent_recover=0.4)
    merged = extra = 0
    for seed in range(40):
        p = _problem(seed, 4, 10)
        (res,) = policy.generate([GenerationRequest(policy_user_prompt(p.question()), n=4)])
        for c in res.completions:
            lines = _lines(c.text)
            merged += sum(arithmetic.count_equations(line) > 1 for line in lines)
            extra += sum(arithmetic.count_equations(line) == 0 for line in lines)
            assert arithmetic.count_equations(c.text) == len(p.ops)
            first = arithmetic.true_first_error(lines)
            if first < 0:
                assert c.text.endswith(f"The answer is {p.answer}.")
    assert merged > 0 and extra > 0  # continuations write a different number of steps than the ops


def test_ungradable_completions_are_cut_off_or_answerless():
    from prm_synth.grading.math import grade_completion

    policy = _world(ungradable=0.5)
    statuses = []
    for seed in range(20):
        p = _problem(seed, 4, 8)
        (res,) = policy.generate([GenerationRequest(policy_user_prompt(p.question()), n=6)])
        statuses += [grade_completion(c.text, str(p.answer), c.finish_reason).status for c in res.completions]
        assert {c.finish_reason for c in res.completions} <= {"stop", "length"}
    unknown = statuses.count("unknown") / len(statuses)
    assert 0.35 < unknown < 0.65


def test_per_problem_luck_and_hard_step_are_drawn_once_per_problem():
    policy = _world(recover_range=(0.0, 0.7), hard_step_error=0.5)
    lucks = {round(policy.luck(_problem(s, 5, 9)), 6) for s in range(30)}
    assert len(lucks) > 20 and all(0.0 <= q <= 0.7 for q in lucks)
    p = _problem(3, 5, 9)
    assert policy.hard_step(p) == policy.hard_step(p) is not None
    assert _world().hard_step(p) is None and _world().luck(p) == 0.1


def test_luck_populations_draw_each_problems_luck_from_the_choices():
    policy = _world(recover_choices=(0.0, 0.6))
    lucks = [policy.luck(_problem(s, 5, 9)) for s in range(40)]
    assert set(lucks) == {0.0, 0.6}  # both populations, nothing between them
    assert all(policy.luck(_problem(s, 5, 9)) == q for s, q in enumerate(lucks))  # once per problem
    for bad in ({"recover_choices": ()}, {"recover_choices": (0.2, 1.5)}):
        with pytest.raises(ValidationError, match="recover_choices"):
            SimulatedPolicyConfig(**bad)
    with pytest.raises(ValidationError, match="not both"):
        SimulatedPolicyConfig(recover_range=(0.0, 0.5), recover_choices=(0.1,))
