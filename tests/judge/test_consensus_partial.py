"""Rows kept with only the labels that reach `consensus.target_precision` (judge/target.hold_to_target):
which labels (`estimate.sure_labels`), what they are expected to be worth (`estimate.expectations`), what
the row holds afterwards, and what a trainer's view of such a row is."""

from __future__ import annotations

import pytest
from _prm_helpers import labeled_row
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import ConsensusConfig
from prm_synth.export.rows import SkipRow, to_trl
from prm_synth.judge.consensus import apply_consensus
from prm_synth.judge.estimate import expectations, label_expectations, sure_labels
from prm_synth.judge.target import pool_holds

T, F, N = True, False, None

posteriors = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=9).filter(lambda w: sum(w) > 1e-6)


def normalized(weights: list[float]) -> list[float]:
    total = sum(weights)
    return [w / total for w in weights]


@given(posteriors, st.floats(0.5, 0.999), st.data())
@settings(max_examples=200, deadline=None)
def test_every_sure_label_reaches_the_level_on_its_own(weights, level, data):
    post = normalized(weights)
    n = len(post) - 1
    measured = data.draw(st.lists(st.sampled_from([T, F, N]), min_size=n, max_size=n))
    labels = sure_labels(post, measured, level)
    for i, label in enumerate(labels):
        after = sum(post[i + 1 :])  # P(first error after step i), index n: none
        if label is True:
            assert after >= level - 1e-9
        elif label is False:
            assert 1.0 - after >= level - 1e-9
    good = [i for i, label in enumerate(labels) if label is True]
    assert good == list(range(len(good)))  # good labels are a prefix: a later one needs every earlier step right
    bad = [i for i, label in enumerate(labels) if label is False]
    # after the first bad label, only the steps the rollouts labeled are labeled bad (as consensus.follow does)
    assert all(measured[i] is not None for i in bad[1:])
    # one row's expected right labels never exceed its labels
    e = expectations(post, labels)
    assert e["good_expected"] <= e["good_labels"] + 1e-9 and e["bad_expected"] <= e["bad_labels"] + 1e-9
    assert e["good_expected"] >= level * e["good_labels"] - 1e-9 and e["bad_expected"] >= level * e["bad_labels"] - 1e-9


@given(posteriors, st.data())
@settings(max_examples=200, deadline=None)
def test_the_general_expectation_agrees_with_the_whole_row_one(weights, data):
    post = normalized(weights)
    n = len(post) - 1
    first_error = data.draw(st.integers(-1, n - 1))
    end = n if first_error == -1 else first_error
    whole = label_expectations(post, first_error)
    labels = [T if i < end else F for i in range(n)]
    assert expectations(post, labels) == pytest.approx(whole)


def row(labels, p_good, votes, right=False):
    return labeled_row(labels, steps=["a\n", "b\n", "c\n", "d"], final_correct=right, judge_votes=votes, p_good=p_good)


def test_a_row_without_a_sure_first_error_keeps_its_sure_labels_and_a_trainer_sees_its_prefix():
    # the votes split between steps 1 and 2: the rollouts are sure of step 0 (good), and together they put
    # the first error at or before step 2 surely, but not at step 1 or at step 2
    record = row([T, N, N, F], [0.999, 0.6, 0.3, 0.0], [1, 2, -1])
    (kept,), rejected, stats = apply_consensus([record], ConsensusConfig())
    assert not rejected
    assert kept.labels == [T, N, F, F] and kept.unlabeled_reason == [None, "below_target", None, None]
    assert kept.first_error_mc == 2 and kept.label_source[2] == "consensus"
    assert kept.labels_before_consensus == [T, N, N, F]
    # the run's estimate counts exactly the labels kept
    assert (stats.estimate["good_labels"], stats.estimate["bad_labels"]) == (1.0, 2.0)
    # a trainer's view stops at the first unlabeled step: only the sure good prefix is supervised
    assert to_trl({**kept.to_row(), "question": "q"})["labels"] == [True]


def test_a_row_with_no_label_at_the_target_is_rejected_and_views_skip_one_without_a_first_label():
    record = row([N, N, N, N], [0.7, 0.6, 0.5, 0.4], [0, 2, -1])
    kept, (rejected,), _ = apply_consensus([record], ConsensusConfig())
    assert not kept and rejected.reason == "low_confidence"
    with pytest.raises(SkipRow):
        to_trl({"question": "q", "steps": ["a\n", "b\n"], "labels": [None, False]})


def pooled(*rows: tuple[list[float], list[bool | None]]) -> dict[str, float]:
    sums: dict[str, float] = {}
    for post, labels in rows:
        for k, v in expectations(post, labels).items():
            sums[k] = sums.get(k, 0.0) + v
    return sums


def test_the_pool_is_held_with_a_margin_for_rows_that_stand_or_fall_together():
    # one good label sure at 0.999: held, though one standard deviation of a lone label exceeds 3% of it
    assert pool_holds(pooled(([0.001, 0.999], [T])), "good", 0.97)
    # 300 sure good labels beside one 10-step row that is clean at 0.99: kept
    sure = ([0.0] * 10 + [1.0], [T] * 10)
    lumpy = ([0.01] + [0.0] * 9 + [0.99], [T] * 10)
    assert pool_holds(pooled(*[sure] * 30, lumpy), "good", 0.97)
    # the same row at 0.95 among few sure labels: at its expectation the pool is at 0.97 or more, but one
    # miss makes all ten of its labels wrong, and one standard deviation of that exceeds the target's room
    shaky = ([0.05] + [0.0] * 9 + [0.95], [T] * 10)
    few = pooled(*[sure] * 2, shaky)
    assert few["good_labels"] - few["good_expected"] <= 0.03 * few["good_labels"]  # the expectation holds
    assert not pool_holds(few, "good", 0.97)
    assert pool_holds(pooled(*[sure] * 30, shaky), "good", 0.97)  # enough sure labels beside it: kept


shard_rows = st.lists(
    st.tuples(
        st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6),
        st.lists(st.integers(-1, 5), max_size=3),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


@given(shard_rows)
@settings(max_examples=60, deadline=None)
def test_every_row_is_kept_whole_kept_with_its_sure_labels_or_rejected_with_a_reason(rows):
    records = []
    for i, (p_good, votes, right) in enumerate(rows):
        n = len(p_good)
        p = sorted(p_good, reverse=True)
        labels = [True if x >= 0.99 else False if x <= 0.01 else None for x in p]
        if False in labels:  # a labeler's labels: nothing good after the first bad step
            first = labels.index(False)
            labels = labels[:first] + [None if x is None else False for x in labels[first:]]
        r = labeled_row(labels, id=f"p{i}-s0", problem_id=f"p{i}", final_correct=right, p_good=p)
        r.steps, r.judge_votes = [f"step {k}\n" for k in range(n)], [v for v in votes if v < n]
        records.append(r)
    kept, rejected, stats = apply_consensus(records, ConsensusConfig())
    assert len(kept) + len(rejected) == len(records)  # nothing lost
    assert all(r.reason == "low_confidence" for r in rejected)
    for r in kept:
        assert len(r.labels) == len(r.steps) == len(r.unlabeled_reason or [None] * len(r.labels))
        reasons = r.unlabeled_reason or [None] * len(r.labels)
        # a label and a reason never both, and below_target only on rows consensus kept partly
        assert all((label is None) == (why is not None) for label, why in zip(r.labels, reasons, strict=True) if why)
        if "below_target" in reasons:
            assert any(label is not None for label in r.labels)
            good = [i for i, label in enumerate(r.labels) if label is True]
            assert good == list(range(len(good)))
            assert r.first_error_mc == next((i for i, label in enumerate(r.labels) if label is False), -1)
    # the run's estimate counts exactly the kept labels
    assert stats.estimate.get("good_labels", 0.0) == sum(r.labels.count(True) for r in kept)
    assert stats.estimate.get("bad_labels", 0.0) == sum(r.labels.count(False) for r in kept)
