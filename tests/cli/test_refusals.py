"""Requests that could only produce nonsense are refused in one line before any work starts: a minimum
confidence on a run without p_good, the simulated policy on text it does not write, and an unlabeled step
always says why it is unlabeled."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml
from _cli_output import one_line_error
from _simulated_run import pipeline_data, write_run
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.config import ConfigError, validate_config
from prm_synth.records.labels import unlabeled_reasons
from prm_synth.simulated.solvable import PolicyCannotSolveError, check_policy_can_solve
from prm_synth.store.readers import iter_records

GSM8K_ROWS = [
    {
        "question": "Janet's ducks lay 16 eggs per day. She eats three for breakfast. How many are left?",
        "answer": "#### 13",
    },
    {
        "question": "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts?",
        "answer": "#### 3",
    },
]


@pytest.fixture(scope="module")
def mc_run(tmp_path_factory):
    data = pipeline_data(annotate={"method": "mc", "k": 8, "stop_at_first_zero": True})  # unprobed steps
    return write_run(tmp_path_factory.mktemp("mc") / "run", data, 12)


@pytest.fixture(scope="module")
def changepoint_run(tmp_path_factory):
    # binary's default search is the change-point test, which estimates p_good
    data = pipeline_data(annotate={"method": "binary"}, policy={"kind": "simulated", "recover": 0.2})
    return write_run(tmp_path_factory.mktemp("binary") / "run", data, 24)


# ---------------------------------------------------------------- a minimum confidence needs p_good
def test_export_min_confidence_on_a_run_without_p_good_is_refused_and_writes_nothing(mc_run, tmp_path):
    out = tmp_path / "out"
    args = ["export", str(mc_run), "--to-dir", str(out), "--min-confidence", "0.9"]
    line = one_line_error(CliRunner().invoke(app, args))
    assert "--min-confidence 0.9 needs per-step p_good" in line and "method mc" in line
    assert not out.exists()


def test_export_min_confidence_keeps_only_labels_that_meet_it(changepoint_run, tmp_path):
    args = ["export", str(changepoint_run), "--to-dir", str(tmp_path / "out"), "--min-confidence", "0.99", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    trl = json.loads(result.output)["views"]["trl"]
    records = {r["id"]: r for r in iter_records(changepoint_run)}
    rows = [r for f in sorted((tmp_path / "out" / "trl").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert len(rows) == trl["rows"] > 0
    for row in rows:  # every exported label is the record's own, held with at least the minimum confidence
        record, n = records[row["id"]], len(row["labels"])
        assert row["labels"] == record["labels"][:n]
        assert all((p if good else 1 - p) >= 0.99 for good, p in zip(row["labels"], record["p_good"], strict=False))
    splits = trl["splits"].values()
    # the threshold took labels away: fewer supervised steps than the same rows hold without it
    assert sum(s["steps"] for s in splits) < sum(s["steps_before_confidence"] for s in splits)


def test_a_pipeline_with_min_confidence_and_a_method_without_p_good_is_refused():
    base = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}, "labels": {"min_confidence": 0.9}}
    with pytest.raises(ConfigError, match="labels.min_confidence needs per-step p_good"):
        validate_config(base | {"annotate": {"method": "mc"}})
    with pytest.raises(ConfigError, match="annotate.method binary"):
        validate_config(base | {"annotate": {"method": "binary", "search_test": "sprt"}})
    assert validate_config(base).labels.min_confidence == 0.9  # the change-point search, the default


# ---------------------------------------------------------------- the simulated policy solves its own problems only
def _gsm8k_file(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in GSM8K_ROWS))
    return path


def test_the_simulated_policy_on_gsm8k_text_is_refused_before_anything_is_written(tmp_path):
    data = pipeline_data(problems={"kind": "file", "path": str(_gsm8k_file(tmp_path)), "preset": "gsm8k"})
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    line = one_line_error(CliRunner().invoke(app, ["run", str(tmp_path / "p.yaml"), "--out", str(out)]))
    assert "the simulated policy writes solutions only for its own arithmetic problems" in line
    assert "Janet" in line and "kind: vllm or openai" in line
    assert not out.exists()


def test_the_simulated_policy_on_a_hugging_face_gsm8k_source_is_refused_too(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    source = {
        "kind": "hf",
        "path": "json",
        "data_files": str(_gsm8k_file(tmp_path)),
        "split": "train",
        "preset": "gsm8k",
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline_data(problems=source)))
    out = tmp_path / "out"
    line = one_line_error(CliRunner().invoke(app, ["run", str(tmp_path / "p.yaml"), "--out", str(out)]))
    assert "the simulated policy writes solutions only for its own arithmetic problems" in line
    assert not out.exists()


def test_a_file_of_builtin_problem_text_is_accepted(tmp_path):
    import random

    from prm_synth.simulated.arithmetic import generate

    problems = [generate(random.Random(i)) for i in range(3)]
    check_policy_can_solve(
        validate_config(pipeline_data()).policy, [(str(i), p.question()) for i, p in enumerate(problems)]
    )
    vllm = validate_config(pipeline_data(policy={"kind": "vllm", "model": "demo"})).policy
    check_policy_can_solve(vllm, [("g", GSM8K_ROWS[0]["question"])])  # a real policy reads anything
    with pytest.raises(PolicyCannotSolveError):
        check_policy_can_solve(validate_config(pipeline_data()).policy, [("g", GSM8K_ROWS[0]["question"])])


def test_eval_labels_with_the_simulated_policy_on_gsm8k_text_is_refused(tmp_path):
    bench = tmp_path / "bench.jsonl"
    row = {"id": "gsm8k-0", "problem": GSM8K_ROWS[0]["question"], "steps": ["16 - 3 = 13."], "label": -1}
    bench.write_text(json.dumps(row) + "\n")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline_data()))
    args = ["eval", "labels", str(bench), "--gold-answers", str(_gsm8k_file(tmp_path)), "--pipeline"]
    line = one_line_error(CliRunner().invoke(app, [*args, str(tmp_path / "p.yaml"), "--out", str(tmp_path / "o")]))
    assert "problem gsm8k-0 is not one" in line
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- every unlabeled step says why
@pytest.mark.parametrize("run", ["mc_run", "changepoint_run"])
def test_an_unlabeled_step_always_has_a_reason_and_a_labeled_one_none(run, request):
    rows = list(iter_records(request.getfixturevalue(run)))
    assert any(None in r["labels"] for r in rows)
    for r in rows:
        assert [lab is None for lab in r["labels"]] == [why is not None for why in r["unlabeled_reason"]], r["id"]


@given(
    st.lists(st.sampled_from([True, False, None]), max_size=12).flatmap(
        lambda labels: st.tuples(
            st.just(labels),
            st.none()
            | st.lists(st.sampled_from([None, "undecided_budget"]), min_size=len(labels), max_size=len(labels)),
        )
    )
)
def test_unlabeled_reasons_name_every_unlabeled_step(case):
    labels, given_reasons = case
    first_error = next((i for i, lab in enumerate(labels) if lab is False), -1)
    reasons = unlabeled_reasons(labels, first_error, given_reasons)
    assert [lab is None for lab in labels] == [why is not None for why in reasons]
    for i, why in enumerate(reasons):
        if why is not None and given_reasons and given_reasons[i]:
            assert why == given_reasons[i]  # the annotator's own reason wins
        elif why is not None:
            assert why == ("after_error" if 0 <= first_error < i else "undecided_verdict")
