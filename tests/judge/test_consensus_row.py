"""What consensus leaves in the row: the soft posterior's per-step confidence (`consensus_p_good`), which
`export --min-confidence` reads for the labels it set, and the labels as labeled where it changed them
(`labels_before_consensus`), from which `eval dataset` counts "before consensus"."""

from __future__ import annotations

import pytest
from _prm_helpers import labeled_row
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import ConsensusConfig
from prm_synth.export.rows import with_min_confidence
from prm_synth.judge.accuracy import JudgeAccuracy
from prm_synth.judge.consensus import apply_consensus
from prm_synth.judge.posterior import posterior, prefix_confidence
from prm_synth.products.evaluate import as_labeled
from prm_synth.records import RECORD_SCHEMA, LabeledRecord

T, F, N = True, False, None


def row(labels, p_good, votes, right=False) -> LabeledRecord:
    return labeled_row(labels, steps=["a\n", "b\n", "c\n", "d"], final_correct=right, judge_votes=votes, p_good=p_good)


def test_a_soft_completed_row_carries_the_posteriors_confidence_and_its_labels_as_labeled():
    record = row([T, N, N, F], [0.99, 0.6, 0.3, 0.0], [1, 1, 1])
    (kept,), _, stats = apply_consensus([record], ConsensusConfig(confidence=0.9))
    assert stats.completed == 1 and kept.labels == [T, F, N, F]
    assert kept.labels_before_consensus == [T, N, N, F]
    assert kept.consensus_p_good is not None and kept.consensus_p_good[0] >= 0.9 >= kept.consensus_p_good[1]
    # the rollouts' p_good alone (0.6 at step 1) would drop the completed bad label at 0.9; the posterior keeps it
    as_row = kept.to_row()
    assert with_min_confidence(as_row, 0.9)["labels"][:2] == [T, F]
    # (a label the consensus set without a posterior, under `agree` or `judge-only`, counts as certain:
    # export/rows.py label_probability; one the rollouts set is read at its p_good)
    measured = [source if source != "consensus" else "test" for source in as_row["label_source"]]
    assert with_min_confidence({**as_row, "consensus_p_good": None, "label_source": measured}, 0.9)["labels"][1] is None
    assert with_min_confidence({**as_row, "consensus_p_good": None}, 0.9)["labels"][:2] == [T, F]
    assert with_min_confidence(as_row, 0.99999)["labels"][1] is None  # and not past what the posterior says
    # eval dataset's "before consensus" reads the row as labeled
    assert as_labeled(as_row)["labels"] == [T, N, N, F] and as_labeled(as_row)["first_error_mc"] == 3
    assert {"consensus_p_good", "labels_before_consensus"} <= set(RECORD_SCHEMA.names)


def test_an_unchanged_row_keeps_no_copy_of_its_labels():
    record = row([T, F, N, N], [0.999, 0.0005, 0.0, 0.0], [])
    (kept,), _, _ = apply_consensus([record], ConsensusConfig())
    assert kept.labels_before_consensus is None and as_labeled(kept.to_row())["labels"] == [T, F, N, N]


def test_min_confidence_is_checked_against_the_posterior_under_soft():
    record = row([T, N, N, F], [0.99, 0.6, 0.3, 0.0], [1, 1, 1])
    (kept,), _, _ = apply_consensus([record], ConsensusConfig(confidence=0.9), min_confidence=0.9999)
    # the votes' first error (step 1) is not 0.9999 sure: the row keeps only the labels that are
    assert kept.labels == [T, N, N, F] and kept.unlabeled_reason[1:3] == ["below_target"] * 2
    unsure = row([N, N, N, N], [0.7, 0.6, 0.5, 0.4], [0, 2, -1])
    _, (rejected,), _ = apply_consensus([unsure], ConsensusConfig(confidence=0.9), min_confidence=0.9999)
    assert rejected.reason == "low_confidence" and "posterior" in (rejected.detail or "")


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8), st.lists(st.integers(-1, 7), max_size=4))
@settings(max_examples=100, deadline=None)
def test_prefix_confidence_is_a_falling_survival_curve_of_the_posterior(p_good, votes):
    n = len(p_good)
    record = row([N] * n, p_good, [v for v in votes if v < n])
    record.steps = ["x\n"] * n
    post = posterior(record, JudgeAccuracy(recall=0.7, clean=0.7, miss=0.15))
    curve = prefix_confidence(post)
    assert len(curve) == n and all(a >= b - 1e-12 for a, b in zip(curve, curve[1:], strict=False))
    assert curve[-1] == pytest.approx(post[-1]) and curve[0] == pytest.approx(1.0 - post[0])
