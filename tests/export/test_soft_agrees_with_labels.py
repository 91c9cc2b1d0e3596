"""Soft targets, p_good.png and every view read the labels' final probability (issue 60, part 2): where
the judge set a label, the consensus's, so a soft target is >= 0.5 exactly where the hard label is good,
on every step of every view of a judged run (soft consensus, and the policies that set labels without a
posterior: `agree`, `judge-only`)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from _simulated_run import pipeline_data, write_run
from _tokenizers import qwen_like_bpe
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.export.hub import export_to_dir, plan_export
from prm_synth.export.plots import gather
from prm_synth.export.rows import label_probability
from prm_synth.export.views import SOFT_VIEWS, VIEWS
from prm_synth.export.writing import export_view
from prm_synth.store.readers import iter_records

PROBLEMS = 100
STEP_VIEWS = [name for name, view in VIEWS.items() if view.step_labels]


@pytest.fixture(scope="module", params=["soft", "agree", "judge-only"])
def judged_run(request, tmp_path_factory):
    """A judged simulated run (pipelines/simulated-consensus.yaml) under each consensus policy."""
    data = pipeline_data("simulated-consensus", consensus={"policy": request.param, "confidence": 0.9})
    root = write_run(tmp_path_factory.mktemp(request.param) / "run", data, PROBLEMS)
    records = {r["id"]: r for r in iter_records(root)}
    # the case the issue is about: labels the judge set where the labeler's p_good disagrees
    assert any(
        (p >= 0.5) != lab
        for r in records.values()
        for lab, p, source in zip(r["labels"], r["p_good"], r["label_source"], strict=True)
        if source == "consensus" and lab is not None and p is not None
    )
    return root, records


def _rows(folder):
    return [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def _hard_labels(fmt: str, row: dict, placeholder: str = "ки") -> list[bool]:
    """A hard view row's step labels, as its trainer reads them."""
    if fmt == "trl":
        return list(row["labels"])
    if fmt == "qwen":
        return [bool(x) for x in row["labels"]]
    if fmt == "openrlhf":
        return [x == "+" for x in row["value"]]
    # math-shepherd: `label` is `input` with a +/- in place of each step tag
    tags, at = [], 0
    for piece in row["input"].split(placeholder)[:-1]:
        at += len(piece)
        tags.append(row["label"][at] == "+")
        at += 1
    return tags


def _soft_targets(fmt: str, row: dict) -> list[float]:
    return list(row["labels"] if fmt == "trl" else row["value"])


def test_soft_targets_agree_with_the_hard_labels_of_every_view(judged_run, tmp_path):
    root, records = judged_run
    tokenizer = qwen_like_bpe()
    soft_plan = plan_export(root, None, tokenizer, soft="auto")
    assert soft_plan.soft == "p_good" and sorted(soft_plan.formats) == sorted(SOFT_VIEWS)
    export_to_dir(root, tmp_path / "soft", plan=soft_plan)
    hard_plan = plan_export(root, STEP_VIEWS, tokenizer)
    export_to_dir(root, tmp_path / "hard", plan=hard_plan)
    tag = hard_plan.marker.placeholder
    hard = {fmt: {r["id"]: _hard_labels(fmt, r, tag) for r in _rows(tmp_path / "hard" / fmt)} for fmt in STEP_VIEWS}
    compared = 0
    for soft_fmt in SOFT_VIEWS:
        for row in _rows(tmp_path / "soft" / soft_fmt):
            targets = _soft_targets(soft_fmt, row)
            for fmt in STEP_VIEWS:
                labels = hard[fmt].get(row["id"])
                if labels is None:  # a view may refuse a row on its own grounds (its marker in the text)
                    continue
                assert len(targets) == len(labels), (soft_fmt, fmt, row["id"])
                for target, good in zip(targets, labels, strict=True):
                    assert (target >= 0.5) == good, (soft_fmt, fmt, row["id"], targets, labels)
                    compared += 1
    assert compared > 4 * sum(len(r["labels"]) for r in records.values()) // 2  # most steps, in every view


def test_the_command_exports_soft_targets_that_agree(judged_run, tmp_path):
    root, records = judged_run
    result = CliRunner().invoke(app, ["export", str(root), "--to-dir", str(tmp_path), "--soft", "-f", "trl"])
    assert result.exit_code == 0, result.output
    rows = _rows(tmp_path / "trl")
    assert rows
    for row in rows:
        record = records[row["id"]]
        assert [t >= 0.5 for t in row["labels"]] == record["labels"][: len(row["labels"])]
        assert row["labels"] == label_probability(record)[: len(row["labels"])]


def test_every_view_leaves_out_the_labels_below_min_confidence_by_their_final_probability(judged_run, tmp_path):
    root, records = judged_run
    for fmt in STEP_VIEWS:
        export_view(root, fmt, tmp_path, test_fraction=0.0, min_confidence=0.9)
        for row in _rows(tmp_path / fmt):
            record = records[row["id"]]
            labels = _hard_labels(fmt, row)
            assert labels == record["labels"][: len(labels)]
            for good, p in zip(labels, label_probability(record), strict=False):
                assert (p if good else 1.0 - p) >= 0.9, (fmt, row["id"])


def test_p_good_picture_draws_each_label_at_its_final_probability(judged_run):
    root, _ = judged_run
    figures = gather(root)
    assert figures.p_good["good"] and figures.p_good["bad"]
    assert min(figures.p_good["good"]) >= 0.5 > max(figures.p_good["bad"])


def test_a_run_without_a_judge_keeps_its_p_good_as_soft_targets(tmp_path):
    root = write_run(tmp_path / "run", pipeline_data(), 30)
    for record in iter_records(root):
        assert label_probability(record) == record["p_good"]
