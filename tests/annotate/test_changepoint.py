"""The changepoint search (the binary method's default): its posterior, its search, unknown rollouts,
the model check, and rows that do not depend on how a run is executed."""

from __future__ import annotations

import copy
import gc
import math
import pickle
import random
from concurrent.futures import Future
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_search import drive  # answers probes by hand, from a success rate per step

from prm_synth.annotate.changepoint import (
    DEFAULT_PRIORS,
    ChangepointSettings,
    Evidence,
    FirstPhasePool,
    Posterior,
    Priors,
    changepoint_search,
    pool_priors,
    relabel,
    second_phase_priors,
)
from prm_synth.annotate.changepoint import label as label_again
from prm_synth.annotate.changepoint.engine.model import Q_GRID
from prm_synth.annotate.changepoint.memo import DecisionMemo, state_key
from prm_synth.annotate.changepoint.right_answers import (
    found_errors_by,
    hidden_error_positions,
    process_error_rate,
    repaired_slip,
    unmodelled_error_rate,
)
from prm_synth.annotate.changepoint.search import (
    _ends,
    best_probe,
    decide,
    early_prefixes,
    open_interval,
    probe_value_priors,
    unbacked_bad,
)
from prm_synth.annotate.labeler import make_labeler
from prm_synth.annotate.protocol import ProbeResult, Wait
from prm_synth.config import validate_config
from prm_synth.problems.sources import iter_problems
from prm_synth.records import Problem
from prm_synth.records.labels import (
    AFTER_ERROR,
    UNDECIDED_UNINFORMATIVE,
    UNDECIDED_UNLOCATED,
    apply_rule,
    confident_labels,
    first_bad_step,
    labels_from_posterior,
)
from prm_synth.simulated.engines import SimulatedPolicy

# A world that breaks the old model: one hard step, luck per problem, ungradable rollouts, step drift.
MIXED = {
    "problems": {"kind": "builtin", "count": 16, "min_ops": 6, "max_ops": 12},
    "policy": {
        "kind": "simulated",
        "step_error": 0.03,
        "hard_step_error": 0.4,
        "recover_range": [0.0, 0.5],
        "recover_in_sample": True,
        "ungradable": 0.15,
        "step_drift": 0.1,
    },
    "sampling": {"samples_per_problem": 2},
    "steps": {"strategy": "line"},
    "annotate": {"method": "binary"},
}


def _records(run: dict[str, int]):
    config = validate_config(MIXED | {"run": run})
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    return make_labeler(config).label(SimulatedPolicy(config.policy), problems)


def test_the_default_binary_method_is_the_changepoint_search():
    assert validate_config(MIXED).annotate.search_test == "changepoint"


def test_rows_do_not_depend_on_in_flight_or_batch_knobs():
    wide = _records({"max_in_flight": 64, "max_batch_requests": 256})
    narrow = _records({"max_in_flight": 2, "max_batch_requests": 3})
    # every column but `tokens`: it counts each engine request's prompt once, and how a prefix's
    # samples were split into requests depends on who asked first (rollouts are charged order-free)
    rows = [[r.to_row() | {"tokens": None} for r in result.records] for result in (wide, narrow)]
    assert rows[0] == rows[1]
    assert len(wide.records) == 32


def test_the_searches_of_a_shard_go_on_after_its_first_phase_is_pooled():
    result = _records({"max_in_flight": 64, "max_batch_requests": 256})
    rows = len(result.records)
    # every search not decided within `pool_after` rollouts waited for the pool once, then went on
    waited = result.stats.annotators_waited
    assert 0 < waited < rows and result.stats.annotators_started == result.stats.annotators_done == rows
    assert sum(r.rollouts > ChangepointSettings().pool_after for r in result.records) >= waited // 2
    assert all(r.p_good is not None and len(r.p_good) == len(r.steps) for r in result.records)


def test_ungradable_rollouts_are_counted_apart_and_reported():
    result = _records({"max_in_flight": 64, "max_batch_requests": 256})
    # two solutions of a problem that share a prefix share its rollouts: each prefix counted once
    per_prefix: dict[tuple[str, str], int] = {}
    for r in result.records:
        for i, u in enumerate(r.mc_unknown):
            key = (r.problem_id, "".join(r.steps[: i + 1]))
            per_prefix[key] = max(per_prefix.get(key, 0), u)
    unknown = sum(per_prefix.values())
    assert unknown > 0 and result.stats.unknown_rollouts >= unknown
    for r in result.records:
        assert all(v is None or 0.0 <= v <= 1.0 for v in r.mc_values)
        for c, t, v in zip(r.mc_correct, r.mc_total, r.mc_values, strict=True):
            assert c <= t and (v is None if t == 0 else v == c / t)


def _drive(steps: list[str], status: str, rate_of) -> object:
    """Run the search against a stand-in whose prefix j succeeds at rate_of(j), unknown every 4th."""
    search = changepoint_search(steps, status, ChangepointSettings())
    probes = next(search)
    rng = np.random.default_rng(0)
    try:
        while True:
            out = []
            for probe in probes:
                j = probe.step + 1
                total = probe.k
                unknown = total // 4
                correct = int(rng.binomial(total - unknown, rate_of(j)))
                out.append(ProbeResult(probe.step, correct, total, unknown))
            probes = search.send(out)
    except StopIteration as stop:
        return stop.value


def test_the_search_finds_a_clear_error_and_never_counts_unknown_as_failure():
    steps = [f"step {i}\n" for i in range(12)]
    ann = _drive(steps, "incorrect", lambda j: 0.9 if j <= 7 else 0.0)  # step 7 is the first error
    assert ann.p_good is not None
    first_bad = next(i for i in range(12) if ann.decided.get(i) is False)
    assert first_bad == 7
    assert all(ann.decided.get(i) is True for i in range(7) if i in ann.decided)
    assert sum(ann.mc_unknown) > 0
    assert all(t + u > 0 for t, u in zip(ann.mc_total, ann.mc_unknown, strict=True) if t)


def test_pooled_priors_depend_on_the_set_of_evidence_not_its_order():
    evs = []
    for k in range(6):
        ev = Evidence.empty(8, "incorrect")
        ev.correct[0], ev.graded[0] = 3 + k % 3, 8
        ev.correct[5], ev.graded[5] = k % 2, 8
        evs.append(ev)
    s = ChangepointSettings()
    a, b = pool_priors(evs, s, s.recent_choices), pool_priors(list(reversed(evs)), s, s.recent_choices)
    assert np.allclose(a.q, b.q) and np.allclose(a.p, b.p)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 25),
    counts=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=25, max_size=25),
    verdict=st.sampled_from(["correct", "incorrect", "unknown"]),
)
def test_p_good_is_a_non_increasing_probability_for_any_evidence(n, counts, verdict):
    ev = Evidence.empty(n, verdict)
    for j in range(n):
        c, extra = counts[j]
        ev.correct[j], ev.graded[j] = c, c + extra
    post = Posterior(ev, Priors())
    assert np.all(post.p_good >= 0) and np.all(post.p_good <= 1)
    assert np.all(np.diff(post.p_good) <= 1e-12)
    assert abs(post.joint.sum() - 1.0) < 1e-9
    if verdict == "incorrect":
        assert post.p_good[-1] < 1e-9  # an incorrect solution holds an error somewhere


def test_the_summary_warns_when_more_than_five_percent_of_rollouts_are_ungradable():
    from prm_synth.records import ShardStats
    from prm_synth.store.summary import _warnings

    assert _warnings(ShardStats(rollouts=100, unknown_rollouts=5)) == []
    (warning,) = _warnings(ShardStats(rollouts=100, unknown_rollouts=6))
    assert "6 of 100" in warning and "left out of the evidence" in warning
    old = ShardStats.from_dict({"rollouts": 10})  # a marker written before the field existed
    assert old.unknown_rollouts == 0 and _warnings(old) == []


def test_a_rise_after_a_hard_step_is_not_read_as_an_error():
    # a correct solution whose prefixes reach the answer rarely until step 4, then always: a hard
    # step the policy got right (the curve of a clean prefix rises to 1), not a wrong step
    ev = Evidence.empty(10, "correct")
    for j in range(10):
        ev.correct[j], ev.graded[j] = (1 if j <= 4 else 8), 8
    post = Posterior(ev, Priors())
    assert post.p_good.min() > 0.9


def test_pooling_picks_the_overdispersion_the_rollouts_show():
    rng = np.random.default_rng(0)

    def shard(all_or_nothing: bool) -> list[Evidence]:
        out = []
        for _ in range(40):
            ev = Evidence.empty(8, "incorrect")
            for j in range(0, 8, 2):
                rate = 0.5 if j < 4 else 0.1
                if all_or_nothing:  # every rollout of a prefix shares its fate
                    hit = rng.random() < rate
                    ev.correct[j], ev.graded[j] = 8 * hit, 8
                else:
                    ev.correct[j], ev.graded[j] = rng.binomial(8, rate), 8
            out.append(ev)
        return out

    s = ChangepointSettings()
    shared, independent = pool_priors(shard(True), s, ()).k, pool_priors(shard(False), s, ()).k
    assert shared == min(s.k_choices) and independent > shared


def _binomial_shard(seed: int) -> list[Evidence]:
    """40 solutions whose rollouts are independent draws at the change-point model's rates."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(40):
        n, hazard, luck = int(rng.integers(8, 16)), 0.1, 0.15
        error = int(rng.integers(0, n + 1))
        ev = Evidence.empty(n, "correct" if error == n or rng.random() < luck else "incorrect")
        for j in sorted(rng.choice(n, size=4, replace=False)):
            rate = luck + (1 - luck) * (1 - hazard) ** (n - j) if j <= error else luck
            ev.correct[j], ev.graded[j] = rng.binomial(4, rate), 4
        out.append(ev)
    return out


def test_the_second_phase_pools_the_shards_luck_and_classes_as_the_final_relabeling_does():
    # its k is chosen with the default weighing as much as the shard (the thin first phases barely
    # tell the k apart); the luck and class weights are pooled under it as `relabel` pools them: at
    # that weight a clean prefix reading about half could still be an early error with luck near 0.5,
    # and the search paid rollouts to rule out what the shard had ruled out already
    settings = ChangepointSettings()
    for seed in range(4):
        evs = _binomial_shard(seed)  # luck 0.15
        second = second_phase_priors(evs, settings)
        cautious = pool_priors(evs, replace(settings, pool_strength=float(len(evs))), ())
        assert second.k == cautious.k and second.recent_share == 0.0  # the search's priors read no fresh-error luck
        sharp = pool_priors(evs, settings, ())
        near = np.abs(Q_GRID - 0.15) <= 0.06
        assert second.q[near].sum() > cautious.q[near].sum()
        if sharp.k == second.k:
            np.testing.assert_allclose(second.q, sharp.q)
            np.testing.assert_allclose(second.p, sharp.p)


def _annotation_with(ev: Evidence):
    from prm_synth.annotate.annotation import Annotation

    ann = Annotation.empty("binary", ev.n)
    ann.evidence = ev
    return ann


def test_solutions_of_one_problem_share_its_luck_and_each_prefix_counts_once():
    from prm_synth.annotate.changepoint import relabel

    def ambiguous() -> Evidence:  # an incorrect solution whose rollouts alone cannot say much
        ev = Evidence.empty(8, "incorrect")
        ev.correct[4], ev.graded[4] = 3, 4
        return ev

    def lucky() -> Evidence:  # a clear error at step 2, and wrong prefixes that still reach the answer often
        ev = Evidence.empty(8, "incorrect")
        for j, (c, g) in {0: (14, 16), 1: (16, 16), 2: (16, 16), 3: (9, 16), 5: (10, 16), 7: (9, 16)}.items():
            ev.correct[j], ev.graded[j] = c, g
        return ev

    alone = _annotation_with(ambiguous())
    relabel([alone, _annotation_with(lucky())], ChangepointSettings(), [("a", ["x"] * 8), ("b", ["y"] * 8)])
    shared = _annotation_with(ambiguous())
    relabel([shared, _annotation_with(lucky())], ChangepointSettings(), [("a", ["x"] * 8), ("a", ["y"] * 8)])
    # the sibling's wrong prefixes reach the answer often: luck is common on this problem, so the
    # ambiguous solution's successes say less, and every step before its last is trusted less
    assert all(s < a - 0.05 for s, a in zip(shared.p_good[:-1], alone.p_good[:-1], strict=True))
    # a sibling with the same text holds the same rollouts and verdict: it adds nothing
    twin = _annotation_with(ambiguous())
    relabel([twin, _annotation_with(ambiguous())], ChangepointSettings(), [("a", ["x"] * 8), ("a", ["x"] * 8)])
    single = _annotation_with(ambiguous())  # the same shard (same pooled priors), but not siblings
    relabel([single, _annotation_with(ambiguous())], ChangepointSettings(), [("a", ["x"] * 8), ("b", ["x"] * 8)])
    assert twin.p_good == single.p_good


# ------------------------------------------------------------------ localization and the label rules
STEPS = [f"step {i}\n" for i in range(20)]


def _world(rng: random.Random, n: int, p: float, q: float):
    """A solution with a geometric clean curve: first error e (n: none), its verdict, prefix success rates."""
    e = next((i for i in range(n) if rng.random() < p), n)
    verdict = "correct" if e == n or rng.random() < q else "incorrect"

    def rate(step: int) -> float:
        return q + (1 - q) * (1 - p) ** (n - 1 - step) if step < e else q

    return e, verdict, rate


def _new_rollouts(asked: list[tuple[int, int]]) -> int:
    """Rollouts a search asked for: a probe asks for a total, earlier rollouts count once."""
    seen: dict[int, int] = {}
    for step, k in asked:
        seen[step] = max(k, seen.get(step, 0))
    return sum(seen.values())


def test_the_search_pins_a_clear_error_to_one_step():
    # the error is clear (clean prefixes always reach the answer, bad ones never): whatever step it
    # is on, the first bad label is on it and the step before it is labeled good
    for error in (1, 6, 13, 18):
        ann, asked, _ = drive(
            changepoint_search(STEPS, "incorrect", ChangepointSettings()), lambda i, e=error: 1.0 if i < e else 0.0
        )
        labels = apply_rule(ann, "hard").labels
        first_bad = labels.index(False)
        assert first_bad == error and labels[error - 1] is True, (error, labels)
        assert _new_rollouts(asked) <= ChangepointSettings().localize_max_rollouts


def test_open_interval_lies_between_the_last_good_and_the_first_bad_label():
    assert list(open_interval(np.array([0.99, 0.95, 0.6, 0.3, 0.05, 0.01]), 0.9)) == [2, 3, 4]
    assert list(open_interval(np.array([0.99, 0.95, 0.05, 0.01]), 0.9)) == []  # pinned already
    assert list(open_interval(np.array([0.6, 0.5, 0.3]), 0.9)) == []  # no bad label: nothing to pin
    assert list(open_interval(np.array([0.6, 0.05]), 0.9)) == [0, 1]  # the question alone is clean


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 20), q=st.sampled_from([0.0, 0.05, 0.3]))
def test_labels_are_consistent_the_budget_is_kept_and_every_rule_keeps_them(seed, n, q):
    rng = random.Random(seed)
    e, verdict, rate = _world(rng, n, rng.uniform(0.03, 0.2), q)
    cfg = ChangepointSettings(max_rollouts=24, localize_max_rollouts=40)
    ann, asked, _ = drive(changepoint_search(STEPS[:n], verdict, cfg), rate, rng)
    assert _new_rollouts(asked) <= 40
    assert len(ann.p_good) == len(ann.unlabeled_reason) == n
    assert all(np.diff(ann.p_good) <= 1e-9)
    labels = apply_rule(ann, "hard").labels
    for rule in ("majority", "relative"):
        assert apply_rule(ann, rule).labels == labels
    first_bad = next((i for i, x in enumerate(labels) if x is False), n)
    assert all(x is True or x is None for x in labels[:first_bad])
    assert all(x is None for x in labels[first_bad + 1 :])
    if first_bad < n:  # a bad label rests on rollouts of its own prefix (the last step: on the verdict)
        assert ann.mc_total[first_bad] > 0 or (first_bad == n - 1 and verdict == "incorrect")
    for label, p, reason in zip(labels, ann.p_good, ann.unlabeled_reason, strict=True):
        assert (label is None) == (reason is not None)
        if label is not None:
            assert (p if label else 1 - p) >= 0.9
    if verdict == "incorrect":
        assert ann.p_good[-1] == pytest.approx(0.0)


def test_labels_follow_the_posterior_and_nothing_after_the_first_bad_step():
    lab = labels_from_posterior([0.99, 0.95, 0.6, 0.05, 0.01], 0.9, "undecided_budget")
    assert lab.labels == [True, True, None, False, None]
    assert lab.reasons == [None, None, "undecided_budget", None, AFTER_ERROR]


def test_a_bad_label_after_a_good_one_needs_confidence_alone_a_lone_one_bad_confidence():
    # step 2 at P(bad) 0.92: right after a good step it pins the first error; with an undecided step
    # before it, it waits for 0.95 (step 3)
    assert first_bad_step([0.99, 0.95, 0.08, 0.03], 0.9, 0.95) == 2
    assert first_bad_step([0.99, 0.6, 0.08, 0.03], 0.9, 0.95) == 3
    assert first_bad_step([0.08, 0.01], 0.9, 0.95) == 1  # step 0 has no step before it
    assert first_bad_step([0.99, 0.95, 0.08], 0.9) == 2  # bad_confidence defaults to confidence
    lab = labels_from_posterior([0.99, 0.95, 0.08, 0.03], 0.9, "undecided_budget", 0.95)
    assert lab.labels == [True, True, False, None]


@settings(max_examples=200, deadline=None)
@given(
    p_good=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12).map(lambda p: sorted(p, reverse=True)),
    confidence=st.sampled_from([0.8, 0.9]),
    bad_confidence=st.sampled_from([0.9, 0.95, 0.99]),
)
def test_the_first_bad_step_is_the_first_that_meets_its_bar(p_good, confidence, bad_confidence):
    bad_confidence = max(confidence, bad_confidence)
    first = first_bad_step(p_good, confidence, bad_confidence)

    def meets(i: int) -> bool:
        pinned = i > 0 and p_good[i - 1] >= confidence
        return 1.0 - p_good[i] >= (confidence if pinned else bad_confidence)

    assert first == next((i for i in range(len(p_good)) if meets(i)), None)
    lab = labels_from_posterior(p_good, confidence, "undecided_budget", bad_confidence)
    assert (False in lab.labels) == (first is not None)
    if first is not None:
        assert lab.labels.index(False) == first and 1.0 - p_good[first] >= confidence


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


@pytest.mark.parametrize("method", ["binary", "omegaprm"])
def test_a_config_asking_for_the_removed_calibrated_search_gets_the_changepoint_search(method, caplog):
    old = {"method": method, "search_test": "calibrated", "calibrated_max_rollouts": 24, "calibrated_min_gain": 0.1}
    with caplog.at_level("WARNING"):
        config = validate_config({**MIXED, "annotate": old})
    assert config.annotate.search_test == "changepoint"
    assert "calibrated was removed" in caplog.text and "calibrated_max_rollouts" in caplog.text
    same = validate_config({**MIXED, "annotate": {"method": method, "search_test": "changepoint"}})
    assert config.fingerprint() == same.fingerprint()


# ------------------------------------------------------------------ a right answer after a wrong step
def test_a_repaired_slip_in_a_checked_correct_solution_leaves_its_steps_unlabeled_with_the_reason():
    # step 3 is a slip the policy repaired: only the prefix ending on it fails; the answer is right
    def rate(step: int) -> float:
        return 0.0 if step == 3 else 1.0

    ann, asked, _ = drive(changepoint_search(STEPS[:12], "correct", ChangepointSettings(), check=True), rate)
    assert {step for step, _ in asked[:6]} == set(range(6))  # every early prefix tested first
    labels = apply_rule(ann, "hard").labels
    assert not any(labels[3:]) and ann.unlabeled_reason[3] == UNDECIDED_UNLOCATED
    # without the check the same solution is trusted on its verdict and its last prefix
    ann, _, _ = drive(changepoint_search(STEPS[:12], "correct", ChangepointSettings()), rate)
    assert all(apply_rule(ann, "hard").labels)


@pytest.mark.parametrize("verdict", ["correct", "unknown"])
def test_the_shards_measured_rate_of_hidden_errors_sets_how_far_unchecked_correct_solutions_are_trusted(verdict):
    # an ungradable answer whose rollouts say it is right may hide an error as a right one does
    from prm_synth.annotate.changepoint import relabel

    def run(slipped: bool) -> tuple[list, list]:
        checked = []
        for k in range(8):  # tested correct-answer solutions: with a dip at prefix 3 (a repaired slip) or not
            ev = Evidence.empty(12, "correct")
            ev.checked = True
            for j in range(1, 7):
                ev.correct[j], ev.graded[j] = (0 if slipped and j == 3 + k % 2 else 4), 4
            checked.append(_annotation_with(ev))
        plain = Evidence.empty(12, verdict)  # an untested one: its last prefix and its verdict only
        plain.correct[11], plain.graded[11] = 4, 4
        rows = [*checked, _annotation_with(plain)]
        relabel(rows, ChangepointSettings(), [(f"p{i}", [f"{i}"] * 12) for i in range(len(rows))])
        return rows[-1].p_good, rows[-1].unlabeled_reason

    clean_p, clean_reasons = run(slipped=False)
    slipped_p, slipped_reasons = run(slipped=True)
    assert min(clean_p) >= 0.9 and set(clean_reasons) == {None}
    assert min(slipped_p) < 0.9 and UNDECIDED_UNLOCATED in slipped_reasons
    assert all(a <= b + 1e-12 for a, b in zip(slipped_p, clean_p, strict=True))


def test_slips_the_shards_tests_found_cap_an_untested_right_answer_from_where_they_were_found():
    # the shard's tested solutions show a slip at step 5 (a dip at prefix 6): an untested right answer
    # of the same length is trusted no further there and after (each found slip counts at its own step;
    # spreading it over the steps before was removed in revision 2026-12-06.1)
    def run(slipped: bool):  # the untested solution's annotation
        rows = []
        for _ in range(8):  # tested solutions, a dip at prefix 6 (the slip at step 5) or none
            ev = Evidence.empty(12, "correct")
            ev.checked = True
            for j in (1, 2, 3, 4, 5, 6, 9, 11):
                ev.correct[j], ev.graded[j] = (0 if slipped and j == 6 else 4), 4
            rows.append(_annotation_with(ev))
        plain = Evidence.empty(12, "correct")  # an untested one: its last prefix and its verdict only
        plain.correct[11], plain.graded[11] = 4, 4
        rows.append(_annotation_with(plain))
        relabel(rows, ChangepointSettings(), [(f"p{i}", [f"{i}"] * 12) for i in range(len(rows))])
        return rows[-1]

    trusted, capped = run(slipped=False), run(slipped=True)
    assert all(apply_rule(trusted, "hard").labels)
    labels = apply_rule(capped, "hard").labels
    assert labels[5] is not True and capped.unlabeled_reason[5] == UNDECIDED_UNLOCATED
    assert capped.p_good[5] < trusted.p_good[5] and capped.p_good[0] <= trusted.p_good[0]


@settings(max_examples=60, deadline=None)
@given(positions=st.lists(st.floats(0.0, 0.999), max_size=12), n=st.integers(1, 400))
def test_a_found_error_counts_at_the_step_it_falls_on(positions, n):
    counts = found_errors_by(positions, n)
    # a share x of the length falls on step floor(x n) here (up to rounding: x n a hair under a whole step)
    at_found = np.array([sum(math.floor(x * n + 1e-9) <= i for x in positions) for i in range(n)], dtype=float)
    assert counts.shape == (n,) and np.all(np.diff(counts) >= 0)  # more steps, more of them
    assert np.allclose(counts, at_found)
    assert counts[-1] == len(positions)


def test_a_tested_correct_solution_is_trusted_no_further_than_the_slips_its_test_may_miss():
    # 4 rollouts a tested prefix find about half the slips a policy repairs (fidelity `repair`): where
    # the shard's tested solutions show such slips, one whose test found none has not ruled them out
    def run(slipped: bool):  # the last row's annotation
        rows = []
        for k in range(9):  # eight tested solutions with a dip at prefix 3 or 4 (or none), then one without
            ev = Evidence.empty(12, "correct")
            ev.checked = True
            for j in range(1, 7):
                ev.correct[j], ev.graded[j] = (0 if slipped and k < 8 and j == 3 + k % 2 else 4), 4
            rows.append(_annotation_with(ev))
        relabel(rows, ChangepointSettings(), [(f"p{i}", [f"{i}"] * 12) for i in range(len(rows))])
        return rows[-1]

    trusted, capped = run(slipped=False), run(slipped=True)
    assert min(trusted.p_good) >= 0.9 and set(trusted.unlabeled_reason) == {None}
    assert min(capped.p_good) < 0.9 and UNDECIDED_UNLOCATED in capped.unlabeled_reason
    assert all(a <= b + 1e-12 for a, b in zip(capped.p_good, trusted.p_good, strict=True))
    assert capped.label_source.count("none") > 0 and "none" not in trusted.label_source


# ------------------------------------------------------------------ long solutions
@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 2000), most=st.integers(2, 12))
def test_the_correct_answer_check_tests_a_bounded_spread_of_early_prefixes_at_any_length(n, most):
    early = early_prefixes(n, most)
    half = (n + 1) // 2
    assert len(early) <= most and early == sorted(set(early))
    assert early[0] == 1 and early[-1] == half  # the first and the last early prefix, the rest between
    if half <= most:
        assert early == list(range(1, half + 1))  # short solutions: every early prefix


def _clean_curve(n: int, hazard: float, q: float = 0.05):
    """Success rate of the prefix ending at step i of a solution that is clean up to step `error`."""

    def rate_of(error: int):
        return lambda step: q + (1 - q) * (1 - hazard) ** (n - 1 - step) if step < error else q

    return rate_of


@pytest.mark.parametrize("n", [400, 1000])
def test_a_long_correct_solution_s_rising_finish_curve_is_not_read_as_a_slip(n):
    # a correct 400-step solution once had step 36 labeled bad: its early prefixes finish less often
    # than its late ones only because more steps are left to get wrong
    cfg = ChangepointSettings()
    search = changepoint_search([f"step {i}\n" for i in range(n)], "correct", cfg, check=True)
    ann, asked, counts = drive(search, _clean_curve(n, 0.001)(n), random.Random(1))
    assert len({step for step, _ in asked[: cfg.check_prefixes]}) == cfg.check_prefixes  # the check: 8 probes
    assert _new_rollouts(asked) <= cfg.check_prefixes * cfg.batch + cfg.localize_max_rollouts
    labels = apply_rule(ann, "hard").labels
    assert False not in labels and UNDECIDED_UNLOCATED not in ann.unlabeled_reason
    assert sum(x is True for x in labels) >= n // 2


@pytest.mark.parametrize(("n", "error"), [(300, 120), (1000, 450)])
def test_a_long_incorrect_solution_is_probed_and_never_labeled_from_the_prior_alone(n, error):
    # at 300+ steps the search once spent 0 rollouts and named a first error near step 37
    cfg = ChangepointSettings()
    ann, asked, _ = drive(
        changepoint_search([f"step {i}\n" for i in range(n)], "incorrect", cfg),
        _clean_curve(n, 0.001)(error),
        random.Random(2),
    )
    assert _new_rollouts(asked) > 0
    labels = apply_rule(ann, "hard").labels
    first_bad = next((i for i, x in enumerate(labels) if x is False), None)
    assert all(x is not True for x in labels[error:])  # no good label on or after the error
    if first_bad is not None:
        assert first_bad >= error and ann.mc_total[first_bad] > 0  # measured, never placed by the prior
    if n == 300:
        assert first_bad == error  # within the budget the error is pinned


def test_a_bad_label_needs_a_measurement_of_its_own_prefix():
    ev = Evidence.empty(10, "incorrect")
    p_good = np.array([0.99, 0.99, 0.98, 0.05, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert unbacked_bad(p_good, ev, 0.9) == 4  # step 3 bad means prefix 4 (steps 0..3) holds the error
    ev.graded[4] = 4
    assert unbacked_bad(p_good, ev, 0.9) is None
    assert unbacked_bad(np.array([0.99] * 9 + [0.0]), Evidence.empty(10, "incorrect"), 0.9) is None  # the verdict
    assert unbacked_bad(np.array([0.99] * 10), Evidence.empty(10, "correct"), 0.9) is None  # no bad label
    # a posterior sure of an error at step 3 with no rollouts there: nothing from step 3 on is labeled
    from prm_synth.annotate.annotation import Annotation
    from prm_synth.annotate.changepoint import label

    ev = Evidence.empty(10, "incorrect")
    ev.correct[1], ev.graded[1] = 12, 12
    ev.correct[7], ev.graded[7] = 0, 12
    post = Posterior(ev, Priors())
    ann = Annotation.empty("binary", 10)
    label(ann, post, ChangepointSettings(), "decided", "incorrect")
    first_bad = next((i for i in range(10) if ann.decided.get(i) is False), None)
    assert first_bad is None or ev.graded[first_bad + 1] > 0 or first_bad == 9


@settings(max_examples=40, deadline=None)
@given(n=st.integers(40, 1500), errors=st.floats(0.1, 2.0), seed=st.integers(0, 1000))
def test_a_clean_curve_rising_at_the_solution_s_hazard_is_never_a_repaired_slip(n, errors, seed):
    # a clean solution's prefixes finish at (1 - h)^(steps left): probed at the checked prefixes and a
    # few late ones, with the counts a clean curve gives, no prefix is a dip
    hazard = errors / n
    rng = random.Random(seed)
    ev = Evidence.empty(n, "correct")
    for j in [*early_prefixes(n, 8), *rng.sample(range(n // 2, n), 4)]:
        rate = (1 - hazard) ** (n - j)
        ev.graded[j] = 8
        ev.correct[j] = round(8 * rate)
    s = ChangepointSettings()
    assert repaired_slip(ev, s.slip_significance, hazard, s.slip_min_later) is None
    dipped = ev.plus(early_prefixes(n, 8)[2], -int(ev.correct[early_prefixes(n, 8)[2]]), 0)  # that prefix: 0 of 8
    if errors <= 0.5:  # a curve near 1: a prefix that never finishes is a slip the policy repaired
        assert repaired_slip(dipped, s.slip_significance, hazard, s.slip_min_later) == early_prefixes(n, 8)[2]


def test_a_probe_that_brings_nothing_new_ends_the_search_instead_of_asking_forever():
    search = changepoint_search(STEPS[:12], "incorrect", ChangepointSettings())
    probes = next(search)
    asked = 0
    with pytest.raises(StopIteration) as stop:
        while asked < 100:
            asked += 1
            probes = search.send([ProbeResult(p.step, 0, 0) for p in probes])  # an engine that returns nothing
    assert asked == 1
    ann = stop.value.value
    assert all(label is None for label in apply_rule(ann, "hard").labels[:-1])


def _fixed_answers(rate, seed: int):
    """Probe answers that depend on (prefix, sample index) only: the i-th rollout of a prefix is the same
    whichever search, or phase of a search, asks for it (as the scheduler's estimates are)."""

    def answer(probes):
        results = []
        for p in probes:
            hits = sum(random.Random(f"{seed}/{p.step}/{i}").random() < rate(p.step) for i in range(p.k))
            results.append(ProbeResult(p.step, hits, p.k))
        return results

    return answer


def _finish(search, answer):
    """Run a search to its end; a `Wait` is answered with its future's result."""
    try:
        probes = next(search)
        while True:
            probes = search.send(probes.future.result() if isinstance(probes, Wait) else answer(probes))
    except StopIteration as stop:
        return stop.value


class _ReadyPool:
    """A pool whose priors are the defaults and ready at once: waiting for it must change nothing."""

    def __init__(self) -> None:
        self.future: Future[Priors] = Future()
        self.future.set_result(Priors())
        self.deposited: list[str] = []

    def deposit(self, key: str, ev: Evidence | None) -> None:
        self.deposited.append(key)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 20), check=st.booleans())
def test_a_search_that_waits_for_the_same_priors_is_the_search_that_never_waits(seed, n, check):
    rng = random.Random(seed)
    _, verdict, rate = _world(rng, n, rng.uniform(0.03, 0.2), 0.1)
    # the same settings in both phases too: waiting itself changes nothing
    same = ChangepointSettings()
    answer, cfg = _fixed_answers(rate, seed), replace(same, second_phase_localize_min_gain=same.localize_min_gain)
    whole = _finish(changepoint_search(STEPS[:n], verdict, cfg, check=check), answer)
    pool = _ReadyPool()
    waited = _finish(changepoint_search(STEPS[:n], verdict, cfg, check=check, pool=pool, key="s"), answer)
    assert pool.deposited == ["s"]  # its first phase handed in once, at the wait or at its end
    assert waited.p_good == whole.p_good
    assert (waited.label_source, waited.unlabeled_reason) == (whole.label_source, whole.unlabeled_reason)
    assert (waited.mc_correct, waited.mc_total) == (whole.mc_correct, whole.mc_total)


def test_the_second_phase_localizes_only_while_a_probe_is_worth_its_own_threshold():
    # a solution the search pins when it keeps probing (luck 0.3, the error at step 10 of 16): a
    # search whose second phase asks more of a localizing probe than any is worth stops right after
    # its wait, having asked what the search that never waits asked until then
    _, verdict, rate = _world(random.Random(21), 16, 0.1, 0.3)
    cfg = ChangepointSettings()
    asked: dict[str, list[tuple[int, int]]] = {"whole": [], "strict": []}

    def recorded(log: list[tuple[int, int]]):
        answer = _fixed_answers(rate, 21)

        def record(probes):
            log.extend((p.step, p.k) for p in probes)
            return answer(probes)

        return record

    whole = _finish(changepoint_search(STEPS[:16], verdict, cfg), recorded(asked["whole"]))
    strict = replace(cfg, second_phase_localize_min_gain=1.0)
    waited = _finish(
        changepoint_search(STEPS[:16], verdict, strict, pool=_ReadyPool(), key="s"), recorded(asked["strict"])
    )
    assert whole.evidence.stop == "decided" and whole.decided.get(10) is False and whole.decided.get(9) is True
    assert waited.evidence.stop == UNDECIDED_UNINFORMATIVE
    assert asked["strict"] == asked["whole"][: len(asked["strict"])]
    assert cfg.pool_after <= _new_rollouts(asked["strict"]) < _new_rollouts(asked["whole"])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), order=st.permutations(range(6)))
def test_the_first_phase_pool_is_ready_once_every_member_is_in_whatever_the_order(seed, order):
    rng = random.Random(seed)
    evidence = {}
    for i in range(6):
        ev = Evidence.empty(8, "incorrect")
        for j in rng.sample(range(8), 3):
            ev.graded[j] = 4
            ev.correct[j] = rng.randint(0, 4)
        evidence[f"s{i}"] = ev
    cfg = ChangepointSettings()
    pool = FirstPhasePool(cfg, ["p0", "p1"])  # members: p0's s0, s1 and p1's s2 (s3 refused); p2 is not
    pool.solutions("p0", ["s0", "s1"])
    for i in order:
        if i in (4, 5):
            pool.deposit(f"s{i}", evidence[f"s{i}"])  # not a member: never waited for, never pooled
        elif i == 3:
            pool.deposit("s3", None)
    assert not pool.future.done()
    pool.solutions("p1", ["s2", "s3"])
    pool.solutions("p2", ["s4", "s5"])
    for i in order:
        if i < 3:
            assert not pool.future.done()
            pool.deposit(f"s{i}", evidence[f"s{i}"])
    assert pool.future.done()
    expected = second_phase_priors([evidence["s0"], evidence["s1"], evidence["s2"]], cfg)
    got = pool.future.result()
    np.testing.assert_array_equal(got.q, expected.q)  # in key order: the same numbers in any order
    np.testing.assert_array_equal(got.p, expected.p)
    assert got.k == expected.k


def _answers_with_unknowns(rate, seed: int, unknown: float):
    """Probe answers fixed per (prefix, sample index), a share `unknown` of them ungradable, and every
    probe recorded (what the search asked, in order)."""
    asked: list[tuple[int, int]] = []

    def answer(probes):
        results = []
        for p in probes:
            asked.append((p.step, p.k))
            draws = [random.Random(f"{seed}/{p.step}/{i}").random() for i in range(p.k)]
            lost = sum(d < unknown for d in draws)
            hits = sum(unknown <= d < unknown + (1 - unknown) * rate(p.step) for d in draws)
            results.append(ProbeResult(p.step, hits, p.k, lost))
        return results

    return answer, asked


def _row_of(ann):
    return (
        ann.p_good,
        ann.label_source,
        ann.unlabeled_reason,
        ann.decided,
        ann.mc_correct,
        ann.mc_total,
        ann.mc_unknown,
    )


def _searched(n, verdict, rate, seed, unknown, check, memo, priors=None, pool=None, relabeled=False):
    answer, asked = _answers_with_unknowns(rate, seed, unknown)
    search = changepoint_search(
        STEPS[:n],
        verdict,
        ChangepointSettings(),
        priors,
        check=check,
        pool=pool,
        key="s",
        relabeled=relabeled,
        memo=memo,
    )
    return _finish(search, answer), asked


@settings(max_examples=25, deadline=None)
@given(
    seeds=st.lists(st.integers(0, 10_000), min_size=2, max_size=4),
    n=st.integers(1, 20),
    check=st.booleans(),
    unknown=st.sampled_from([0.0, 0.2]),
    capacity=st.sampled_from([3, 64, 4096]),
)
def test_a_remembered_decision_is_the_one_computed_afresh(seeds, n, check, unknown, capacity):
    # solutions of one length share the memo (and, under the default priors, their first decisions);
    # each is searched twice, the second time every decision is remembered unless the memo is too small
    memo = DecisionMemo(capacity)
    for seed in seeds:
        rng = random.Random(seed)
        _, verdict, rate = _world(rng, n, rng.uniform(0.03, 0.2), 0.1)
        fresh, fresh_asked = _searched(n, verdict, rate, seed, unknown, check, memo=None)
        for _ in range(2):
            remembered, asked = _searched(n, verdict, rate, seed, unknown, check, memo=memo)
            assert asked == fresh_asked  # the same probes, in the same order
            assert _row_of(remembered) == _row_of(fresh)
            assert remembered.evidence.stop == fresh.evidence.stop
        assert len(memo) <= capacity
    if capacity == 4096:
        assert memo.hits > 0  # the repeated searches were answered from the memo


def test_the_memo_never_answers_for_other_priors():
    # the same evidence under priors that expect a lucky policy, and under the default: different
    # searches, each the same with a shared memo as without one
    lucky_q = np.where(Q_GRID >= 0.6, 1.0, 1e-3)
    lucky = Priors(q=lucky_q / lucky_q.sum())
    memo = DecisionMemo()
    for seed in range(6):
        rng = random.Random(seed)
        _, verdict, rate = _world(rng, 12, 0.1, 0.1)
        runs = {}
        for name, priors in (("default", None), ("lucky", lucky), ("lucky copy", replace(lucky))):
            fresh, fresh_asked = _searched(12, verdict, rate, seed, 0.0, False, memo=None, priors=priors)
            remembered, asked = _searched(12, verdict, rate, seed, 0.0, False, memo=memo, priors=priors)
            assert (asked, _row_of(remembered)) == (fresh_asked, _row_of(fresh)), name
            runs[name] = asked
        assert runs["lucky"] == runs["lucky copy"]
    assert any(
        _searched(12, "incorrect", lambda j: 0.5, s, 0.0, False, None)[1]
        != _searched(12, "incorrect", lambda j: 0.5, s, 0.0, False, None, priors=lucky)[1]
        for s in range(6)
    )


def test_the_memo_keeps_no_more_than_its_capacity_whatever_it_is_given():
    memo = DecisionMemo(capacity=16)
    for seed in range(30):
        rng = random.Random(seed)
        n = rng.randint(2, 20)
        _, verdict, rate = _world(rng, n, rng.uniform(0.03, 0.2), 0.1)
        _searched(n, verdict, rate, seed, 0.1, seed % 3 == 0, memo=memo)
        assert len(memo) <= 16
    assert len(memo) == 16 and memo.misses > 16  # it was filled past its size, and the oldest went
    with pytest.raises(ValueError, match="at least one"):
        DecisionMemo(0)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 20), check=st.booleans())
def test_a_search_left_to_relabel_gives_the_rows_of_one_that_labeled_itself(seed, n, check):
    rng = random.Random(seed)
    _, verdict, rate = _world(rng, n, rng.uniform(0.03, 0.2), 0.1)
    pools = {True: _ReadyPool(), False: _ReadyPool()}
    labeled = {
        left: _searched(n, verdict, rate, seed, 0.1, check, DecisionMemo(), pool=pools[left], relabeled=left)[0]
        for left in (True, False)
    }
    assert labeled[True].p_good is None and labeled[False].p_good is not None  # left for `relabel` to label
    relabel([labeled[True]], ChangepointSettings())
    relabel([labeled[False]], ChangepointSettings())
    assert _row_of(labeled[True]) == _row_of(labeled[False])


_STATE = st.fixed_dictionaries(
    {
        "n": st.integers(1, 6),
        "verdict": st.sampled_from(["correct", "incorrect", "unknown"]),
        "checked": st.booleans(),
        "counts": st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)), min_size=6, max_size=6),
        "spent": st.integers(0, 40),
        "may_wait": st.booleans(),
    }
)


def _state(s):
    ev = Evidence.empty(s["n"], s["verdict"])
    ev.checked = s["checked"]
    samples = np.zeros(s["n"], dtype=np.int64)
    for j, (c, g, lost) in enumerate(s["counts"][: s["n"]]):
        ev.correct[j], ev.graded[j], samples[j] = c, c + g, c + g + lost
    return ev, samples, s["spent"], s["may_wait"]


def _described(ev, samples, spent, may_wait):
    return (ev.n, ev.verdict, ev.checked, ev.correct.tolist(), ev.graded.tolist(), samples.tolist(), spent, may_wait)


@settings(max_examples=300, deadline=None)
@given(a=_STATE, b=_STATE)
def test_two_states_share_a_memo_key_only_when_the_decision_reads_the_same(a, b):
    x, y = _state(a), _state(b)
    assert (state_key(*x) == state_key(*y)) == (_described(*x) == _described(*y))
    ev, samples, spent, may_wait = x
    key = state_key(ev, samples, spent, may_wait)
    ev.correct[0] += 1
    samples[0] += 1  # the search updates its arrays in place: the key it took before must not follow
    assert key != state_key(ev, samples, spent, may_wait) and key == state_key(*_state(a))


def test_relabeling_solutions_with_the_same_evidence_labels_each_as_if_alone():
    # a shard where several searches measured the same counts (the same world searched again, and the
    # decided correct answers of short solutions): each row is what its own posterior gives
    anns = []
    for seed in (6, 2, 3, 6, 2, 24, 6):
        rng = random.Random(seed)
        n = rng.randint(3, 12)
        _, verdict, rate = _world(rng, n, rng.uniform(0.03, 0.2), 0.1)
        anns.append(_searched(n, verdict, rate, seed, 0.1, seed == 2, DecisionMemo(), relabeled=True)[0])
    # the same counts, another reason to stop (as a search that ran out of budget there would): its own
    anns[3].evidence.stop = "undecided_budget" if anns[0].evidence.stop != "undecided_budget" else "decided"
    alone = copy.deepcopy(anns)
    cfg = ChangepointSettings()
    priors = relabel(anns, cfg)
    posts = [Posterior(a.evidence, priors) for a in alone]
    checked = [p for p in posts if p.evidence.checked]
    rate, positions = process_error_rate(checked, cfg), hidden_error_positions(checked, cfg)
    unmodelled = unmodelled_error_rate(len(checked), len(positions), cfg.tested_share_prior)
    assert checked and len({str(_row_of(a)[4:]) for a in anns}) < len(anns)  # a checked solution; repeats
    for ann, own, post in zip(anns, alone, posts, strict=True):
        label_again(own, post, cfg, own.evidence.stop, own.evidence.verdict, rate, positions, unmodelled)
        assert _row_of(ann) == _row_of(own)


def test_the_decisions_of_a_priors_object_go_with_it():
    # a shard's pooled priors die with the shard: their decisions must not stay behind (memory would
    # grow with the shards done); the default priors' stay, kept for the next solution
    memo = DecisionMemo()
    shard_priors = pool_priors(
        [_searched(8, "incorrect", lambda j: 0.9 if j < 5 else 0.1, 3, 0.0, False, memo)[0].evidence],
        ChangepointSettings(),
        (),
    )
    _searched(8, "incorrect", lambda j: 0.9 if j < 5 else 0.1, 3, 0.0, False, memo, priors=shard_priors)
    default_only = DecisionMemo()
    _searched(8, "incorrect", lambda j: 0.9 if j < 5 else 0.1, 3, 0.0, False, default_only)
    assert len(memo) > len(default_only) > 0
    del shard_priors
    gc.collect()
    assert len(memo) == len(default_only)


def test_a_copied_or_unpickled_priors_object_is_never_taken_for_another():
    # a priors object from another process carries that process's token: here it must get its own, or
    # the memo could answer for it with the decisions of whichever local priors has that number
    lucky_q = np.where(Q_GRID >= 0.6, 1.0, 1e-3)
    lucky = Priors(q=lucky_q / lucky_q.sum())
    others = [pickle.loads(pickle.dumps(lucky)), copy.copy(lucky), copy.deepcopy(lucky), replace(lucky)]
    assert len({p.token for p in [lucky, *others]}) == 5
    for other in others:
        np.testing.assert_array_equal(other.q, lucky.q)
        assert other.k == lucky.k


def test_probes_are_valued_under_no_more_overdispersion_than_the_default() -> None:
    # a shard whose first phases chose k 12 (they barely tell k apart) must not make every probe look
    # worthless: the search values probes at the default k, and reads decided / labels at the shard's
    overdispersed = replace(DEFAULT_PRIORS, k=12.0)
    value = probe_value_priors(overdispersed)
    assert value.k == DEFAULT_PRIORS.k
    assert value.q is overdispersed.q and value.p is overdispersed.p
    steady = replace(DEFAULT_PRIORS, k=400.0)
    assert probe_value_priors(steady) is steady
    assert probe_value_priors(DEFAULT_PRIORS) is DEFAULT_PRIORS

    # an early error in a long solution, not pinned: under k 12 no probe is worth the localizing
    # threshold; valued at the default k one is, and the search asks for it
    settings = ChangepointSettings()
    ev = Evidence.empty(20, "incorrect")
    for j, (c, g) in {2: (0, 8), 9: (0, 8), 15: (1, 4)}.items():
        ev.correct[j], ev.graded[j] = c, g
    samples = ev.graded.copy()
    post = Posterior(ev, overdispersed)
    interval = open_interval(post.p_good, settings.confidence, settings.bad_confidence)
    assert interval
    room = settings.localize_max_rollouts - int(samples.sum())
    candidates = (settings.probe_levels, settings.ambiguous_clean, False)
    _, under_own = best_probe(
        post, overdispersed, settings.batch, room, settings.localize_cap, _ends(interval), *candidates
    )
    assert under_own < settings.localize_min_gain
    decision = decide(post, samples, int(samples.sum()), settings, may_wait=False)
    assert not decision.stop and decision.prefix >= 0
    # the labeling posterior stays the shard's: the probe scores came from a posterior of its own
    assert post.priors is overdispersed and post.under(overdispersed) is post
    assert post.under(value) is post.under(value)
    np.testing.assert_allclose(post.under(value).p_good, Posterior(ev, value).p_good)
