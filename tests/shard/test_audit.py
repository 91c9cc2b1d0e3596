"""The audit (issue 57): a seeded sample of the kept rows re-examined by evidence the selection never used,
the precision it certifies (`estimated_precision`, `target_met`), and what it never does (change a kept row)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import validate_config
from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.records import LabeledRecord, ShardStats
from prm_synth.shard.audit import (
    AuditRun,
    agrees,
    audit_shard,
    carried_target,
    escalated,
    escalating_settled,
    given_first_error,
    stratum_sums,
)
from prm_synth.shard.audit_draw import MIN_ROWS, allocation, audit_group, draw_rows
from prm_synth.store.audit_counts import audit_report, miss_line
from prm_synth.store.intervals import certifiable, clopper_pearson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def row(i: int, labels: list[bool | None], right: bool = True) -> LabeledRecord:
    n = len(labels)
    return LabeledRecord(
        id=f"r{i}", problem_id=f"p{i}", source="t", question="q", gold_answer="1",
        steps=[f"step {k}" for k in range(n)], final_answer="1", final_correct=right,
        mc_values=[None] * n, mc_correct=[0] * n, mc_total=[0] * n, labels=labels, label_source=["mc"] * n,
        label_rule="r", first_error_mc=-1, annotator="a", policy_model="m", config_fingerprint="f",
        rollouts=0, tokens=0,
    )  # fmt: skip


# ------------------------------------------------------------------ intervals
def test_clopper_pearson_gives_the_textbook_ends():
    low, high = clopper_pearson(3, 30)
    assert abs(low - 0.02112) < 1e-4 and abs(high - 0.26529) < 1e-4
    # 30 rows all agreeing certify at most (2.5%)^(1/30): what the docs quote for an own-judge audit
    assert abs(certifiable(30) - 0.025 ** (1 / 30)) < 1e-9 and round(certifiable(30), 3) == 0.884


@settings(max_examples=80, deadline=None)
@given(total=st.integers(1, 400), data=st.data())
def test_the_interval_holds_the_observed_share_and_narrows_with_more_rows(total, data):
    hits = data.draw(st.integers(0, total))
    low, high = clopper_pearson(hits, total)
    assert 0.0 <= low <= hits / total <= high <= 1.0
    more_low, more_high = clopper_pearson(hits * 4, total * 4)
    assert more_high - more_low <= high - low + 1e-9


# ------------------------------------------------------------------ the estimator
def _population(rng: random.Random, rows: int, wrong_share: float) -> tuple[list[LabeledRecord], dict[str, int]]:
    """Rows of good labels only, each whose truth is a first error (-1: none): its good labels from the
    error on are wrong, so a row's labels stand or fall together."""
    records, truth = [], {}
    for i in range(rows):
        n = rng.randint(2, 10)
        records.append(row(i, [True] * n))
        truth[f"r{i}"] = rng.randrange(n) if rng.random() < wrong_share else -1
    return records, truth


@pytest.mark.parametrize("independent", [0, 1])
def test_the_interval_holds_the_true_precision_in_most_runs_and_can_say_it_misses(independent):
    """Populations whose kept good labels are right .85 to 1.0 of the time; a perfect audit judge of 30 rows
    (its verdict the truth), the posterior predicting every label right (as a selection's posterior does)
    and stating the spread a row kept at the target has (a 3% chance its labels are wrong from its middle
    on: the difference estimator is never surer than that): the interval holds the true precision in at
    least 90% of draws, its high end falls below 1 when the audit finds a wrong label, and where the truth
    is below .97 the run does not claim the target."""
    rng = random.Random(7)
    held = met_below = below = runs = 0
    for trial in range(120):
        records, truth = _population(rng, rng.choice([60, 200]), rng.choice([0.0, 0.05, 0.1, 0.2]))
        audited = draw_rows(records, 30, trial, 0)
        verdicts = {r.id: truth[r.id] for r in audited}
        predicted = {
            r.id: {
                "good_labels": float(len(r.labels)),
                "good_expected": float(len(r.labels)),
                "good_var": 0.03 * 0.97 * (len(r.labels) / 2) ** 2,
            }
            for r in records
        }
        data = {"rows_kept": len(records), "audited_rows": 30, "independent": independent}
        data["strata"] = {"first/right:good": stratum_sums(records, verdicts, predicted, "right", "good")}
        report = audit_report(data, 0.97)
        total = sum(len(r.labels) for r in records)
        wrong = sum(len(r.labels) - t for r in records if (t := truth[r.id]) >= 0)
        true_precision = 1 - wrong / total
        good = report["good"]
        runs += 1
        held += good["low"] <= true_precision <= good["high"]
        if sum(truth[r.id] >= 0 for r in audited) >= 3:  # (one wrong label may leave the high end at 0.99995)
            assert good["high"] < 1.0
        below += true_precision < 0.96
        met_below += report["target_met"] and true_precision < 0.96
    assert held / runs >= 0.9, held / runs
    # the bar: target_met true while the truth is more than .01 under the target in at most 1 run of
    # 10 (the difference estimator trusts a posterior that all 30 audited rows agreed with)
    assert below >= 20 and met_below / runs <= 0.1 and met_below / below <= 0.25, (met_below, below, runs)


def test_target_met_only_where_both_low_ends_reach_the_target_and_a_miss_is_one_line():
    records = [row(i, [True, True, False], right=False) for i in range(40)]
    predicted = {
        r.id: {"good_labels": 2.0, "good_expected": 2.0, "bad_labels": 1.0, "bad_expected": 1.0} for r in records
    }
    every = {r.id: 2 for r in records}  # an audit of every row agreeing with every label

    def report(verdicts: dict[str, int]) -> dict:
        strata = {f"first/wrong:{k}": stratum_sums(records, verdicts, predicted, "wrong", k) for k in ("good", "bad")}
        return audit_report({"rows_kept": 40, "audited_rows": len(verdicts), "independent": 1, "strata": strata}, 0.97)

    assert report(every)["target_met"] and miss_line(report(every)) is None
    half = {r.id: (-1 if i < 8 else 2) for i, r in enumerate(records)}  # 8 rows: the judge sees no error
    missed = report(half)
    assert missed["bad"]["high"] < 0.97 and not missed["target_met"] and missed["good"]["low"] >= 0.97
    line = miss_line(missed)
    assert line is not None and "\n" not in line and line.startswith("target_met false")


def test_an_audit_judge_that_misses_on_canaries_widens_the_good_labels_low_end():
    records = [row(i, [True] * 5) for i in range(60)]
    verdicts = {r.id: -1 for r in records[:30]}
    strata = {"first/right:good": stratum_sums(records, verdicts, {}, "right", "good")}
    base = {"rows_kept": 60, "audited_rows": 30, "strata": strata}
    sure = audit_report(base | {"canary_audited": 20, "canary_named": 20, "canary_early": 0}, 0.97)
    blind = audit_report(base | {"canary_audited": 20, "canary_named": 8, "canary_early": 0}, 0.97)
    assert blind["good"]["low"] < sure["good"]["low"] <= sure["good"]["high"] == 1.0
    assert "20 canaries" in blind["rests_on"] and "recall 0.40" in blind["rests_on"]


# ------------------------------------------------------------------ gold, the draw, the keep rule after
def test_given_human_labels_are_the_audits_gold_and_are_never_sent_to_a_judge():
    records = [row(i, [True, True, True]) for i in range(10)]
    assert given_first_error(records[0]) is None
    for r in records:
        r.given_labels = [True, False, None]  # type: ignore[attr-defined]
    assert given_first_error(records[0]) == 1
    records[0].given_first_error = 2  # type: ignore[attr-defined]  # the column, where the schema has it
    assert given_first_error(records[0]) == 2

    class NoJudge:
        model_name = "never-asked"

        def generate(self, requests):  # pragma: no cover - the test fails if it is reached
            raise AssertionError("a row with gold was sent to the judge")

    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": 10},
            "policy": {"kind": "simulated"},
            "judge": {"engine": {"kind": "simulated-judge"}},
        }
    )
    out = audit_shard(config, records, {}, 0, NoJudge(), AuditRun())  # type: ignore[arg-type]
    assert out["gold_rows"] == out["audited_rows"] == 10 and out["requests"] == 0 and out["independent"]
    good = out["strata"]["first/right:good"]
    assert good["wrong"] == 9 * 2 + 1  # gold first error 1 on nine rows (2 wrong of 3), 2 on the first (1 wrong)


def test_the_draw_is_seeded_reads_flagged_rows_first_and_gives_every_group_its_floor():
    records = [row(i, [True], right=i >= 20) for i in range(80)]  # 20 wrong-answer rows, 60 right
    records += [row(80 + i, [True, False]) for i in range(4)]  # right answers the judge flagged
    first, again = draw_rows(records, 30, 0, 0), draw_rows(records, 30, 0, 0)
    assert [r.id for r in first] == [r.id for r in again] and len(first) == 30
    assert [r.id for r in draw_rows(records, 30, 1, 0)] != [r.id for r in first]
    assert sum(audit_group(r) == "flagged" for r in first) == 4  # all of them
    # no posterior spread: the rest in proportion to the groups' rows (26 of 80: about 6.5 wrong, 19.5 right)
    assert sum(r.final_correct is False for r in first) in (6, 7)
    # a posterior unsure of the wrong-answer rows only sends the audit there, never below the floor elsewhere
    unsure = {r.id: {"bad_var": 0.25} for r in records if r.final_correct is False}
    leaning = draw_rows(records, 30, 0, 0, unsure)
    assert sum(r.final_correct is False for r in leaning) >= 12
    assert sum(audit_group(r) == "right" for r in leaning) >= MIN_ROWS


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.fixed_dictionaries({g: st.integers(0, 40) for g in ("right", "flagged", "wrong")}),
    spreads=st.fixed_dictionaries({g: st.floats(0, 20) for g in ("right", "flagged", "wrong")}),
    n=st.integers(0, 120),
)
def test_the_allocation_takes_n_rows_no_group_more_than_it_has(sizes, spreads, n):
    take = allocation(sizes, spreads, n)
    assert sum(take.values()) == min(n, sum(sizes.values()))
    assert all(0 <= take[g] <= sizes[g] for g in sizes)
    floors = {g: min(sizes[g], MIN_ROWS) for g in sizes}
    for g in sizes:  # the floor where the audit is big enough to give every group its own; else one row each
        if n >= sum(floors.values()):
            assert take[g] >= floors[g]
        elif n >= sum(1 for v in sizes.values() if v):
            assert take[g] >= min(sizes[g], 1)


def test_a_shard_surely_below_target_tightens_the_keep_rule_of_the_shards_after_it():
    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": 10},
            "policy": {"kind": "simulated"},
            "judge": {"engine": {"kind": "simulated-judge"}},
        }
    )
    records = [row(i, [True] * 4) for i in range(40)]
    predicted = {r.id: {"good_labels": 4.0, "good_expected": 3.96} for r in records}  # the posterior said .99

    def stats(verdicts: dict[str, int]) -> ShardStats:
        audit = {"rows_kept": 40, "audited_rows": len(verdicts), "independent": 1}
        audit["strata"] = {"first/right:good": stratum_sums(records, verdicts, predicted, "right", "good")}
        audit |= {"posterior_good_labels": 160.0, "posterior_good_expected": 158.4}
        return ShardStats(audit=audit)

    fine = {r.id: -1 for r in records[:30]}
    assert carried_target(config, [stats(fine)]) is None and carried_target(config, []) is None
    bad = {r.id: (0 if i < 12 else -1) for i, r in enumerate(records[:30])}  # 12 of 30 rows wrong throughout
    stricter = carried_target(config, [stats(bad)])
    assert stricter is not None and 0.97 < stricter < 1.0


# ------------------------------------------------------------------ in the pipeline
def test_the_audit_never_changes_which_rows_are_kept_and_judge_less_pipelines_are_untouched():
    import label_precision

    from prm_synth.pipeline import iter_shards, process_shard
    from prm_synth.simulated.engines import SimulatedJudge, SimulatedPolicy

    config = label_precision.config_for("repair", "realistic", 0, 24)
    off = validate_config(config.model_dump(mode="json") | {"audit": {"enabled": False}})
    assert config.fingerprint() == off.fingerprint() or config.audit != off.audit
    rows = {}
    for c in (config, off):
        shard = next(iter_shards(c))
        out = process_shard(SimulatedPolicy(c.policy), c, shard, "f", judge_engine=SimulatedJudge(c.judge.engine))
        rows[c.audit.enabled] = ([r.to_row() for r in out.records], out.stats.audit)
    assert rows[True][0] == rows[False][0] and rows[True][1]["audited_rows"] > 0 and rows[False][1] == {}
    # no judge: no audit, and the fingerprint of a judge-less pipeline is what it was before the section
    plain = validate_config({"problems": {"kind": "builtin", "count": 5}, "policy": {"kind": "simulated"}})
    assert "audit" not in plain.fingerprint_part()
    moved = validate_config(plain.model_dump(mode="json") | {"audit": {"rows": 50}})
    assert moved.fingerprint() == plain.fingerprint()
    # with a judge, the default audit hashes as before it existed; another audit is another dataset
    asked = validate_config(config.model_dump(mode="json") | {"audit": {"rows": 50}})
    assert "audit" not in config.fingerprint_part() and asked.fingerprint() != config.fingerprint()


def test_inspect_json_says_target_met_and_whole_and_partial_rows(tmp_path):
    from _simulated_run import pipeline_data, write_run
    from typer.testing import CliRunner

    from prm_synth.cli import app
    from prm_synth.simulated.engines import JUDGE_PROFILES

    data = pipeline_data(
        judge={"engine": JUDGE_PROFILES["realistic"].model_dump(mode="json"), "samples": 3},
        consensus={},
        output={"shard_size": 40},
    )
    root = write_run(tmp_path / "run", data, limit=40)
    out = json.loads(CliRunner().invoke(app, ["inspect", str(root), "--json"]).output)
    assert out["target_met"] is False  # an own-judge audit of 30 rows certifies at most .884
    report = out["estimated_precision"]
    assert report["certifiable_by_own_judge"] < 0.97 and report["estimator"] == "direct"
    labels = out["labels"]
    assert labels["whole_rows"] + labels["partial_rows"] == out["rows"]
    shown = CliRunner().invoke(app, ["inspect", str(root)], env={"COLUMNS": "400"}).output
    assert sum("target_met false" in line for line in shown.splitlines()) == 1
    assert "whole / partial rows" in shown


def test_the_same_judge_at_another_seed_is_the_runs_own_and_a_stronger_one_is_independent():
    import label_precision

    from prm_synth.shard.audit import same_model

    strong = label_precision.config_for("plain", "realistic+strong-audit", 0, 10)
    assert not same_model(strong.audit.judge.engine, strong.judge.engine)
    data = label_precision.config_for("plain", "realistic", 0, 10).model_dump(mode="json")
    again = validate_config(data | {"audit": {"judge": {"engine": data["judge"]["engine"] | {"seed": 99}}}})
    assert same_model(again.audit.judge.engine, again.judge.engine)  # its errors are the selection's


# ------------------------------------------------------------------ how the audit asks
def test_a_row_closes_at_a_first_vote_that_agrees_and_a_finding_is_confirmed_by_the_majority():
    claims = [[True, True, False], [True, True, True], [True, True, True]]
    settled = escalating_settled(3, claims)
    # row 0: its vote names its bad step (agrees); row 1: no error (agrees); row 2: names step 1 (a finding)
    assert settled([[2], [-1], [1]], [0, 1, 2]) == [True, True, False]
    assert settled([[2], [-1], [1, 1]], [2]) == [True]  # two of three for the finding: settled
    assert settled([[2], [-1], [1, -1]], [2]) == [False]  # one each: the third vote decides
    assert settled([[2], [-1], [UNPARSEABLE]], [2]) == [False]  # nothing readable yet
    assert agrees([True, False, None], 1) and not agrees([True, False, None], -1) and not agrees([True, True], 0)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(0.0, 1.0), k=st.integers(1, 9))
def test_a_verdict_finds_no_more_than_its_first_vote_and_one_vote_is_a_vote(p, k):
    assert 0.0 <= escalated(p, k) <= p + 1e-12
    assert abs(escalated(p, 1) - p) < 1e-12
    assert abs(escalated(p, 3) - p * (1 - (1 - p) ** 2)) < 1e-9
