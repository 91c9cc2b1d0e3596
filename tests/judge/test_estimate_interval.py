"""The interval of `estimated_precision` where the judge's rates are least sure: the spread of the right
labels under the judge's worse rates (precision_report), and votes read as dependent as the canaries'
rows' votes agree beyond chance (a judge repeating one reading on every sample)."""

from __future__ import annotations

from prm_synth.config import ConsensusConfig
from prm_synth.judge.accuracy import JudgeCounts
from prm_synth.judge.estimate import canary_accuracy
from prm_synth.records.canaries import CLASS_KEYS, CanaryStats, precision_report


def test_the_interval_spreads_as_wide_as_the_worse_rates_make_the_right_count():
    sums = {"good_labels": 100.0, "good_expected": 99.0, "good_var": 0.25}
    narrow = precision_report(sums)["good"]
    wide = precision_report(sums | {"good_var_low": 9.0})["good"]
    assert narrow["low"] >= 0.98  # 0.99 less 1.96 * 0.5 / 100
    assert wide["low"] <= 0.99 - 1.96 * 3.0 / 100 + 1e-4 and wide["point"] == narrow["point"]


def repeating_canaries(agree: bool) -> CanaryStats:
    """Ten wrong-answer canaries, three votes each, half naming the planted step and half the one after,
    never -1: with `agree`, every row repeats one reading; else each row's votes are mixed."""
    c = dict.fromkeys(CLASS_KEYS, 0) | {"canaries": 10, "votes": 30, "named": 15, "after": 15, "offset_sum": 15}
    c |= {"pairs": 30, "pairs_agree": 30 if agree else 10}
    return CanaryStats(planted=10, by_answer={"wrong": c}, vote_keys={"0": 15, "1": 15})


def test_votes_that_repeat_one_reading_widen_the_pessimistic_end_only():
    config = ConsensusConfig()
    repeating = canary_accuracy(JudgeCounts(), config, repeating_canaries(True), "wrong")
    mixed = canary_accuracy(JudgeCounts(), config, repeating_canaries(False), "wrong")
    assert repeating_canaries(True).miss_dependence() == 0.0  # no misses: the misses' dependence is blind
    assert repeating.low is not None and repeating.low.dependence == 1.0
    assert repeating.accuracy.dependence == 0.0  # the point (and what soft keeps by) as measured
    assert mixed.low is not None and mixed.low.dependence == 0.0
