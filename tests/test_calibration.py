from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.calibration import (
    AFTER_ERROR,
    Evidence,
    Posterior,
    RunEstimates,
    SearchSettings,
    calibrated_search,
    confident_labels,
    labels_from_posterior,
)
from prm_synth.annotate.labels import apply_rule
from prm_synth.annotate.search import binary_search
from prm_synth.config import BinaryConfig
from tests.test_search import drive  # answers probes by hand, from a success rate per step

STEPS = [f"step {i}\n" for i in range(20)]


def world(rng: random.Random, n: int, p: float, q: float):
    """A solution drawn from the model: first error e (n: none), its verdict, and the prefix success rates."""
    e = next((i for i in range(n) if rng.random() < p), n)
    verdict = "correct" if e == n or rng.random() < q else "incorrect"

    def rate(step: int) -> float:
        return q + (1 - q) * (1 - p) ** (n - 1 - step) if step < e else q

    return e, verdict, rate


def matured(q: float, strength: float = 60.0) -> RunEstimates:
    """Estimates that have already pooled a run's worth of evidence of luck rate q."""
    est = RunEstimates()
    est.lucky, est.unlucky = q * strength, (1 - q) * strength
    return est


def test_posterior_is_monotone_and_an_incorrect_solution_ends_bad():
    ev = Evidence.empty(8, "incorrect")
    ev.correct[3], ev.total[3] = 4, 6
    post = Posterior(ev, RunEstimates())
    assert np.all(np.diff(post.p_good) <= 1e-12)
    assert post.p_good[-1] == pytest.approx(0.0)
    assert post.p_good.min() >= 0.0 and post.p_good.max() <= 1.0
    assert post.p_error.sum() == pytest.approx(1.0)


def test_a_success_proves_the_earlier_prefixes_good_when_luck_is_rare():
    ev = Evidence.empty(10, "incorrect")
    ev.correct[6], ev.total[6] = 3, 4  # the prefix of steps 0..5 reaches the answer 3 times in 4
    post = Posterior(ev, matured(0.002))
    assert post.p_good[:6].min() > 0.99
    lucky = Posterior(ev, matured(0.35))
    assert lucky.p_good[5] < post.p_good[5]  # the same successes say less when luck is common


def test_correct_solution_is_trusted_without_luck_and_checked_with_it():
    rng = random.Random(0)
    settings_ = SearchSettings()
    ann, asked, _ = drive(calibrated_search(STEPS[:15], "correct", settings_, matured(0.002)), lambda i: 0.9, rng)
    assert asked == []
    assert apply_rule(ann, "hard").labels == [True] * 15
    assert min(ann.p_good) > 0.9
    ann, asked, _ = drive(calibrated_search(STEPS[:15], "correct", settings_, matured(0.3)), lambda i: 0.9, rng)
    assert asked  # lucky solutions are common: the correct answer alone does not settle it


def test_labels_follow_the_posterior_and_nothing_after_the_first_bad_step():
    lab = labels_from_posterior([0.99, 0.95, 0.6, 0.05, 0.01], 0.9, "undecided_budget")
    assert lab.labels == [True, True, None, False, None]
    assert lab.reasons == [None, None, "undecided_budget", None, AFTER_ERROR]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 20), q=st.sampled_from([0.0, 0.05, 0.3]))
def test_labels_are_consistent_budget_is_kept_and_every_rule_keeps_them(seed, n, q):
    rng = random.Random(seed)
    e, verdict, rate = world(rng, n, rng.uniform(0.03, 0.2), q)
    cfg = SearchSettings(max_rollouts=40)
    ann, asked, _ = drive(calibrated_search(STEPS[:n], verdict, cfg, matured(q)), rate, rng)
    assert sum(b for _, b in _new_rollouts(asked)) <= 40
    assert len(ann.p_good) == len(ann.unlabeled_reason) == n
    assert all(np.diff(ann.p_good) <= 1e-9)
    labels = apply_rule(ann, "hard").labels
    for rule in ("majority", "relative"):
        assert apply_rule(ann, rule).labels == labels
    first_bad = next((i for i, x in enumerate(labels) if x is False), n)
    assert all(x is True or x is None for x in labels[:first_bad])
    assert all(x is None for x in labels[first_bad + 1 :])
    for label, p, reason in zip(labels, ann.p_good, ann.unlabeled_reason, strict=True):
        assert (label is None) == (reason is not None)
        if label is not None:
            assert (p if label else 1 - p) >= 0.9
    if verdict == "incorrect":
        assert ann.p_good[-1] == pytest.approx(0.0)


def _new_rollouts(asked: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(step, rollouts added) per probe: a probe asks for a total, earlier rollouts count once."""
    seen: dict[int, int] = {}
    out = []
    for step, k in asked:
        out.append((step, max(0, k - seen.get(step, 0))))
        seen[step] = max(k, seen.get(step, 0))
    return out


@pytest.mark.parametrize("q", [0.0, 0.15, 0.3])
def test_p_good_is_calibrated_and_the_run_estimates_the_luck_rate(q):
    """On solutions drawn from varied difficulty, p_good near x is right about x of the time."""
    rng = random.Random(7)
    est = RunEstimates()
    pairs: list[tuple[float, bool]] = []
    for i in range(150):
        n = rng.randint(10, 20)
        e, verdict, rate = world(rng, n, rng.uniform(0.03, 0.2), q)
        ann, _, _ = drive(calibrated_search(STEPS[:n], verdict, SearchSettings(), est, f"s{i}"), rate, rng)
        if i >= 30:  # after the run has pooled some evidence
            pairs += [(p, j < e) for j, p in enumerate(ann.p_good)]
    probs = np.array([p for p, _ in pairs])
    truth = np.array([y for _, y in pairs], dtype=float)
    bins = np.minimum((probs * 10).astype(int), 9)
    ece = sum(abs(probs[bins == b].sum() - truth[bins == b].sum()) for b in range(10)) / len(pairs)
    assert ece < 0.05
    assert abs(est.luck_rate - q) < 0.06


def test_confident_labels_keep_only_sure_ones():
    labels = [True, True, False, None]
    assert confident_labels(labels, [0.99, 0.8, 0.05, 0.01], 0.9) == [True, None, False, None]
    assert confident_labels(labels, [0.99, 0.8, 0.2, 0.01], 0.9) == [True, None, None, None]
    assert confident_labels(labels, None, 0.0) == labels
    assert confident_labels(labels, None, 0.5) == [None] * 4
    with pytest.raises(ValueError):
        confident_labels(labels, [0.5], 0.9)
    with pytest.raises(ValueError):
        confident_labels(labels, [0.5] * 4, 1.5)


def test_binary_search_runs_the_calibrated_search_and_pools_one_estimate():
    cfg = BinaryConfig(method="binary", search_test="calibrated", calibrated_max_rollouts=24)
    est = RunEstimates()
    rng = random.Random(3)
    for i in range(3):
        ann, asked, _ = drive(
            binary_search(STEPS[:12], "incorrect", cfg, estimates=est, key=f"k{i}"), lambda s: 0.05, rng
        )
        assert ann.p_good is not None and sum(k for _, k in _new_rollouts(asked)) <= 24
    assert est.solutions == 3 and est.lucky + est.unlucky > 0
