"""A minimum confidence on labels: views stop before a doubtful step, consensus rejects doubtful rows."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_consensus import rec as record

from prm_synth.config import ConfigError, ConsensusConfig, validate_config
from prm_synth.export.rows import SkipRow, supervised_steps, with_min_confidence
from prm_synth.judge.consensus import apply_consensus

ROW = {
    "id": "p-s0",
    "problem_id": "p",
    "question": "q",
    "steps": ["a\n", "b\n", "c\n", "d"],
    "labels": [True, True, False, None],
    "label_source": ["test"] * 3 + ["none"],
    "p_good": [0.99, 0.8, 0.02, None],
}


def test_a_view_stops_before_the_first_doubtful_label():
    assert supervised_steps(ROW)[1] == [True, True, False]
    assert supervised_steps(with_min_confidence(ROW, 0.75))[1] == [True, True, False]
    assert supervised_steps(with_min_confidence(ROW, 0.9))[1] == [True]  # 0.8 < 0.9: stop before step 1
    with pytest.raises(SkipRow):
        supervised_steps(with_min_confidence(ROW, 0.999))


def test_rows_without_p_good_keep_labels_only_without_a_threshold():
    row = ROW | {"p_good": None}
    assert with_min_confidence(row, 0.0) is row
    assert with_min_confidence(row, 0.5)["labels"] == [None] * 4


@settings(deadline=None)  # a busy machine: no per-example time limit
@given(
    st.lists(st.tuples(st.sampled_from([True, False, None]), st.floats(0, 1)), min_size=1, max_size=12),
    st.floats(0.5, 1.0),
)
def test_a_threshold_only_removes_labels_never_flips_them(steps, threshold):
    row = ROW | {"steps": ["s"] * len(steps), "labels": [s[0] for s in steps], "p_good": [s[1] for s in steps]}
    kept = with_min_confidence(row, threshold)["labels"]
    for before, after, (_, p) in zip(row["labels"], kept, steps, strict=True):
        assert after in (before, None)
        if after is not None:
            assert (p if after else 1 - p) >= threshold


def test_consensus_rejects_rows_labeled_below_the_minimum_confidence():
    sure = dataclasses.replace(record("a-s0", 2, 2, [2]), p_good=[0.99, 0.97, 0.01, 0.01])
    doubtful = dataclasses.replace(record("b-s0", 2, 2, [2]), p_good=[0.99, 0.6, 0.01, 0.01])
    kept, rejected, stats = apply_consensus([sure, doubtful], ConsensusConfig(policy="agree"), min_confidence=0.9)
    assert [r.id for r in kept] == ["a-s0"]
    assert [(r.id, r.reason) for r in rejected] == [("b-s0", "low_confidence")]
    assert stats.rejected_by_reason == {"low_confidence": 1}
    kept, _, _ = apply_consensus(
        [sure, doubtful], ConsensusConfig(policy="agree")
    )  # no threshold: both agree, both kept
    assert len(kept) == 2


def test_min_confidence_is_a_bounded_config_field():
    base = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}}
    assert validate_config(base | {"labels": {"min_confidence": 0.9}}).labels.min_confidence == 0.9
    with pytest.raises(ConfigError, match="labels.min_confidence"):
        validate_config(base | {"labels": {"min_confidence": 1.5}})


def test_the_card_reports_what_a_minimum_confidence_leaves(tmp_path):
    """A calibrated simulated run exported at 0.95: the card names the threshold and the coverage left."""
    from _simulated_run import write_run

    from prm_synth.export.hub import export_to_dir

    data = {
        "problems": {"kind": "builtin", "count": 40, "min_ops": 6, "max_ops": 10},
        "policy": {"kind": "simulated", "recover": 0.1},
        "sampling": {"samples_per_problem": 2},
    }
    write_run(tmp_path / "run", data)
    loose = export_to_dir(tmp_path / "run", tmp_path / "loose", ["trl"]).views["trl"]
    strict_out = tmp_path / "strict"
    from prm_synth.export.hub import plan_export

    plan = plan_export(tmp_path / "run", ["trl"], min_confidence=0.95)
    strict = export_to_dir(tmp_path / "run", strict_out, plan=plan).views["trl"]
    steps = sum(s.steps for s in strict.splits.values())
    before = sum(s.steps_before_confidence for s in strict.splits.values())
    assert steps <= before and steps <= sum(s.steps for s in loose.splits.values())
    assert f"p ≥ 0.95: kept {steps} of {before} supervised steps" in (strict_out / "README.md").read_text()
