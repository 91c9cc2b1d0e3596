"""What a PRM researcher meets in the first hour: rows to read in the terminal (`show`, `inspect`), soft
targets in the views (`export --soft`), the `majority` rule under its honest name, Hugging Face sources
with `data_files`, and typos named in config errors."""

from __future__ import annotations

import json
import logging

import pyarrow.parquet as pq
import pytest
import yaml
from _cli_output import one_line_error
from _simulated_run import MC_ANNOTATE, pipeline_data, write_run
from _tokenizers import qwen_like_bpe
from typer.testing import CliRunner

from prm_synth.annotate.annotation import Annotation
from prm_synth.cli import app
from prm_synth.config import ConfigError, HFSource, validate_config
from prm_synth.export.hub import export_to_dir, plan_export
from prm_synth.problems.sources import iter_problems
from prm_synth.records import Problem
from prm_synth.records.labels import apply_rule
from prm_synth.store.readers import iter_records

SIM = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}}


@pytest.fixture(scope="module")
def mc_run(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("mc") / "run", pipeline_data(annotate=MC_ANNOTATE), 30)


@pytest.fixture(scope="module")
def changepoint_run(tmp_path_factory):
    # binary's default search is the change-point test (search_test: changepoint), which estimates p_good
    data = pipeline_data(annotate={"method": "binary"}, policy={"kind": "simulated", "recover": 0.2})
    return write_run(tmp_path_factory.mktemp("binary") / "run", data, 30)


def _rows(folder):
    return [
        r
        for f in sorted(folder.glob("train-*.parquet")) + sorted(folder.glob("test-*.parquet"))
        for r in pq.read_table(f).to_pylist()
    ]


# ---------------------------------------------------------------- show and inspect
def test_show_bad_renders_rows_with_a_bad_step_their_labels_and_cost(mc_run):
    result = CliRunner().invoke(app, ["show", str(mc_run), "--n", "2", "--bad"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    bad_rows = [r for r in iter_records(mc_run) if False in r["labels"]][:2]
    assert len(bad_rows) == 2
    for row in bad_rows:
        assert f"{row['id']}  answer {row['final_answer']}" in result.output
        assert f"cost {row['rollouts']} rollouts, {row['tokens']} tokens" in result.output
        assert " ".join(row["steps"][0].split())[:40] in result.output
    assert "bad" in result.output and "good" in result.output and "p_good" in result.output
    good_only = next(r for r in iter_records(mc_run) if False not in r["labels"])
    assert good_only["id"] not in result.output


def _step_cells(block: str) -> list[list[str]]:
    """The table lines of one shown row that start a step (a wrapped step text continues on lines without #)."""
    cells = [[c.strip() for c in line.strip().strip("│").split("│")] for line in block.splitlines()]
    return [c for c in cells if len(c) == 7 and c[0].isdigit()]


def test_show_prints_each_steps_label_source_p_good_and_why_unlabeled(changepoint_run):
    rows = list(iter_records(changepoint_run))[:12]
    result = CliRunner().invoke(app, ["show", str(changepoint_run), "--n", str(len(rows))], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    starts = [result.output.index(f"{row['id']}  answer") for row in rows]
    blocks = [result.output[a:b] for a, b in zip(starts, [*starts[1:], len(result.output)], strict=True)]
    unlabeled = 0
    for row, block in zip(rows, blocks, strict=True):
        cells = _step_cells(block)
        assert [c[0] for c in cells] == [str(i) for i in range(len(row["steps"]))]
        for c, label, source, p, why in zip(
            cells, row["labels"], row["label_source"], row["p_good"], row["unlabeled_reason"], strict=True
        ):
            if label is not None:
                assert c[2] == ("good" if label else "bad")
            assert c[3] == source
            assert c[5] == (f"{p:.2f}" if p is not None else "-")
            assert c[6] == (why or "")
            unlabeled += why is not None
    assert unlabeled > 0  # the rows shown include unlabeled steps, so their reasons were checked


def test_show_and_inspect_refuse_a_folder_that_is_not_a_run(tmp_path):
    for command in ("show", "inspect"):
        line = one_line_error(CliRunner().invoke(app, [command, str(tmp_path)]))
        assert str(tmp_path) in line


def test_inspect_prints_a_table_not_json(mc_run):
    result = CliRunner().invoke(app, ["inspect", str(mc_run)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.output)
    summary = json.loads(CliRunner().invoke(app, ["inspect", str(mc_run), "--json"]).output)
    assert f"│ rows out              │ {summary['rows']}" in result.output
    cost = f"{summary['rollouts_per_labeled_step']:.1f} rollouts, {summary['tokens_per_labeled_step']:.1f} tokens"
    assert cost in result.output


# ---------------------------------------------------------------- soft targets
def test_soft_trl_targets_are_the_mc_values_of_the_supervised_steps(mc_run, tmp_path):
    plan = plan_export(mc_run, soft="auto")  # no p_good in an mc run: its MC values
    assert (plan.soft, plan.formats) == ("mc", ["trl"])
    export_to_dir(mc_run, tmp_path, plan=plan)
    records = {r["id"]: r for r in iter_records(mc_run)}
    rows = _rows(tmp_path / "trl")
    assert (
        rows
        and pq.read_schema(next((tmp_path / "trl").glob("train-*.parquet"))).field("labels").type.value_type == "double"
    )
    for row in rows:
        record = records[row["id"]]
        assert row["labels"] == record["mc_values"][: len(row["completions"])]
    assert any(0 < v < 1 for row in rows for v in row["labels"])  # soft, not 0/1
    assert json.loads((tmp_path / "trl" / "view.json").read_text())["soft_targets"] == "mc_values"
    assert "**soft targets**" in (tmp_path / "README.md").read_text(encoding="utf-8")


def test_soft_openrlhf_values_are_p_good_and_its_consumer_finds_every_one(changepoint_run, tmp_path):
    plan = plan_export(changepoint_run, ["openrlhf"], qwen_like_bpe(), soft="auto")
    assert plan.soft == "p_good" and plan.checks["openrlhf"]["labels"] == plan.checks["openrlhf"]["labels_found"] > 0
    export_to_dir(changepoint_run, tmp_path, plan=plan)
    records = {r["id"]: r for r in iter_records(changepoint_run)}
    for row in _rows(tmp_path / "openrlhf"):
        assert row["value"] == records[row["id"]]["p_good"][: len(row["value"])]
        assert row["input"].count(plan.marker.placeholder) == len(row["value"])
    from datasets import load_dataset

    ds = load_dataset(str(tmp_path), "openrlhf", cache_dir=str(tmp_path / "cache"))
    assert ds["train"].features["value"].feature.dtype == "float64"


def test_a_step_without_a_soft_target_ends_the_row(changepoint_run, tmp_path):
    """A binary search infers labels without measuring: those steps have no MC value to train toward."""
    plan = plan_export(changepoint_run, ["trl"], soft="mc")
    export = export_to_dir(changepoint_run, tmp_path, plan=plan).views["trl"]
    records = {r["id"]: r for r in iter_records(changepoint_run)}
    for row in _rows(tmp_path / "trl"):
        assert None not in records[row["id"]]["mc_values"][: len(row["labels"])]
    hard = export_to_dir(changepoint_run, tmp_path / "hard", ["trl"]).views["trl"]
    assert sum(s.steps for s in export.splits.values()) < sum(s.steps for s in hard.splits.values())


def test_soft_refuses_views_with_token_labels_and_p_good_a_run_lacks(mc_run, tmp_path):
    runner = CliRunner()
    line = one_line_error(
        runner.invoke(app, ["export", str(mc_run), "--to-dir", str(tmp_path / "a"), "--soft", "-f", "math-shepherd"])
    )
    assert "math-shepherd" in line and "trl and openrlhf" in line
    args = ["export", str(mc_run), "--to-dir", str(tmp_path / "b"), "--soft", "--soft-from", "p_good"]
    assert "no p_good" in one_line_error(runner.invoke(app, args))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_train_refuses_a_soft_view(mc_run, tmp_path):
    from prm_synth.products.train import TrainError, load_examples

    export_to_dir(mc_run, tmp_path, plan=plan_export(mc_run, ["trl"], soft="mc"))
    with pytest.raises(TrainError, match="soft"):
        load_examples(tmp_path / "trl")


# ---------------------------------------------------------------- the majority rule, formerly `soft`
def test_the_majority_rule_is_mc_at_least_a_half():
    ann = Annotation("mc", [16, 8, 7], [16, 16, 16], ["mc", "mc", "mc"])
    assert apply_rule(ann, "majority").labels == [True, True, False]


def test_an_old_soft_rule_loads_as_majority_with_a_warning_and_the_same_fingerprint(caplog):
    with caplog.at_level(logging.WARNING, logger="prm_synth.config.upgrade"):
        old = validate_config(SIM | {"labels": {"rule": "soft"}})
    assert old.labels.rule == "majority"
    assert "labels.rule: soft is now labels.rule: majority" in caplog.text
    new = validate_config(SIM | {"labels": {"rule": "majority"}})
    assert old.fingerprint() == new.fingerprint() != validate_config(SIM).fingerprint()


# ---------------------------------------------------------------- typos
@pytest.mark.parametrize(
    ("data", "line"),
    [
        (SIM | {"annotate": {"methd": "mc"}}, "annotate.methd: unknown key (did you mean `method`?)"),
        (
            {"problems": {"kind": "builtin"}, "polcy": {"kind": "simulated"}},
            "polcy: unknown key (did you mean `policy`?)",
        ),
        (SIM | {"annotate": {"method": "mc", "kk": 3}}, "annotate.mc.kk: unknown key (did you mean `k`?)"),
        (SIM | {"sampling": {"samples_per_problm": 2}}, "sampling.samples_per_problm: unknown key (did you mean"),
        ({"problems": {"knd": "builtin"}, "policy": {"kind": "simulated"}}, "unknown key `knd` (did you mean `kind`?)"),
        (SIM | {"judge": {"engine": {"kind": "simulated-judge", "acuracy": 0.3}}}, "(did you mean `accuracy`?)"),
    ],
)
def test_a_typo_is_named_with_the_key_meant(data, line):
    with pytest.raises(ConfigError) as e:
        validate_config(data, "p.yaml")
    assert line in str(e.value)


def test_a_typo_in_a_pipeline_file_is_named_by_run(tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline_data(annotate={"methd": "mc"})))
    result = CliRunner().invoke(app, ["run", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "annotate.methd: unknown key (did you mean `method`?)" in result.output


# ---------------------------------------------------------------- Hugging Face sources with data_files
def test_an_hf_source_reads_data_files(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    data = tmp_path / "gsm8k_test.jsonl"
    data.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"#### {i}"}) + "\n" for i in range(3)))
    config = validate_config(
        {
            "problems": {"kind": "hf", "path": "json", "data_files": str(data), "split": "train", "preset": "gsm8k"},
            "policy": {"kind": "vllm", "model": "demo"},
        }
    )
    assert isinstance(config.problems, HFSource) and config.problems.data_files == str(data)
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    assert [(p.question, p.gold_answer) for p in problems] == [("q0", "0"), ("q1", "1"), ("q2", "2")]
