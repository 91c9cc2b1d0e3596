from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth import arithmetic
from prm_synth.config import SimulatedPolicyConfig
from prm_synth.engines.base import GenerationRequest
from prm_synth.engines.simulated import SimulatedPolicy
from prm_synth.prompts import policy_user_prompt


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
