"""The simulated worlds beyond math have known truth: a bug at a known step makes the tests fail, a bug a
later step hides lets the program pass with its first error still known, the choice world picks the right
option only from a right value, and the no-gold world's majority is wrong where its misconception is.
Their labels, through the real labeler (code in the sandbox), are precise against that truth."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from prm_synth.config.grader import GraderConfig, SandboxLimits
from prm_synth.engines.base import GenerationRequest
from prm_synth.grading import sandbox
from prm_synth.grading.registry import make_grader
from prm_synth.prompting.prompts import policy_user_prompt, render_judge_prompt
from prm_synth.prompting.steps import split_steps
from prm_synth.simulated.domains import (
    DomainJudge,
    DomainPolicy,
    DomainWorld,
    parse_chain,
    true_first_error,
    world_problems,
    written_state,
)
from prm_synth.simulated.engines import JUDGE_PROFILES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import domain_worlds  # noqa: E402

needs_sandbox = pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")
CODE = make_grader(GraderConfig(kind="code", sandbox=SandboxLimits(cpu_s=2, wall_s=60)))


def _program(lines: list[str]) -> str:
    return (
        "I will apply the operations one statement at a time.\n\n```python\n"
        + "".join(lines)
        + "\ndef solve():\n    return v\n```\n"
    )


@needs_sandbox
def test_a_bug_fails_the_tests_and_a_hidden_bug_passes_with_its_error_known() -> None:
    problem = world_problems("code", 1, 7)[0]
    chain = parse_chain(problem.question)
    assert chain is not None
    ops = [f"v = v {op} {b}\n" for op, b in chain.ops]
    key = CODE.key(problem)
    right = _program([f"v = {chain.start}\n", *ops])
    assert CODE.grade(right, key).status == "correct"
    assert true_first_error("code", chain, split_steps(right, "code")) == -1
    op, b = chain.ops[1]
    bug = ops[:1] + [f"v = v {op} {b + 1}\n"] + ops[2:]
    buggy = _program([f"v = {chain.start}\n", *bug])
    assert CODE.grade(buggy, key).status == "incorrect"
    assert true_first_error("code", chain, split_steps(buggy, "code")) == 3  # prose, start, op 0, op 1
    hidden = _program([f"v = {chain.start}\n", *bug[:2], f"v = {chain.values()[2]}\n", *ops[2:]])
    assert CODE.grade(hidden, key).status == "correct"  # the final program passes...
    assert true_first_error("code", chain, split_steps(hidden, "code")) == 3  # ...its first error stays


def test_the_choice_world_picks_the_right_option_only_from_a_right_value() -> None:
    world = DomainPolicy(DomainWorld("choice", step_error=0.3, recover=0.0, seed=3))
    grader = make_grader(GraderConfig(kind="choice"))
    for problem in world_problems("choice", 30, 3):
        chain = parse_chain(problem.question)
        assert chain is not None
        (result,) = world.generate([GenerationRequest(policy_user_prompt(problem.question), n=4)])
        for c in result.completions:
            first = true_first_error("choice", chain, split_steps(c.text, "line"))
            right = grader.grade(c.text, grader.key(problem)).status == "correct"
            reached = written_state("choice", c.text)
            assert reached is not None
            assert right == (reached[1] == chain.answer)  # two errors may cancel: the value decides
            assert first != -1 or right


def test_the_no_gold_worlds_majority_is_wrong_where_the_misconception_is() -> None:
    world = DomainPolicy(DomainWorld("math", step_error=0.0, recover=0.0, trap=0.5, trap_error=1.0, seed=5))
    problems = world_problems("math", 40, 5)
    trapped = 0
    for problem in problems:
        chain = parse_chain(problem.question)
        assert chain is not None
        (result,) = world.generate([GenerationRequest(policy_user_prompt(problem.question), n=3)])
        answers = {c.text.rsplit(" ", 1)[1].rstrip(".") for c in result.completions}
        assert len(answers) == 1  # no noise: every sample agrees
        wrong = answers != {str(chain.answer)}
        assert wrong == (world.trap_step(chain) is not None)
        trapped += wrong
    assert 10 <= trapped <= 30  # about half, as set


@needs_sandbox
def test_label_quality_in_each_world() -> None:
    results = domain_worlds.run(12, [2], ["code", "choice"])
    for world in ("code", "choice"):
        assert results[world]["rows"] == 12
        assert results[world]["good_precision"] >= 0.9, (world, results[world])
        assert (results[world]["bad_precision"] or 1.0) >= 0.9, (world, results[world])


def test_the_no_gold_card_table_is_the_worlds_truth_level_by_level() -> None:
    results = domain_worlds.run(30, [2], ["no_gold", "no_gold_blind"])
    gold = results["no_gold"]
    table, truth = gold["agreement_accuracy"], gold["agreement_truth"]
    assert sum(row["total"] for row in table) == gold["problems_with_pseudo_gold"]  # every majority audited
    assert table == truth  # per agreement level, the audit against held-out gold is the chains' own truth
    wrong = sum(row["total"] - row["right"] for row in table)
    assert wrong / gold["problems_with_pseudo_gold"] == pytest.approx(gold["majority_wrong_rate"], abs=1e-4)
    assert gold["majority_wrong_rate"] > 0.1  # the world's misconception makes some majorities wrong
    blind = results["no_gold_blind"]
    assert blind["agreement_accuracy"] == []  # no gold at all: no table, the doubt comes from the votes
    for r in (gold, blind):  # judged and filtered: every row kept or rejected, the kept ones precise
        assert r["rows"] + r["consensus_rejected"] == r["problems_with_pseudo_gold"]
        assert r["rows"] >= 5
        assert r["good_precision"] >= 0.9 and (r["bad_precision"] or 1.0) >= 0.9, r


def test_the_domain_judge_is_not_an_oracle_on_the_misconception() -> None:
    world = DomainWorld("math", step_error=0.0, recover=0.0, trap=1.0, trap_error=1.0, seed=4)
    policy, judge = DomainPolicy(world), DomainJudge(world)
    profile = JUDGE_PROFILES["realistic"].errors
    assert profile is not None
    named = total = 0
    for problem in world_problems("math", 20, 4):
        chain = parse_chain(problem.question)
        assert chain is not None
        (result,) = policy.generate([GenerationRequest(policy_user_prompt(problem.question))])
        steps = split_steps(result.completions[0].text, "line")
        truth = true_first_error("math", chain, steps)
        assert truth >= 0  # every problem holds the misconception, always written
        (votes,) = judge.generate([GenerationRequest(render_judge_prompt(problem.question, steps), n=20)])
        answers = [c.text.rsplit("{", 1)[-1].rstrip("}") for c in votes.completions if "boxed" in c.text]
        named += sum(a == str(truth) for a in answers)
        total += len(answers)
    expected = profile.recall_right_answer * (1 - profile.off_by)  # the swayed recall, never the oracle's
    assert abs(named / total - expected) < 0.06, (named, total, expected)


def test_worlds_are_reproducible() -> None:
    problem = world_problems("code", 1, 9)[0]
    world = DomainPolicy(DomainWorld("code", step_error=0.5, seed=9))
    request = GenerationRequest(policy_user_prompt(problem.question), n=3)
    assert world.generate([request]) == world.generate([request])
    assert json.loads(problem.grading or "{}")["entry_point"] == "solve"
