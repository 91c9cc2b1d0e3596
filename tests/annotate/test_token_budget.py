"""A per-solution token budget beside the rollout budget (`annotate.max_rollout_tokens`): the scheduler
enforces it for every method, the change-point search ranks probes per expected token, and rows say
`token_budget` where it ran out."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.labeler import make_labeler
from prm_synth.annotate.protocol import Probe
from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
from prm_synth.annotate.token_cost import TokenBudget, expected_cost, per_expected_token
from prm_synth.config import validate_config
from prm_synth.engines.base import Completion, GenerationResult, SamplingOptions
from prm_synth.pipeline import iter_shards
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.records import Problem
from prm_synth.simulated import arithmetic
from prm_synth.simulated.engines import SimulatedPolicy

WORLD = {"kind": "simulated", "step_error": 0.08, "recover": 0.05, "seed": 2}
PROBLEMS = {"kind": "builtin", "count": 6, "seed": 5, "min_ops": 12, "max_ops": 12}


def _label(annotate: dict):
    config = validate_config(
        {"problems": PROBLEMS, "policy": WORLD, "sampling": {"samples_per_problem": 2}, "annotate": annotate}
    )
    problems = [p for p in next(iter_shards(config)).items if isinstance(p, Problem)]
    return make_labeler(config).label(SimulatedPolicy(config.policy), problems)


def test_the_scheduler_gives_a_job_no_rollouts_once_its_tokens_are_spent():
    steps = [f"{i} + 1 = {i + 1}\n" for i in range(1, 9)]

    def annotator():
        seen = []
        for j in range(8):
            (result,) = yield [Probe.of_steps(steps, j - 1, 2)]
            seen.append(result.total)
        return seen

    chain = arithmetic.generate(random.Random(0), 8, 8)
    user = policy_user_prompt(chain.question())
    sched = ProbeScheduler(SimulatedPolicy(), SamplingOptions(), budget=TokenBudget(200))
    ((job, seen),) = list(sched.run([SolutionJob("a", "p", user, str(chain.answer), annotator())]))
    assert job.key in sched.out_of_tokens
    stopped = seen.index(0)
    assert all(t == 2 for t in seen[:stopped]) and all(t == 0 for t in seen[stopped:])
    assert sched.stats.rollouts == 2 * stopped  # nothing was asked after it stopped
    # it stopped where the next probe's rollouts, each expected as long as the longest so far, would not fit
    assert stopped >= 2 and sched.spend["a"].generated <= 200


def test_a_probe_is_worth_its_gain_per_expected_token():
    gains = np.array([0.1, 0.1, 0.1])
    assert per_expected_token(gains, [0, 5, 9], 10, weighted=False) is gains  # no budget: unchanged
    weighted = per_expected_token(gains, [0, 5, 9], 10, weighted=True)
    assert weighted[0] < weighted[1] < weighted[2]  # a later prefix writes less
    assert expected_cost([0, 10], 10).tolist() == [11.0, 1.0]
    # from the middle of the solution a probe keeps its gain per rollout (thresholds keep their meaning)
    assert np.mean(expected_cost(range(10), 10)) == pytest.approx((10 + 3) / 2)  # prefixes 0..n-1


def test_without_a_token_budget_the_rows_and_the_fingerprint_are_as_before():
    plain = _label({"method": "binary"})
    unbounded = _label({"method": "binary", "max_rollout_tokens": None})
    assert [(r.labels, r.unlabeled_reason, r.rollouts) for r in plain.records] == [
        (r.labels, r.unlabeled_reason, r.rollouts) for r in unbounded.records
    ]
    base = {"problems": PROBLEMS, "policy": WORLD}
    fingerprint = validate_config(base | {"annotate": {"method": "binary"}}).fingerprint()
    assert (
        validate_config(base | {"annotate": {"method": "binary", "max_rollout_tokens": None}}).fingerprint()
        == fingerprint
    )
    assert (
        validate_config(base | {"annotate": {"method": "binary", "max_rollout_tokens": 99}}).fingerprint()
        != fingerprint
    )


@pytest.mark.parametrize(
    "annotate",
    [
        {"method": "binary", "max_rollout_tokens": 60},
        {"method": "mc", "k": 4, "max_rollout_tokens": 60},
        {"method": "omegaprm", "k": 4, "max_rollout_tokens": 60},
    ],
    ids=["changepoint", "mc", "omegaprm"],
)
def test_every_method_honours_the_token_budget(annotate):
    result = _label(annotate)
    assert result.records
    reasons = [why for r in result.records for why in (r.unlabeled_reason or [])]
    assert "token_budget" in reasons  # 60 tokens is a few rollouts of a 12-step solution
    for r in result.records:
        assert all((lab is None) == (why is not None) for lab, why in zip(r.labels, r.unlabeled_reason, strict=True))
    unbounded = _label(annotate | {"max_rollout_tokens": None})
    assert result.stats.generated_tokens < unbounded.stats.generated_tokens


def test_a_search_that_stops_early_reports_the_interval_the_error_lies_in():
    from prm_synth.annotate.budget_interval import interval_of, mark_open_interval

    labels = [True, True, None, None, None, None, None]
    reasons = [
        None,
        None,
        "undecided_budget",
        "undecided_budget",
        "undecided_budget",
        "undecided_budget",
        "undecided_budget",
    ]
    p_good = [0.99, 0.97, 0.6, 0.3, 0.05, 0.01, 0.01]  # the error at or before step 4 with P 0.95
    mark_open_interval(labels, reasons, p_good, confidence=0.9)
    assert reasons[2:] == ["undecided_budget"] * 3 + ["after_error"] * 2
    assert interval_of(reasons) == range(2, 5)
    # a row with a bad label, or a posterior that places the error nowhere with confidence, is left as it is
    flat = [None, None, "undecided_budget", "undecided_budget"]
    mark_open_interval([True, True, None, None], flat, [0.99, 0.95, 0.5, 0.4], confidence=0.9)
    assert flat == [None, None, "undecided_budget", "undecided_budget"]
    pinned = [None, None, None, "after_error"]
    mark_open_interval([True, True, False, None], pinned, [0.99, 0.95, 0.02, 0.01], confidence=0.9)
    assert pinned == [None, None, None, "after_error"]


class _WritesToTheLimit:
    """The simulated policy, but every completion generates its request's `max_tokens` (a model that
    rambles to the limit): the budget's worst case. Texts and finish reasons stay the policy's, so
    answers still grade. `rollout_limit`: requests allowed more than this (the sampling of solutions)
    are left as they are."""

    def __init__(self, policy: SimulatedPolicy, rollout_limit: int = 10**9) -> None:
        self.policy = policy
        self.model_name = policy.model_name
        self.rollout_limit = rollout_limit

    def generate(self, requests):
        out = []
        for request, result in zip(requests, self.policy.generate(requests), strict=True):
            if request.sampling.max_tokens > self.rollout_limit:
                out.append(result)
                continue
            cut = tuple(Completion(c.text, request.sampling.max_tokens, "length") for c in result.completions)
            out.append(GenerationResult(cut, result.prompt_tokens))
        return out

    def close(self) -> None:
        self.policy.close()


@settings(max_examples=25, deadline=None)
@given(budget=st.integers(1, 3000), k=st.integers(1, 6), max_tokens=st.integers(1, 700))
def test_no_job_spends_more_rollout_tokens_than_its_budget_however_long_rollouts_run(budget, k, max_tokens):
    steps = [f"{i} + 1 = {i + 1}\n" for i in range(1, 9)]

    def annotator():
        for j in range(8):
            yield [Probe.of_steps(steps, j - 1, k), Probe.of_steps(steps, min(j, 7) - 1, k + 1)]
        return None

    chain = arithmetic.generate(random.Random(0), 8, 8)
    user = policy_user_prompt(chain.question())
    engine = _WritesToTheLimit(SimulatedPolicy())
    sched = ProbeScheduler(engine, SamplingOptions(max_tokens=max_tokens), budget=TokenBudget(budget))
    jobs = [SolutionJob(key, "p", user, str(chain.answer), annotator()) for key in ("a", "b")]
    list(sched.run(jobs))
    assert all(spend.generated <= budget for spend in sched.spend.values())
    assert sched.stats.generated_tokens <= 2 * budget


@pytest.mark.parametrize(
    "annotate",
    [
        {"method": "binary", "max_rollout_tokens": 1500},
        {"method": "mc", "k": 4, "max_rollout_tokens": 1500},
        {"method": "omegaprm", "k": 4, "max_rollout_tokens": 1500},
    ],
    ids=["changepoint", "mc", "omegaprm"],
)
def test_no_row_spends_more_rollout_tokens_than_the_budget_on_a_model_that_writes_to_max_tokens(annotate):
    config = validate_config(
        {
            "problems": PROBLEMS,
            "policy": WORLD,
            "sampling": {"samples_per_problem": 2},
            "rollouts": {"max_tokens": 256},
            "annotate": annotate,
        }
    )
    problems = [p for p in next(iter_shards(config)).items if isinstance(p, Problem)]
    result = make_labeler(config).label(_WritesToTheLimit(SimulatedPolicy(config.policy), 256), problems)
    assert result.spend and result.stats.generated_tokens > 0
    spent = {key: s.generated for key, s in result.spend.items()}
    assert max(spent.values()) <= 1500, spent  # each rollout alone may write 256: six fit, not seven


@pytest.mark.parametrize("tokens", [1, 300])
@pytest.mark.parametrize(
    "annotate",
    [
        {"method": "mc", "k": 4},
        {"method": "binary", "search_test": "fixed", "k": 4},
        {"method": "binary", "search_test": "sprt"},
        {"method": "binary", "search_test": "changepoint"},
        {"method": "omegaprm", "search_test": "fixed", "k": 4},
        {"method": "omegaprm", "search_test": "sprt"},
        {"method": "omegaprm", "search_test": "changepoint"},
    ],
    ids=lambda a: "-".join(str(v) for k, v in a.items() if k != "k"),
)
def test_no_search_calls_a_prefix_bad_that_no_rollout_measured(annotate, tokens):
    """A budget that cannot pay for a probe leaves the prefix undecided (`token_budget`), whatever the
    method: a bad label on 0 of 0 rollouts would pin every wrong answer's error where nothing was seen."""
    result = _label(annotate | {"max_rollout_tokens": tokens})
    # OmegaPRM under a budget no rollout fits cannot measure its question's root: no path, nothing labeled
    assert result.records or (annotate["method"] == "omegaprm" and tokens == 1 and result.rejected)
    wrong = 0
    for r in result.records:
        wrong += r.final_correct is False
        if r.first_error_mc < 0:
            continue
        i = r.first_error_mc
        measured = r.mc_total[i] > 0 or r.label_source[i] == "verdict"
        assert measured, (r.id, i, r.mc_total, r.label_source, r.labels)
        assert all((lab is None) == (why is not None) for lab, why in zip(r.labels, r.unlabeled_reason, strict=True))
    if tokens == 1:  # not one rollout fits: every wrong answer's error stays open, said as the budget's doing
        assert wrong or annotate["method"] == "omegaprm"  # (its rows are the paths its tree found)
        assert all("token_budget" in (r.unlabeled_reason or []) for r in result.records if r.final_correct is False)
