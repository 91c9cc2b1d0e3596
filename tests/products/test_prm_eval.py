"""`prm-synth eval prm`: samples, scores, the predicted first error, threshold tuning, ProcessBench's F1."""

from __future__ import annotations

import json

import pytest
from _prm_helpers import PROCESSBENCH, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.products.evaluate import BenchSample
from prm_synth.products.prm_eval import (
    PRMEvalError,
    balanced,
    evaluate_prm,
    first_error,
    load_bench,
    one_class_note,
    score_steps,
    tune_threshold,
)


def _samples(labels: list[int]) -> list[BenchSample]:
    return [BenchSample(f"s{i}", "Q?", ["a", "b", "c", "d"], lab) for i, lab in enumerate(labels)]


@settings(deadline=None)  # a busy machine: no per-example time limit
@given(st.lists(st.integers(-1, 3), max_size=40), st.integers(1, 50))
def test_a_limited_sample_is_half_erroneous_half_correct_in_file_order(labels, limit):
    samples = _samples(labels)
    chosen = balanced(samples, limit)
    assert len(chosen) == min(limit, len(samples))
    ids = [s.id for s in chosen]
    assert ids == [s.id for s in samples if s.id in set(ids)]  # file order, no repeats
    n_correct = sum(s.label == -1 for s in chosen)
    available = labels.count(-1)
    assert n_correct == min(available, max(limit // 2, len(chosen) - (len(labels) - available)))


def test_first_error_is_the_first_step_below_the_threshold():
    assert first_error([0.9, 0.4, 0.1], 0.5) == 1
    assert first_error([0.9, 0.8], 0.5) == -1
    assert first_error([], 0.5) == -1
    assert first_error([0.6, 0.55], 0.6) == 1


def test_the_tuned_threshold_maximizes_processbench_f1_on_its_samples():
    scores = [[0.9, 0.3, 0.2], [0.9, 0.8, 0.7], [0.2, 0.9], [0.95, 0.85]]
    labels = [1, -1, 0, -1]
    t = tune_threshold(scores, labels)
    assert 0.3 < t <= 0.7  # any threshold in (0.3, 0.7] gets all four right; 0.5 is preferred among ties
    assert t == 0.5


def test_the_bench_folder_and_its_errors(tmp_path):
    data = load_bench(PROCESSBENCH, ["gsm8k"], limit=4)
    assert list(data) == ["gsm8k"] and [s.label == -1 for s in data["gsm8k"]].count(True) == 2
    with pytest.raises(PRMEvalError, match="no subset file"):
        load_bench(PROCESSBENCH, ["nope"])
    one = tmp_path / "mine.jsonl"
    one.write_text(json.dumps({"problem": "Q", "steps": ["a"], "label": -1}) + "\n")
    assert list(load_bench(one)) == ["mine"]


def test_each_step_gets_a_score_until_truncation(tmp_path):
    from prm_synth.products.prm_eval import load_prm

    model = tiny_model(tmp_path / "base")
    from transformers import AutoModelForTokenClassification

    AutoModelForTokenClassification.from_pretrained(model, num_labels=2).save_pretrained(tmp_path / "prm")
    (tmp_path / "base" / "tokenizer.json").rename(tmp_path / "prm" / "tokenizer.json")
    for f in ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (tmp_path / "base" / f).exists():
            (tmp_path / "base" / f).rename(tmp_path / "prm" / f)
    prm, tok, separator = load_prm(tmp_path / "prm")
    samples = _samples([0, -1, 2])
    scores = score_steps(prm, tok, samples, separator, max_length=512, batch_size=2)
    assert [len(s) for s in scores] == [4, 4, 4] and all(0.0 <= x <= 1.0 for s in scores for x in s)
    short = score_steps(prm, tok, samples, separator, max_length=6, batch_size=2)
    assert all(len(s) < 4 for s in short)
    # batching pads; padding must not change a sample's scores
    alone = score_steps(prm, tok, samples[:1], separator, max_length=512, batch_size=1)
    assert alone[0] == pytest.approx(scores[0], abs=1e-5)

    with pytest.raises(PRMEvalError, match="--tune-on"):
        evaluate_prm(tmp_path / "prm", PROCESSBENCH, ["gsm8k"], limit=2, tune_on="math")
    report = evaluate_prm(tmp_path / "prm", PROCESSBENCH, ["gsm8k", "math"], limit=4, tune_on="gsm8k", max_length=128)
    assert report["tuned_on"] == "gsm8k" and report["threshold"] in [round(0.05 * i, 2) for i in range(1, 20)]
    assert set(report["f1"]) == {"gsm8k", "math"}


def test_a_model_without_two_labels_is_refused(tmp_path):
    from transformers import AutoModelForTokenClassification

    model = tiny_model(tmp_path / "base")
    AutoModelForTokenClassification.from_pretrained(model, num_labels=3).save_pretrained(tmp_path / "three")
    with pytest.raises(PRMEvalError, match="2 labels"):
        evaluate_prm(tmp_path / "three", PROCESSBENCH, ["gsm8k"], limit=2)


def test_every_processbench_sample_labels_a_step_it_has_or_none():
    data = load_bench(PROCESSBENCH, ["gsm8k"])
    assert data["gsm8k"]
    for sample in data["gsm8k"]:
        assert sample.steps and -1 <= sample.label < len(sample.steps), sample.id


def _metric(n_error: int, n_correct: int, flagged: int) -> dict:
    return {"n_error": n_error, "n_correct": n_correct, "flagged": flagged}


def test_a_prm_with_one_answer_for_every_sample_is_named_and_pointed_to_tune_on():
    everything_good = {"gsm8k": _metric(3, 3, 0), "math": _metric(2, 2, 0)}
    note = one_class_note(everything_good, 0.5, None)
    assert note is not None and "calls every step good" in note and "--tune-on" in note
    assert "every sample" in one_class_note({"gsm8k": _metric(3, 3, 6)}, 0.5, None)
    assert one_class_note({"gsm8k": _metric(3, 3, 2), "math": _metric(2, 2, 0)}, 0.5, None) is None
    assert "--tune-on SUBSET" not in one_class_note(everything_good, 0.3, "gsm8k")  # already tuned
