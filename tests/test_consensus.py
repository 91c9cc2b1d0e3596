"""The consensus filter: keep/reject decisions with reasons, nothing lost, count-only statistics."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from prm_synth.config import ConsensusConfig, validate_config
from prm_synth.consensus import agrees, apply_consensus, decide, record_from_payload
from prm_synth.judge import UNPARSEABLE
from prm_synth.schema import ConsensusStats, LabeledRecord, ShardStats
from prm_synth.shards import ShardEntry, totals


def rec(rid: str, mc: int, judge: int | None, votes: list[int] | None = None, source: str = "gsm8k") -> LabeledRecord:
    if votes is None:
        votes = [] if judge is None else [judge]
    return LabeledRecord(
        id=rid,
        problem_id=rid.split("-")[0],
        source=source,
        question="q",
        gold_answer="1",
        steps=["a\n", "b\n", "c\n", "d"],
        final_answer="1",
        final_correct=mc == -1,
        mc_values=[1.0, 0.5, 0.0, 0.0],
        mc_correct=[8, 4, 0, 0],
        mc_total=[8, 8, 8, 1],
        labels=[True, True, False, False],
        label_source=["mc", "mc", "mc", "verdict"],
        label_rule="hard",
        first_error_mc=mc,
        annotator="mc",
        policy_model="sim",
        config_fingerprint="fp1",
        rollouts=24,
        tokens=300,
        judge_first_error=judge,
        judge_votes=votes,
        judge_prompt_version=None if not votes else "v1",
        judge_model=None if not votes else "judge",
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


def _rows() -> list[LabeledRecord]:
    return [
        rec("p0-s0", -1, -1),
        rec("p0-s1", 2, 2),
        rec("p1-s0", 2, 3),
        rec("p1-s1", -1, 0, source="math"),
        rec("p2-s0", 1, None, votes=[0, 1]),  # tie
        rec("p2-s1", 1, None, votes=[UNPARSEABLE]),
        rec("p3-s0", 0, None),  # no judge ran
    ]


def test_agree_policy_keeps_agreement_and_rejects_with_reasons():
    rows = _rows()
    kept, rejected, stats = apply_consensus(rows, ConsensusConfig(policy="agree"))
    assert [r.id for r in kept] == ["p0-s0", "p0-s1"]
    reasons = {r.id: r.reason for r in rejected}
    assert reasons == {
        "p1-s0": "disagree",
        "p1-s1": "disagree",
        "p2-s0": "judge_undecided",
        "p2-s1": "judge_undecided",
        "p3-s0": "judge_missing",
    }
    assert [r.consensus for r in rows] == [True, True, False, False, None, None, None]
    bad = next(r for r in rejected if r.id == "p1-s0")
    assert bad.stage == "consensus" and bad.problem_id == "p1" and bad.source == "gsm8k"
    assert "3" in bad.detail and "2" in bad.detail and bad.config_fingerprint == "fp1"
    # nothing vanishes: the payload is the whole record, and reads back as one
    assert record_from_payload(bad.payload) == rows[2]
    assert json.loads(bad.payload)["judge_first_error"] == 3
    assert stats.rows == 7 and stats.kept == 2 and stats.rejected == 5
    assert stats.agree == 2 and stats.judged == 4
    assert stats.rejected_by_reason == {"disagree": 2, "judge_undecided": 2, "judge_missing": 1}
    assert stats.agreement["mc=2,judge=3"] == 1 and stats.agreement["mc=1,judge=none"] == 2
    assert sum(stats.agreement.values()) == 7
    assert stats.by_source == {
        "gsm8k": {"rows": 6, "kept": 2, "rejected": 4, "agree": 2},
        "math": {"rows": 1, "kept": 0, "rejected": 1, "agree": 0},
    }


def test_tolerance_widens_agreement_but_not_across_minus_one():
    kept, rejected, _ = apply_consensus(_rows()[:4], ConsensusConfig(policy="agree", tolerance=1))
    assert [r.id for r in kept] == ["p0-s0", "p0-s1", "p1-s0"]
    assert [r.id for r in rejected] == ["p1-s1"]


def test_judge_only_keeps_every_judged_row():
    kept, rejected, stats = apply_consensus(_rows(), ConsensusConfig(policy="judge-only"))
    assert [r.id for r in kept] == ["p0-s0", "p0-s1", "p1-s0", "p1-s1"]
    assert {r.reason for r in rejected} == {"judge_undecided", "judge_missing"}
    assert [r.consensus for r in kept] == [True, True, False, False]  # agreement is still recorded


def test_mc_only_keeps_everything():
    rows = _rows()
    kept, rejected, stats = apply_consensus(rows, ConsensusConfig(policy="mc-only"))
    assert kept == rows and rejected == [] and stats.kept == 7
    assert decide(rows[2], ConsensusConfig(policy="mc-only")) == (True, None, None)


def _numbers_only(obj: Any) -> bool:
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _numbers_only(v) for k, v in obj.items())
    return isinstance(obj, int) and not isinstance(obj, bool)


def test_stats_are_counts_that_shard_totals_sum():
    _, _, a = apply_consensus(_rows(), ConsensusConfig())
    _, _, b = apply_consensus(_rows()[:2], ConsensusConfig())
    assert _numbers_only(asdict(a))
    stored = [ShardStats(consensus=s).to_dict() for s in (a, b)]  # as the shard markers hold them
    entries = [ShardEntry(i, 1, 1, 0, "d", "r", {}, "fp", stats=ShardStats.from_dict(s)) for i, s in enumerate(stored)]
    summed = totals(entries).to_json()["stats"]["consensus"]
    assert summed["rows"] == 9 and summed["kept"] == 4 and summed["agreement"]["mc=-1,judge=-1"] == 2
    assert summed["by_source"]["gsm8k"]["kept"] == 4
    run = ShardStats.from_dict(stored[0]) + ShardStats.from_dict(stored[1])
    assert run.consensus is not None and run.consensus.fractions()["kept_fraction"] == pytest.approx(4 / 9)
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


def test_consensus_benchmark_raises_precision_above_both_labelers():
    """benchmarks/consensus_quality.py on a small run: the claim its table makes holds."""
    import argparse
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "consensus_quality.py"
    spec = importlib.util.spec_from_file_location("consensus_quality", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = argparse.Namespace(problems=60, samples=3, k=8, step_error=0.1, recover=0.2, judge_samples=1, seed=0)
    records, _ = bench.label_with_mc(args)
    by = {r["labeler"]: r for r in bench.run_accuracy(records, 0.8, args)}
    assert by["consensus"]["precision"] > max(by["mc-only"]["precision"], by["judge-only"]["precision"])
    assert by["consensus"]["kept_fraction"] < 1.0 == by["mc-only"]["kept_fraction"]
