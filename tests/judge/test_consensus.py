"""The consensus filter: keep/reject decisions with reasons, nothing lost, count-only statistics."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from typing import Any

import pytest
from _prm_helpers import labeled_row
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from prm_synth.config import ConsensusConfig, validate_config
from prm_synth.judge.accuracy import JudgeAccuracy
from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.judge.consensus import (
    TIE_COMPLETES,
    agrees,
    agrees_with_labels,
    apply_consensus,
    decide,
    record_from_payload,
    rollouts_support,
)
from prm_synth.judge.posterior import first_error_prior, open_interval, posterior
from prm_synth.records import ConsensusStats, LabeledRecord, ShardStats
from prm_synth.store.layout import ShardEntry, totals


def rec(
    rid: str,
    mc: int,
    judge: int | None,
    votes: list[int] | None = None,
    source: str = "gsm8k",
    labels: list[bool | None] | None = None,
    p_good: list[float] | None = None,
) -> LabeledRecord:
    """A four-step row; its labels are the MC first error's (every step labeled) unless given."""
    if votes is None:
        votes = [] if judge is None else [judge]
    if labels is None:
        labels = [mc == -1 or i < mc for i in range(4)]
    return labeled_row(
        list(labels),
        id=rid,
        problem_id=rid.split("-")[0],
        source=source,
        steps=["a\n", "b\n", "c\n", "d"],
        final_correct=mc == -1,
        mc_values=[1.0, 0.5, 0.0, 0.0],
        mc_correct=[8, 4, 0, 0],
        mc_total=[8, 8, 8, 1],
        annotator="mc",
        config_fingerprint="fp1",
        rollouts=24,
        tokens=300,
        judge_first_error=judge,
        judge_votes=votes,
        judge_prompt_version=None if not votes else "v1",
        judge_model=None if not votes else "judge",
        p_good=p_good,
        unlabeled_reason=[None if lab is not None else "undecided_budget" for lab in labels],
    )


@pytest.mark.parametrize(
    ("mc", "judge", "tolerance", "expected"),
    [
        (-1, -1, 0, True),
        (2, 2, 0, True),
        (2, 3, 0, False),
        (2, 3, 1, True),
        (3, 1, 1, False),
        (-1, 0, 1, False),  # "no error" never agrees with a step index, whatever the tolerance
        (0, -1, 5, False),
    ],
)
def test_agrees(mc, judge, tolerance, expected):
    assert agrees(mc, judge, tolerance) is expected


T, F, N = True, False, None


@pytest.mark.parametrize(
    ("labels", "interval"),
    [
        ([T, T, F, F], (2, 2)),
        ([T, N, N, F], (1, 3)),
        ([N, N, F, N], (0, 2)),
        ([T, T, T, T], (4, 4)),  # 4 = len: "no error" only
        ([T, T, N, N], (2, 4)),  # no bad label: steps 2, 3 or no error at all
        ([N, N, N, N], (0, 4)),
    ],
)
def test_open_interval_is_what_the_labels_leave_open(labels, interval):
    assert open_interval(labels) == interval


@pytest.mark.parametrize(
    ("labels", "judge", "tolerance", "expected"),
    [
        ([T, N, N, F], 1, 0, True),
        ([T, N, N, F], 3, 0, True),
        ([T, N, N, F], 0, 0, False),  # the step labeled good
        ([T, N, N, F], -1, 0, False),  # a bad label is not "no error"
        ([T, N, N, F], -1, 9, False),  # whatever the tolerance
        ([T, N, N, F], 0, 1, True),
        ([T, T, T, T], -1, 0, True),
        ([T, T, T, T], 3, 0, False),
        ([T, T, N, N], -1, 0, True),
        ([T, T, N, N], 2, 0, True),
        ([T, T, N, N], 1, 0, False),
    ],
)
def test_the_judge_agrees_inside_the_open_interval(labels, judge, tolerance, expected):
    assert agrees_with_labels(labels, judge, tolerance) is expected


@st.composite
def right_labels(draw: st.DrawFn) -> tuple[list[bool | None], int]:
    """Labels a search could leave on a solution with true first error t: every label right, any unlabeled."""
    n = draw(st.integers(1, 12))
    truth = draw(st.integers(-1, n - 1))
    labels = [draw(st.sampled_from([None, truth == -1 or i < truth])) for i in range(n)]
    return labels, truth


@given(right_labels())
@settings(max_examples=300, deadline=None)
def test_an_always_right_judge_agrees_with_every_row_whose_labels_are_right(case):
    labels, truth = case
    assert agrees_with_labels(labels, truth)


@given(right_labels())
@settings(max_examples=200, deadline=None)
def test_agree_completes_a_right_row_to_the_truth_under_an_always_right_judge(case):
    labels, truth = case
    row = rec("p0-s0", -1, truth, labels=labels + [True] * (4 - len(labels)) if len(labels) < 4 else labels)
    row.steps = ["x\n"] * len(row.labels)
    if len(labels) < 4:  # pad the truth's labels: the padded steps follow its prefix rule
        row.labels = [truth == -1 or i < truth if i >= len(labels) else lab for i, lab in enumerate(row.labels)]
        row.label_source = ["mc"] * len(row.labels)
        row.unlabeled_reason = [None if lab is not None else "undecided_budget" for lab in row.labels]
    # the helper's fixed rollouts (0/8 from step 2) put an error in a row the truth calls clean: a
    # judge's -1 then keeps the row as measured, by design (`decide`), instead of filling it good
    assume(truth >= 0 or rollouts_support(row, -1) >= 1.0 - TIE_COMPLETES)
    kept, rejected, _ = apply_consensus([row], ConsensusConfig(policy="agree"))
    assert not rejected and kept == [row]
    n = len(row.labels)
    end = n if truth == -1 else truth
    assert row.labels[: end + 1] == [True] * end + ([False] if truth >= 0 else [])
    assert row.first_error_mc == truth
    assert all(reason is None for reason in row.unlabeled_reason[: end + 1])


def test_the_judge_completes_a_bracketed_row():
    row = rec("p0-s0", 3, 2, labels=[T, N, N, F])
    kept, rejected, stats = apply_consensus([row], ConsensusConfig(policy="agree"))
    assert kept == [row] and not rejected and row.consensus is True
    assert row.labels == [T, T, F, F]
    assert row.label_source == ["mc", "consensus", "consensus", "mc"]
    assert row.first_error_mc == 2 and row.unlabeled_reason == [None, None, None, None]
    assert stats.completed == 1


def test_no_error_completes_an_open_tail_and_a_wider_tolerance_keeps_labels_as_measured():
    row = rec("p0-s0", -1, -1, labels=[T, T, N, N])
    apply_consensus([row], ConsensusConfig(policy="agree"))
    assert row.labels == [T, T, T, T] and row.label_source[2:] == ["consensus", "consensus"]
    near = rec("p0-s1", 3, 0, labels=[T, N, N, F])
    kept, _, stats = apply_consensus([near], ConsensusConfig(policy="agree", tolerance=1))
    assert kept == [near] and near.labels == [T, N, N, F] and stats.completed == 0


def test_a_rejected_row_carries_its_labels_as_measured():
    row = rec("p0-s0", 3, 0, labels=[T, N, N, F])
    _, (rejected,), _ = apply_consensus([row], ConsensusConfig(policy="agree"))
    assert rejected.reason == "disagree" and "1..3" in rejected.detail
    assert record_from_payload(rejected.payload).labels == [T, N, N, F]


def _rows() -> list[LabeledRecord]:
    return [
        rec("p0-s0", -1, -1),
        rec("p0-s1", 2, 2),
        rec("p1-s0", 2, 3),
        rec("p1-s1", -1, 0, source="math"),
        rec("p2-s0", 1, None, votes=[0, 1]),  # a tie the labels decide: step 0 is labeled good
        rec("p2-s1", 1, None, votes=[UNPARSEABLE]),
        rec("p3-s0", 0, None),  # no judge ran
    ]


def test_agree_policy_keeps_agreement_and_rejects_with_reasons():
    rows = _rows()
    kept, rejected, stats = apply_consensus(rows, ConsensusConfig(policy="agree"))
    assert [r.id for r in kept] == ["p0-s0", "p0-s1", "p2-s0"]
    reasons = {r.id: r.reason for r in rejected}
    assert reasons == {
        "p1-s0": "disagree",
        "p1-s1": "disagree",
        "p2-s1": "judge_undecided",
        "p3-s0": "judge_missing",
    }
    assert [r.consensus for r in rows] == [True, True, False, False, True, None, None]
    assert rows[4].judge_first_error == 1 and rows[4].judge_votes == [0, 1]  # the tie and how it was decided
    bad = next(r for r in rejected if r.id == "p1-s0")
    assert bad.stage == "consensus" and bad.problem_id == "p1" and bad.source == "gsm8k"
    assert "3" in bad.detail and "2" in bad.detail and bad.config_fingerprint == "fp1"
    # nothing vanishes: the payload is the whole record, and reads back as one
    assert record_from_payload(bad.payload) == rows[2]
    assert json.loads(bad.payload)["judge_first_error"] == 3
    assert stats.rows == 7 and stats.kept == 3 and stats.rejected == 4 and stats.ties_broken == 1
    assert stats.agree == 3 and stats.judged == 5
    assert stats.rejected_by_reason == {"disagree": 2, "judge_undecided": 1, "judge_missing": 1}
    assert stats.agreement["mc=2,judge=3"] == 1 and stats.agreement["mc=1,judge=none"] == 1
    assert sum(stats.agreement.values()) == 7
    assert stats.by_source == {
        "gsm8k": {"rows": 6, "kept": 3, "rejected": 3, "agree": 3},
        "math": {"rows": 1, "kept": 0, "rejected": 1, "agree": 0},
    }


def test_tolerance_widens_agreement_but_not_across_minus_one():
    kept, rejected, _ = apply_consensus(_rows()[:4], ConsensusConfig(policy="agree", tolerance=1))
    assert [r.id for r in kept] == ["p0-s0", "p0-s1", "p1-s0"]
    assert [r.id for r in rejected] == ["p1-s1"]


def test_unreadable_votes_are_left_out_and_a_tie_goes_to_the_rollouts_evidence():
    clean = [0.99, 0.99, 0.98, 0.97]
    row = rec("p0-s0", -1, None, votes=[-1, 3, UNPARSEABLE], p_good=clean)
    kept, _, stats = apply_consensus([row], ConsensusConfig(policy="agree"))
    assert kept == [row] and row.judge_first_error == -1 and stats.ties_broken == 1
    dropping = [0.99, 0.98, 0.97, 0.05]  # the rollouts see the error at step 3
    row = rec("p0-s1", -1, None, votes=[-1, 3, UNPARSEABLE], labels=[T, T, T, N], p_good=dropping)
    apply_consensus([row], ConsensusConfig(policy="agree"))
    assert row.judge_first_error == 3 and row.labels == [T, T, T, F]


def test_a_tie_the_rollouts_cannot_decide_stays_undecided():
    row = rec("p0-s0", 3, None, votes=[1, 2], labels=[T, N, N, F])  # no p_good: both inside the interval
    _, (rejected,), stats = apply_consensus([row], ConsensusConfig(policy="agree"))
    assert rejected.reason == "judge_undecided" and stats.ties_broken == 0 and row.judge_first_error is None


def test_judge_only_keeps_every_judged_row_and_its_labels_follow_the_judge():
    rows = _rows()
    kept, rejected, stats = apply_consensus(rows, ConsensusConfig(policy="judge-only"))
    assert [r.id for r in kept] == ["p0-s0", "p0-s1", "p1-s0", "p1-s1", "p2-s0"]
    assert {r.reason for r in rejected} == {"judge_undecided", "judge_missing"}
    assert [r.consensus for r in kept] == [True, True, False, False, True]  # agreement is still recorded
    assert rows[2].labels == [T, T, T, F] and rows[2].label_source[2:] == ["consensus", "mc"]
    # a labeled step after the judge's error is bad (its prefix holds the error); an unlabeled one stays so
    assert rows[3].labels == [F, F, F, F] and rows[3].first_error_mc == 0
    assert rows[3].label_source == ["consensus"] * 4
    gap = rec("p9-s0", -1, 1, labels=[T, T, N, T])
    apply_consensus([gap], ConsensusConfig(policy="judge-only"))
    assert gap.labels == [T, F, N, F] and gap.unlabeled_reason == [None, None, "after_error", None]


def test_mc_only_keeps_everything_as_measured():
    rows = _rows()
    before = [list(r.labels) for r in rows]
    kept, rejected, stats = apply_consensus(rows, ConsensusConfig(policy="mc-only"))
    assert kept == rows and rejected == [] and stats.kept == 7 and stats.completed == 0
    assert [r.labels for r in rows] == before
    assert decide(rows[2], ConsensusConfig(policy="mc-only")).keep


def _pinned(rid: str, first_error: int, votes: list[int]) -> LabeledRecord:
    p_good = [1.0 if first_error == -1 or i < first_error else 0.0 for i in range(4)]
    return rec(rid, first_error, None, votes=votes, p_good=p_good)


def test_the_judges_accuracy_is_measured_on_the_rows_the_rollouts_pinned():
    rows = [
        _pinned("p0-s0", 2, [2, 2, -1]),
        _pinned("p0-s1", 1, [1, 3, UNPARSEABLE]),
        _pinned("p1-s0", -1, [-1, -1, 0]),
        rec("p2-s0", 2, None, votes=[0, 0, 0], labels=[T, N, F, F], p_good=[0.99, 0.6, 0.0, 0.0]),  # not pinned
    ]
    _, _, stats = apply_consensus(rows, ConsensusConfig(policy="mc-only"))
    assert (stats.pinned_votes, stats.pinned_named, stats.pinned_missed) == (5, 3, 1)
    assert (stats.clean_votes, stats.clean_said_clean) == (3, 2)
    fractions = stats.fractions()
    assert fractions["judge_recall_pinned"] == pytest.approx(3 / 5)
    assert fractions["judge_clean_rate"] == pytest.approx(2 / 3)


def test_soft_keeps_a_confident_posterior_and_its_labels_follow_it():
    sure_votes = rec("p0-s0", 3, None, votes=[1, 1, 1], labels=[T, N, N, F], p_good=[0.99, 0.6, 0.3, 0.0])
    unsure = rec("p0-s1", 3, None, votes=[1, 2, -1], labels=[T, N, N, F], p_good=[0.99, 0.6, 0.3, 0.0])
    kept, rejected, _ = apply_consensus([sure_votes, unsure], ConsensusConfig(policy="soft", confidence=0.9))
    assert kept[0] is sure_votes and sure_votes.labels == [T, F, N, F] and sure_votes.first_error_mc == 1
    assert sure_votes.label_source[1] == "consensus"
    # the split votes leave no first error sure enough for the whole row: it keeps only the labels that
    # reach consensus.target_precision on their own (the rollouts' sure first and last step), the steps
    # between unlabeled with the reason
    assert kept[1] is unsure and not rejected
    assert unsure.labels == [T, N, N, F] and unsure.unlabeled_reason == [None, "below_target", "below_target", None]
    assert unsure.first_error_mc == 3


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=10),
    st.lists(st.integers(-2, 9), max_size=8),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
)
@settings(max_examples=200, deadline=None)
def test_the_posterior_is_a_distribution_over_the_first_error(p_good, votes, recall, clean, miss):
    n = len(p_good)
    row = rec("p0-s0", -1, None, votes=[v for v in votes if v < n], labels=[None] * n, p_good=p_good)
    row.steps = ["x\n"] * n
    post = posterior(row, JudgeAccuracy(recall=recall, clean=clean, miss=miss * (1 - recall)))
    assert len(post) == n + 1 and sum(post) == pytest.approx(1.0) and min(post) >= 0.0
    prior = first_error_prior(row)
    assert sum(prior) == pytest.approx(1.0) and min(prior) >= 0.0


def test_soft_knobs_are_refused_where_the_policy_does_not_read_them():
    with pytest.raises(ValueError, match="confidence"):
        ConsensusConfig(policy="agree", confidence=0.8)
    with pytest.raises(ValueError, match="tolerance"):
        ConsensusConfig(policy="soft", tolerance=1)
    assert ConsensusConfig(policy="soft", confidence=0.8).confidence == 0.8


def _numbers_only(obj: Any) -> bool:
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _numbers_only(v) for k, v in obj.items())
    return isinstance(obj, int) and not isinstance(obj, bool)


def test_stats_are_counts_that_shard_totals_sum():
    _, _, a = apply_consensus(_rows(), ConsensusConfig(policy="agree"))
    _, _, b = apply_consensus(_rows()[:2], ConsensusConfig(policy="agree"))
    assert _numbers_only(asdict(a))
    stored = [ShardStats(consensus=s).to_dict() for s in (a, b)]  # as the shard markers hold them
    entries = [ShardEntry(i, 1, 1, 0, "d", "r", {}, "fp", stats=ShardStats.from_dict(s)) for i, s in enumerate(stored)]
    summed = totals(entries).to_json()["stats"]["consensus"]
    assert summed["rows"] == 9 and summed["kept"] == 5 and summed["agreement"]["mc=-1,judge=-1"] == 2
    assert summed["by_source"]["gsm8k"]["kept"] == 5 and summed["ties_broken"] == 1
    run = ShardStats.from_dict(stored[0]) + ShardStats.from_dict(stored[1])
    assert run.consensus is not None and run.consensus.fractions()["kept_fraction"] == pytest.approx(5 / 9)
    assert ConsensusStats().fractions()["kept_fraction"] is None
    assert ShardStats.from_dict({"consensus": {}}).consensus is None  # an older marker: the stage did not run


def test_pipeline_with_judge_and_consensus_loses_nothing():
    """The lead's process_shard calls judge_records and apply_consensus: every solution ends somewhere."""
    from prm_synth.engines import build_engine
    from prm_synth.pipeline import iter_shards, process_shard

    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": 15, "min_ops": 4, "max_ops": 8},
            "policy": {"kind": "simulated", "step_error": 0.15, "recover": 0.2},
            "sampling": {"samples_per_problem": 2},
            "judge": {"engine": {"kind": "simulated-judge", "accuracy": 0.8}, "samples": 3},
            "consensus": {"policy": "agree"},
            "output": {"shard_size": 100},
        }
    )
    (shard,) = list(iter_shards(config))
    out = process_shard(
        build_engine(config.policy), config, shard, config.fingerprint(), judge_engine=build_engine(config.judge.engine)
    )
    consensus_rejects = [r for r in out.rejected if r.stage == "consensus"]
    assert len(out.records) + len(consensus_rejects) == 30
    assert all(r.consensus for r in out.records)
    assert all(r.judge_model == "simulated-judge" and len(r.judge_votes) == 3 for r in out.records)
    assert all(r.config_fingerprint == config.fingerprint() for r in out.rejected)
    assert len({r.id for r in out.records} | {r.id for r in consensus_rejects}) == 30
    assert out.stats.judge is not None and out.stats.consensus is not None
    assert out.stats.judge.samples == 90 and out.stats.consensus.kept == len(out.records)


def test_consensus_benchmark_meets_its_claims_on_a_small_run():
    """benchmarks/consensus_quality.py on a small run: an always-right judge rejects no row whose labels are
    all right; with the realistic judge, agree keeps >= 60% of rows at no loss of precision and pins the
    first error of >= 80% of them."""
    import argparse
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "consensus_quality.py"
    spec = importlib.util.spec_from_file_location("consensus_quality", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = argparse.Namespace(
        problems=30,
        samples=2,
        step_error=0.1,
        recover=0.2,
        judge_samples=3,
        shard_size=100,
        seed=0,
        confidence=0.9,
        calibrate=0.1,
    )
    shards, _ = bench.label(args)
    oracle = bench.run_profile(shards, bench.PROFILES["oracle"], args)
    assert oracle["agree"]["rejected_all_right"] == 0 and oracle["agree"]["first_error_acc"] == 1.0
    assert oracle["agree"]["completed"] > 0  # the rollouts left rows open that the judge pinned
    real = bench.run_profile(shards, bench.PROFILES["realistic"], args)
    agree, everything = real["agree"], real["all"]
    assert agree["kept_fraction"] >= 0.6
    assert agree["step_precision"] >= everything["step_precision"]
    assert agree["first_error_acc"] >= 0.8 > everything["first_error_acc"]
    assert real["mc-only"]["kept_fraction"] == 1.0 and real["mc-only"]["completed"] == 0
    # judging only where a vote can change a label, one vote at a time: far fewer requests, same quality
    needed, every = real["soft-needed"], real["soft"]
    assert needed["judge_requests_per_row"] <= 2.0 < every["judge_requests_per_row"] == 3.0  # issue #49: at most 2
    assert needed["step_precision"] >= every["step_precision"] - 0.01


def test_a_run_reports_the_judges_measured_accuracy_in_inspect_and_the_card(tmp_path):
    """The default labeler pins some first errors; the judge's accuracy on them reaches inspect and the card."""
    from _simulated_run import write_run
    from typer.testing import CliRunner

    from prm_synth.cli import app
    from prm_synth.export.hub import export_to_dir
    from prm_synth.store.summary import summarize

    data = {
        "name": "judged",
        "problems": {"kind": "builtin", "count": 12, "min_ops": 4, "max_ops": 8},
        "policy": {"kind": "simulated", "step_error": 0.15, "recover": 0.2},
        "sampling": {"samples_per_problem": 2},
        "judge": {"engine": {"kind": "simulated-judge", "accuracy": 1.0}, "samples": 2},
        "consensus": {"policy": "agree"},
        "output": {"shard_size": 100},
    }
    root = write_run(tmp_path / "run", data)
    consensus = summarize(root).consensus
    assert consensus is not None and consensus.pinned_votes > 0 and consensus.clean_votes > 0
    assert consensus.pinned_named == consensus.pinned_votes  # an always-right judge names every pinned error
    text = consensus.judge_accuracy_text()
    assert text.startswith("names the pinned error in 100.0% of ") and "says -1 in 100.0%" in text
    shown = " ".join(CliRunner().invoke(app, ["inspect", str(root)], env={"COLUMNS": "200"}).output.split())
    assert "judge accuracy" in shown and "names the pinned error in 100.0% of" in shown
    assert f"{consensus.completed} completed or relabeled by the judge" in shown
    export_to_dir(root, tmp_path / "out", ["trl"])
    card = " ".join((tmp_path / "out" / "README.md").read_text(encoding="utf-8").split())
    assert f"| judge accuracy (measured on rows the rollouts pinned) | {text} |" in card


@st.composite
def labeled_rows(draw: st.DrawFn) -> LabeledRecord:
    """A row as any labeler may leave it: prefix-consistent labels with gaps, maybe p_good, any votes."""
    n = draw(st.integers(1, 8))
    truth = draw(st.integers(-1, n - 1))
    labels = [draw(st.sampled_from([None, truth == -1 or i < truth])) for i in range(n)]
    p_good = draw(st.none() | st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))
    votes = draw(st.lists(st.integers(-2, n - 1), max_size=5))
    row = rec("p0-s0", -1, None, votes=votes, labels=labels, p_good=p_good)
    row.steps = ["x\n"] * n
    readable = Counter(v for v in votes if v != UNPARSEABLE).most_common()
    single = readable and (len(readable) == 1 or readable[0][1] > readable[1][1])
    row.judge_first_error = readable[0][0] if single else None
    return row


@given(st.lists(labeled_rows(), min_size=1, max_size=6), st.sampled_from(["agree", "soft", "judge-only", "mc-only"]))
@settings(max_examples=200, deadline=None)
def test_every_policy_keeps_or_rejects_every_row_and_leaves_labels_a_prefix(rows, policy):
    for i, row in enumerate(rows):
        row.id = f"p{i}-s0"
    kept, rejected, stats = apply_consensus(rows, ConsensusConfig(policy=policy))
    assert len(kept) + len(rejected) == len(rows) == stats.rows
    assert {r.id for r in kept} | {r.id for r in rejected} == {r.id for r in rows}
    for row in kept:
        first_bad = next((i for i, lab in enumerate(row.labels) if lab is False), len(row.labels))
        assert all(lab is not True for lab in row.labels[first_bad:])  # no good step after a bad one
        assert row.first_error_mc == (-1 if first_bad == len(row.labels) else first_bad)
        assert [reason is None for reason in row.unlabeled_reason] == [lab is not None for lab in row.labels]
        assert all(s != "none" for s, lab in zip(row.label_source, row.labels, strict=True) if lab is not None)


def test_a_decided_tie_completes_only_what_the_rollouts_support():
    """A correct-answer row whose rollouts leave steps 1-3 open (p_good 0.85) and a judge split between
    "step 0" and "no error": the tie goes to "no error" (the likelier by the rollouts), the row is kept,
    but its open steps are not filled good on the strength of one vote."""
    open_tail = [0.95, 0.87, 0.86, 0.85]
    row = rec("p0-s0", -1, None, votes=[0, -1], labels=[T, N, N, N], p_good=open_tail)
    kept, _, stats = apply_consensus([row], ConsensusConfig(policy="agree"))
    assert kept == [row] and row.judge_first_error == -1 and stats.ties_broken == 1
    assert row.labels == [T, N, N, N] and stats.completed == 0
    # the same split with the rollouts sure of a clean tail completes it
    sure = rec("p0-s1", -1, None, votes=[0, -1], labels=[T, N, N, N], p_good=[0.99, 0.98, 0.97, 0.96])
    apply_consensus([sure], ConsensusConfig(policy="agree"))
    assert sure.labels == [T, T, T, T] and set(sure.label_source[1:]) == {"consensus"}
