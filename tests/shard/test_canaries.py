"""Planted-error canaries (issue #49): the planting rule, canaries written apart from the data (never in
a view, kept on resume), data rows the same with canaries on or off, and the run's estimate of its own
label precision holding the measured precision."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.records.canaries import CanaryStats
from prm_synth.shard.canaries import CANARY_PREFIX, NUMBER, OPERATOR, plant

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

WORDS = st.sampled_from(["=", "so", "the", "answer", "is", "\\boxed{", "}", "x", "then", ".", ",", "(", ")"])
TOKENS = st.one_of(
    st.integers(0, 10**6).map(str),
    st.tuples(st.integers(0, 999), st.integers(0, 99)).map(lambda t: f"{t[0]}.{t[1]:02d}"),
    st.sampled_from(["+", "-", "×", "÷", "*", "/"]),
    WORDS,
)
STEP = st.lists(TOKENS, min_size=1, max_size=12).map(lambda ts: " ".join(ts) + "\n")


def skeleton(text: str) -> str:
    """The text with every number and every spaced operator blanked: what a plant may not change."""
    return OPERATOR.sub("@", NUMBER.sub("#", text))


@given(st.lists(STEP, min_size=1, max_size=6), st.data(), st.booleans(), st.integers(0, 2**32))
@settings(max_examples=300, deadline=None)
def test_a_plant_changes_only_a_number_or_an_operator_inside_the_chosen_step(steps, data, operator, seed):
    at = data.draw(st.integers(0, len(steps) - 1))
    planted = plant(steps, at, random.Random(seed), operator=operator)
    if planted is None:  # only a step that states no number (nor, asked for one, an operator) is left alone
        assert not NUMBER.search(steps[at]) and not (operator and OPERATOR.search(steps[at]))
        return
    assert planted.step == at and len(planted.steps) == len(steps)
    assert [s for i, s in enumerate(planted.steps) if i != at] == [s for i, s in enumerate(steps) if i != at]
    new, old = planted.steps[at], steps[at]
    assert new != old and skeleton(new) == skeleton(old)  # the same text around one changed number/operator
    changed = {
        a
        for a, b in zip(
            NUMBER.findall(old) + OPERATOR.findall(old), NUMBER.findall(new) + OPERATOR.findall(new), strict=False
        )
        if a != b
    }
    assert changed == {planted.before}  # one value (each place it stands from the result on) or one operator


def test_a_plant_in_the_answer_step_turns_the_answer_wrong_and_an_earlier_one_keeps_it():
    steps = ["12 + 5 = 17\n", "17 × 3 = 51\n", "51 - 4 = 47. The answer is 47."]
    last = plant(steps, 2, random.Random(0))
    assert last is not None and "The answer is 47" not in last.steps[2] and last.before == "47"
    early = plant(steps, 0, random.Random(0))
    assert early is not None and early.steps[2] == steps[2] and early.steps[0] != steps[0]


def _judged_run(tmp_path: Path, **sections) -> Path:
    from _simulated_run import pipeline_data, write_run

    from prm_synth.simulated.engines import JUDGE_PROFILES

    data = pipeline_data(
        judge={"engine": JUDGE_PROFILES["realistic"].model_dump(mode="json"), "samples": 3},
        consensus={},
        output={"shard_size": 20},
        **sections,
    )
    return write_run(tmp_path / "run", data, limit=40)


def test_canaries_are_written_apart_and_never_reach_an_export_view(tmp_path):
    from prm_synth.export.views import VIEWS
    from prm_synth.export.writing import export_view
    from prm_synth.store.readers import iter_records, read_manifest

    root = _judged_run(tmp_path)
    canaries = [json.loads(p.read_text()) for p in sorted((root / "canaries").glob("shard-*.json"))]
    planted = [c for shard in canaries for c in shard]
    assert planted and all(c["id"].startswith(CANARY_PREFIX) for c in planted)
    data_ids = {r["id"] for r in iter_records(root)} | {r["id"] for r in iter_records(root, "rejected")}
    assert not any(i.startswith(CANARY_PREFIX) for i in data_ids)
    manifest = read_manifest(root)
    assert manifest["totals"]["stats"]["canaries"]["planted"] == len(planted)  # counted in the manifest
    for fmt in VIEWS:
        export_view(root, fmt, tmp_path / "views" / fmt, test_fraction=0.3)
        files = sorted((tmp_path / "views" / fmt).rglob("*.parquet"))
        ids = [i for f in files for i in pq.read_table(f).column("id").to_pylist()]
        assert files or fmt == "verifier", fmt  # the verifier view needs a verify stage's chains
        assert not any(i.startswith(CANARY_PREFIX) for i in ids), fmt
        assert set(ids) <= data_ids, fmt


def test_data_rows_are_the_same_with_canaries_on_or_off(tmp_path):
    """Canaries are extra solutions labeled apart: a run without a judge writes the same rows either way."""
    from _simulated_run import pipeline_data, write_run

    from prm_synth.store.readers import iter_records

    on = write_run(tmp_path / "on", pipeline_data(output={"shard_size": 20}), limit=40)
    off = write_run(tmp_path / "off", pipeline_data(output={"shard_size": 20}, canaries={"enabled": False}), limit=40)
    assert (
        list((on / "canaries").glob("*.json"))
        and not (off / "canaries").exists()
        or not list((off / "canaries").glob("*.json"))
    )
    assert list(iter_records(on)) == list(iter_records(off))


@pytest.mark.usefixtures("prefect_harness")
def test_a_killed_run_resumed_keeps_the_same_canaries_and_the_same_estimate(tmp_path):
    import yaml

    from flows.synthesize import synthesize
    from prm_synth.config import load_config
    from prm_synth.simulated.engines import JUDGE_PROFILES
    from prm_synth.store.summary import summarize

    data = yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text()) | {
        # a judge whose every answer reads: no row is left open, so the resume redoes exactly one shard
        "judge": {"engine": JUDGE_PROFILES["uniform-0.8"].model_dump(mode="json"), "samples": 3},
        "consensus": {},
        "output": {"shard_size": 20},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    config, out = load_config(path), tmp_path / "out"
    synthesize(config=config, out_dir=str(out), limit=60)
    before = {p.name: p.read_bytes() for p in (out / "canaries").glob("*.json")}
    estimate = summarize(out).estimated_precision()
    assert before and estimate is not None and estimate["good"] is not None
    # killed while writing shard 1: its marker never written, its canaries half there
    (out / "shards" / "shard-00001.json").unlink()
    (out / "canaries" / "shard-00001.json").write_bytes(b"[{")
    again = synthesize(config=config, out_dir=str(out), limit=60)
    assert again.run.shards_run == 1 and again.run.shards_skipped == 2
    assert {p.name: p.read_bytes() for p in (out / "canaries").glob("*.json")} == before
    assert summarize(out).estimated_precision() == estimate


def test_the_runs_estimate_holds_the_measured_precision():
    """A simulated run (60 questions, the realistic judge, 3 samples, the default consensus, canaries and
    audit) whose kept good labels are measured below 1 (the policy repairs early slips: development seed
    2), so the check can fail: the interval the run reports holds the measured precision, and says so
    without claiming the target."""
    import label_precision

    result = label_precision.run_case("repair", "realistic", 2, 60)
    assert result["kept"] >= 30
    e, m = result["audit"]["good"], result["measured"]["good"]
    assert m < 1.0, "the case no longer measures a wrong good label: the check below could not fail"
    assert e["low"] <= m <= e["high"], (e, m)
    assert result["audit_holds"]["good"] is True and result["target_met"] is False
    canaries = result["canaries"]
    assert canaries["planted"] >= 8 and canaries["right"]["canaries"] and canaries["wrong"]["canaries"]


def test_canary_counts_sum_over_shards_and_read_back():
    from dataclasses import asdict

    from prm_synth.records import ShardStats

    one = CanaryStats(
        planted=2,
        by_answer={"right": {"canaries": 2, "votes": 6, "named": 3, "missed": 3}},
        vote_keys={"0": 3, "miss": 3},
    )
    total = ShardStats(canaries=asdict(one)) + ShardStats(canaries=asdict(one))
    summed = CanaryStats.read(total.canaries)
    assert summed is not None and summed.planted == 4 and summed.of("right")["named"] == 6
    assert CanaryStats.read(ShardStats.from_dict(total.to_dict()).canaries) == summed
    assert CanaryStats.read(ShardStats().canaries) is None
    assert re.search(r"4 planted errors", summed.text())


def test_inspect_the_summary_and_the_card_say_how_right_the_labels_are(tmp_path):
    """`inspect --json` carries estimated_precision (good and bad: point and interval, per answer class,
    what it rests on and its limit) led by the audit, with the posterior's own figure beside it (resting on
    the canaries), and `target_met`; `inspect`, the run summary's words and the card say it too."""
    from typer.testing import CliRunner

    from prm_synth.cli import app
    from prm_synth.export.hub import export_to_dir
    from prm_synth.store.summary import PRECISION_LIMIT, summarize

    root = _judged_run(tmp_path)
    data = json.loads(CliRunner().invoke(app, ["inspect", str(root), "--json"]).output)
    report = data["estimated_precision"]
    for kind in ("good", "bad"):
        e = report[kind]
        assert 0.0 <= e["low"] <= e["point"] <= e["high"] <= 1.0 and e["labels"] > 0
    assert set(report["by_answer"]) == {"right", "wrong"}
    assert report["from"] == "audit" and report["rows_audited"] > 0 and "audited" in report["rests_on"]
    assert report["posterior"]["rests_on"]["planted"] > 0 and report["posterior"]["limit"] == PRECISION_LIMIT
    assert data["target_met"] is report["target_met"]
    text = summarize(root).precision_text()
    assert text is not None and "rows audited" in text and "planted errors" in text
    output = CliRunner().invoke(app, ["inspect", str(root)], env={"COLUMNS": "300"}).output
    shown = " ".join(output.replace("│", " ").split())  # a wrapped cell's lines, read as one text
    assert "estimated precision" in shown and "kept rows audited" in shown
    export_to_dir(root, tmp_path / "out", ["trl"])
    card = " ".join((tmp_path / "out" / "README.md").read_text(encoding="utf-8").split())
    assert "estimated precision of the kept labels" in card and "kept rows audited" in card


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 60),
    per_row=st.integers(1, 6),
    early=st.floats(0.0, 1.0),
    point=st.floats(0.9, 1.0),
)
def test_the_bad_interval_holds_what_the_canaries_measured_when_the_labelers_confidence_is_optimistic(
    rows, per_row, early, point
):
    """A world where the labeler's confidence is optimistic: the posterior expects the kept bad labels
    right with a tight spread (`point`, no variance), while the planted errors show the rollouts placing
    some first errors early (`early`: the share of the canaries' bad labels before the planted step).
    The reported bad interval must hold the precision pooled from both (what the kept labels measure
    when they err as the canaries do on as many labels), and the point stays the posterior's."""
    from prm_synth.records.canaries import precision_report

    labels = rows * per_row
    wrong = round(early * labels)
    canaries = CanaryStats(
        planted=rows,
        by_answer={"wrong": {"canaries": rows, "mc_at": rows, "mc_bad_labels": labels, "mc_bad_wrong": wrong}},
    )
    sums = {"bad_labels": 100.0, "bad_expected": 100.0 * point, "bad_var": 0.0, "bad_low": 100.0 * point}
    sums |= {"wrong:" + k: v for k, v in sums.items()}
    measured = (100.0 * point + labels - wrong) / (100.0 + labels)
    for report in (precision_report(sums, canaries), precision_report(sums, canaries)["by_answer"]["wrong"]):
        bad = report["bad"]
        assert bad["low"] <= round(measured, 4) <= bad["high"], (bad, measured)
        assert bad["point"] == round(point, 4)  # the point stays the posterior's
    alone = precision_report(sums)["bad"]  # without canaries the interval is the posterior's alone
    assert alone["low"] == alone["high"] == round(point, 4)


def test_canaries_count_the_bad_labels_the_rollouts_place_before_the_planted_step():
    """A canary planted at step 3 whose rollouts placed the first error at step 1: its bad labels are
    steps 1.. (the labeled ones), and the two before the planted step are wrong."""
    from prm_synth.records import LabeledRecord
    from prm_synth.shard.canaries import measure

    def canary(first_error: int, labels: list[bool | None]) -> LabeledRecord:
        n = len(labels)
        return LabeledRecord(
            id="s", problem_id="p", source="t", question="q", gold_answer="1", steps=[f"step {i}" for i in range(n)],
            final_answer="1", final_correct=True, mc_values=[None] * n, mc_correct=[0] * n, mc_total=[0] * n,
            labels=labels, label_source=["mc"] * n, label_rule="r", first_error_mc=first_error, annotator="a",
            policy_model="m", config_fingerprint="f", rollouts=0, tokens=0,
        )  # fmt: skip

    early = measure([(canary(1, [True, False, False, False, None]), 3)]).of("right")
    assert (early["mc_before"], early["mc_bad_labels"], early["mc_bad_wrong"]) == (1, 3, 2)
    late = measure([(canary(4, [True, True, True, True, False]), 3)]).of("right")
    assert (late["mc_after"], late["mc_bad_labels"], late["mc_bad_wrong"]) == (1, 1, 0)
    clean = measure([(canary(-1, [True] * 5), 3)]).of("right")
    assert (clean["mc_clean"], clean["mc_bad_labels"]) == (1, 0)


def test_the_bad_interval_holds_the_measured_precision_where_the_posterior_alone_is_too_sure():
    """A simulated run where the labeler's confidence is optimistic (the policy repairs early slips, a
    judge that misses errors there and repeats one reading; development seed 3): the posterior alone
    reports a bad interval that misses the kept bad labels' measured precision, and the interval the run
    reports, which also holds the canaries' measurement, contains it. With the former in-place canaries:
    the ones the policy continues measure the late placement and the posterior reads it (issue 57), so
    there the posterior alone is no longer too sure (test_continued_canaries_*)."""
    import label_precision

    result = label_precision.run_case("repair", "correlated", 3, 60, canaries={"planter": "in_place"})
    measured, bad = result["measured"]["bad"], result["estimated"]["bad"]
    low, high = result["posterior_bad_interval"]
    assert not low <= measured <= high, "the world no longer makes the posterior alone too sure"
    assert bad["low"] <= measured <= bad["high"], (bad, measured)
    assert bad["low"] <= low and bad["high"] >= high  # widened, never narrowed
    assert result["canaries"]["planted"] >= 8
