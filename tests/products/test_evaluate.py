"""Evaluation: ProcessBench's metric by hand, the bench file loader, the three `eval` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _eval_cli import BENCH, cli
from typer.testing import CliRunner

from prm_synth.config import JudgeConfig, SimulatedJudgeConfig, validate_config
from prm_synth.engines import build_engine
from prm_synth.grading.quality import first_error_quality, step_label_quality
from prm_synth.problems.gold_answers import gold_from_answer, load_gold_answers
from prm_synth.products.evaluate import (
    NotSimulatedError,
    bench_steps,
    evaluate_dataset,
    evaluate_judge,
    evaluate_labels,
    load_processbench,
)
from prm_synth.simulated.engines import SimulatedJudge
from prm_synth.store.given_labels import processbench_metric

FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLD = FIXTURES / "processbench_gold.jsonl"
PROCESSBENCH_GSM8K = Path("/work/shared/data/processbench/gsm8k.json")

SIM_PIPELINE = {
    "problems": {"kind": "builtin", "count": 20, "min_ops": 4, "max_ops": 8},
    "policy": {"kind": "simulated", "step_error": 0.0, "recover": 0.0},
    "annotate": {"method": "mc", "k": 4},
}


# ------------------------------------------------------------------ the metric
def test_processbench_metric_hand_computed():
    labels = [-1, -1, 2, 0, 1]
    preds = [-1, 3, 2, None, 1]
    m = processbench_metric(labels, preds)
    assert m["error_acc"] == pytest.approx(2 / 3)  # 2 right of 3 erroneous; no prediction is wrong
    assert m["correct_acc"] == pytest.approx(1 / 2)
    assert m["f1"] == pytest.approx(4 / 7)  # 2 * (2/3) * (1/2) / (2/3 + 1/2)
    assert (m["n_error"], m["n_correct"], m["no_prediction"]) == (3, 2, 1)


def test_processbench_metric_edges():
    assert processbench_metric([1, -1], [0, 2])["f1"] == 0.0
    assert processbench_metric([1, -1], [1, -1])["f1"] == 1.0
    only_errors = processbench_metric([0, 1], [0, 0])
    assert only_errors["correct_acc"] is None and only_errors["f1"] is None and only_errors["error_acc"] == 0.5
    # an error predicted at the wrong place is wrong on erroneous samples, -1 is right only on correct ones
    missed = processbench_metric([2, -1], [-1, -1])
    assert missed["error_acc"] == 0.0 and missed["correct_acc"] == 1.0
    assert processbench_metric([2, -1], [1, -1])["error_acc"] == 0.0  # the wrong step is no hit
    with pytest.raises(ValueError):
        processbench_metric([1], [])


def test_first_error_and_step_quality_hand_computed():
    # (pred, truth): hit, wrong index, missed, false alarm, both none
    q = first_error_quality([(2, 2), (1, 3), (-1, 0), (1, -1), (-1, -1), (None, 4)])
    assert q["exact_acc"] == pytest.approx(2 / 6)
    assert (q["predicted"], q["actual"], q["hit"]) == (3, 4, 1)
    assert q["precision"] == pytest.approx(1 / 3) and q["recall"] == pytest.approx(1 / 4)
    s = step_label_quality([([True, False, False], 2), ([True, True, None, False], -1)])
    # bad labels: steps 1, 2 of row 0 and step 3 of row 1; truly bad: step 2 of row 0
    assert (s["predicted"], s["actual"], s["hit"]) == (3, 1, 1)
    assert s["precision"] == pytest.approx(1 / 3) and s["recall"] == 1.0
    # good labels: step 0 of row 0, steps 0, 1 of row 1; all truly good
    assert (s["predicted_good"], s["good_hit"], s["good_precision"]) == (3, 3, 1.0)
    assert step_label_quality([([True, True], 1)])["good_precision"] == 0.5  # step 1 holds the error


# ------------------------------------------------------------------ files
def test_load_processbench_json_and_jsonl(tmp_path):
    samples = load_processbench(BENCH)
    assert [s.label for s in samples] == [-1, 0, 1, -1, 2, -1]
    assert samples[0].id == "fixture-0" and len(load_processbench(BENCH, limit=2)) == 2
    jl = tmp_path / "b.jsonl"
    jl.write_text('{"problem": "p", "steps": ["a", "b"], "label": 1}\n\n')
    (s,) = load_processbench(jl)
    assert s.id == "row-0" and s.steps == ["a", "b"]
    for bad in (
        '{"problem": "p", "steps": ["a"], "label": 1}',
        '{"problem": "p", "steps": [], "label": -1}',
        '{"problem": "p", "steps": ["a"], "label": true}',
        '{"steps": ["a"], "label": -1}',
    ):
        jl.write_text(bad + "\n")
        with pytest.raises(ValueError, match="row 0"):
            load_processbench(jl)


@pytest.mark.skipif(not PROCESSBENCH_GSM8K.exists(), reason="shared ProcessBench data not here")
def test_real_processbench_file_loads():
    samples = load_processbench(PROCESSBENCH_GSM8K)
    assert len(samples) == 400 and sum(s.label == -1 for s in samples) == 193


def test_gold_answers_join_by_problem_text():
    assert gold_from_answer("so 3 + 4 = 7\n#### 1,234") == "1234"
    assert gold_from_answer(" 42 ") == "42"
    gold = load_gold_answers(GOLD)
    bench = load_processbench(BENCH)
    assert sum(" ".join(s.problem.split()) in gold for s in bench) == 5
    assert bench_steps(["a", "b", "c"]) == ["a\n\n", "b\n\n", "c"]


# ------------------------------------------------------------------ eval judge
def test_evaluate_judge_with_a_perfect_simulated_judge():
    samples = load_processbench(BENCH)
    config = JudgeConfig(engine=SimulatedJudgeConfig(accuracy=1.0), samples=3)
    metric, preds = evaluate_judge(SimulatedJudge(config.engine), samples, config, max_batch_requests=4)
    assert metric["f1"] == 1.0 and metric["error_acc"] == 1.0 and metric["correct_acc"] == 1.0
    assert [p["prediction"] for p in preds] == [s.label for s in samples]
    assert all(p["votes"] == [p["label"]] * 3 for p in preds)


def test_eval_judge_command_writes_predictions_that_reproduce_the_metric(tmp_path):
    judge_yaml = tmp_path / "judge.yaml"
    judge_yaml.write_text(
        yaml.safe_dump({"judge": {"engine": {"kind": "simulated-judge", "accuracy": 0.5, "seed": 4}, "samples": 3}})
    )
    out = tmp_path / "preds.jsonl"
    result = CliRunner().invoke(cli(), ["eval", "judge", str(BENCH), "--judge", str(judge_yaml), "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 6 and set(rows[0]) >= {"id", "label", "prediction", "votes"}
    assert processbench_metric([r["label"] for r in rows], [r["prediction"] for r in rows])["f1"] == report["f1"]
    assert "F1" in result.output


def test_eval_judge_command_accepts_a_pipeline_yaml_and_overrides(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump(SIM_PIPELINE | {"judge": {"engine": {"kind": "simulated-judge"}}}))
    out = tmp_path / "p.jsonl"
    args = ["eval", "judge", str(BENCH), "--judge", str(pipeline), "--samples", "2", "--limit", "3", "--out", str(out)]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    assert all(len(json.loads(x)["votes"]) == 2 for x in out.read_text().splitlines())
    # a pipeline without a judge, or neither --judge nor --model, is a clear error
    pipeline.write_text(yaml.safe_dump(SIM_PIPELINE))
    assert (
        "no judge section" in CliRunner().invoke(cli(), ["eval", "judge", str(BENCH), "--judge", str(pipeline)]).output
    )
    assert CliRunner().invoke(cli(), ["eval", "judge", str(BENCH)]).exit_code == 2


# ------------------------------------------------------------------ eval labels
def test_evaluate_labels_with_a_noise_free_policy_is_exact():
    config = validate_config(SIM_PIPELINE)
    samples = load_processbench(BENCH)
    metric, preds = evaluate_labels(build_engine(config.policy), samples, load_gold_answers(GOLD), config)
    # a wrong prefix never recovers and a right one always finishes: MC finds every first error
    assert metric["labeled"] == 5 and metric["skipped_no_gold"] == 1
    assert metric["f1"] == 1.0
    assert preds[5]["skipped"] is True and preds[5]["prediction"] is None
    assert all(p["rollouts"] > 0 for p in preds[:5])
    assert metric["rollouts_per_sample"] == pytest.approx(sum(p["rollouts"] for p in preds[:5]) / 5)


def test_eval_labels_command(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump(SIM_PIPELINE))
    out = tmp_path / "labels.jsonl"
    result = CliRunner().invoke(
        cli(),
        ["eval", "labels", str(BENCH), "--gold-answers", str(GOLD), "--pipeline", str(pipeline), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["skipped_no_gold"] == 1 and report["f1"] == 1.0 and report["rollouts_per_sample"] > 0
    assert len(out.read_text().splitlines()) == 6


# ------------------------------------------------------------------ eval dataset
def make_dataset(root: Path, consensus: str | None = "agree") -> None:
    """A small simulated dataset written the way the flow writes it (shard store, no Prefect)."""
    from _simulated_run import write_run

    data = {
        "problems": {"kind": "builtin", "count": 30, "min_ops": 5, "max_ops": 10},
        "policy": {"kind": "simulated", "step_error": 0.1, "recover": 0.2},
        "sampling": {"samples_per_problem": 2},
        "judge": {"engine": {"kind": "simulated-judge", "accuracy": 0.8}},
        "output": {"shard_size": 10},
    }
    data["consensus"] = {"policy": consensus} if consensus else None  # None: the judge's verdicts only recorded
    write_run(root, data)


def test_evaluate_dataset_before_and_after_consensus(tmp_path):
    make_dataset(tmp_path)
    report = evaluate_dataset(tmp_path)
    before, after = report["before_consensus"], report["after_consensus"]
    assert before["rows"] == 60 and after["rows"] == 60 - report["consensus_rejected"]
    assert 0 < report["kept_fraction"] < 1
    assert after["first_error_mc"]["precision"] >= before["first_error_mc"]["precision"]
    assert before["first_error_judge"]["rows"] == 60
    assert report["rollouts_per_kept_row"] == pytest.approx(before["rollouts"] / after["rows"])

    result = CliRunner().invoke(cli(), ["eval", "dataset", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "before_consensus" in result.output and "{" not in result.output  # a table, no JSON blob after it
    result = CliRunner().invoke(cli(), ["eval", "dataset", str(tmp_path), "--json"])
    assert json.loads(result.output.strip().splitlines()[-1]) == report


def test_evaluate_dataset_without_consensus_is_the_same_before_and_after(tmp_path):
    make_dataset(tmp_path, consensus=None)
    report = evaluate_dataset(tmp_path)
    assert report["before_consensus"] == report["after_consensus"] and report["kept_fraction"] == 1.0


def test_evaluate_dataset_refuses_datasets_without_a_recomputable_truth(tmp_path):
    make_dataset(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["config"]["policy"] = {"kind": "vllm", "model": "x"}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(NotSimulatedError):
        evaluate_dataset(tmp_path)
    assert CliRunner().invoke(cli(), ["eval", "dataset", str(tmp_path)]).exit_code == 2
