"""The dataset card of a real simulated run: `datasets` loads the export without a word, and every figure
the card states is the one recomputed here from the exported rows and the simulated truth."""

from __future__ import annotations

import json
import logging
import re
import shutil
import warnings

import pyarrow.parquet as pq
import pytest
from _simulated_run import MC_ANNOTATE, pipeline_data, write_run
from _tokenizers import ascii_only_bpe, qwen_like_bpe

from prm_synth.export.consumers import _pieces
from prm_synth.export.hub import export_to_dir
from prm_synth.records import ShardStats
from prm_synth.simulated.arithmetic import true_first_error
from prm_synth.store.readers import dataset_shards, iter_records
from prm_synth.store.summary import summarize

LIMIT = 60


@pytest.fixture(scope="module")
def mc_run(tmp_path_factory):
    """pipelines/simulated.yaml under per-step MC, no judge, on 60 problems."""
    return write_run(tmp_path_factory.mktemp("mc") / "run", pipeline_data(annotate=MC_ANNOTATE), LIMIT)


@pytest.fixture(scope="module")
def exported(mc_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "repo"
    export_to_dir(mc_run, out, ["trl", "math-shepherd"], test_fraction=0.2)
    return out


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_load_dataset_of_an_export_says_nothing_about_the_card(exported, tmp_path):
    """The line the CLI prints, `load_dataset(folder, "trl")`, with every warning and log line caught."""
    from datasets import load_dataset

    handler = _Collect()
    root = logging.getLogger("datasets")
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = load_dataset(str(exported), "trl", cache_dir=str(tmp_path / "cache"))
    finally:
        root.removeHandler(handler)
    assert handler.messages == []
    assert [str(w.message) for w in caught if "dataset_info" in str(w.message) or "split" in str(w.message)] == []
    # the card's sizes are the ones `datasets` measures itself when it builds the splits
    card = (exported / "README.md").read_text(encoding="utf-8")
    for split in ("train", "test"):
        info = ds[split].info.splits[split]
        assert f"num_bytes: {info.num_bytes}\n    num_examples: {info.num_examples}" in card


def _exported_rows(folder):
    return [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_the_card_states_good_and_bad_precision_and_first_errors_on_rows_with_an_error(mc_run, exported):
    card = (exported / "README.md").read_text(encoding="utf-8")
    records = {r["id"]: r for r in iter_records(mc_run)}
    truth = {rid: true_first_error(r["steps"]) for rid, r in records.items()}
    good = good_right = bad = bad_right = 0
    for row in _exported_rows(exported / "trl"):
        for i, label in enumerate(row["labels"]):
            truly_good = truth[row["id"]] < 0 or i < truth[row["id"]]
            good, good_right = good + label, good_right + (label and truly_good)
            bad, bad_right = bad + (not label), bad_right + (not label and not truly_good)
    with_error = [rid for rid, t in truth.items() if t >= 0]
    hit = sum(records[rid]["first_error_mc"] == truth[rid] for rid in with_error)
    assert 0 < good_right < good and bad > 0  # the run is noisy enough to test both figures
    assert f"good-label precision {good_right / good:.3f} ({good} good" in card
    assert f"bad-label precision {bad_right / bad:.3f} ({bad} bad labels)" in card
    text = " ".join(card.split())
    assert f"{len(with_error)} of the {len(records)} records hold an error: on those, the first error is " in text
    assert f"exactly right in {hit} ({hit / len(with_error):.3f})" in text


def test_the_card_states_consensus_only_when_it_ran(mc_run, exported, tmp_path):
    card = (exported / "README.md").read_text(encoding="utf-8")
    assert "onsensus kept" not in card and "records with consensus" not in card
    judged = write_run(tmp_path / "judged", pipeline_data("simulated-consensus"), 20)
    export_to_dir(judged, tmp_path / "out", ["trl"])
    consensus = summarize(judged).consensus
    assert consensus is not None
    text = " ".join((tmp_path / "out" / "README.md").read_text(encoding="utf-8").split())
    assert f"Consensus kept {consensus.kept} of {consensus.rows} labeled rows." in text
    assert "| records with consensus |" in text


def test_the_card_states_the_cost_of_a_labeled_step(mc_run, exported):
    summary = summarize(mc_run)
    steps = summary.labels["labeled_steps"]
    assert summary.rollouts_per_labeled_step == round(summary.rollouts / steps, 2)
    rollouts, tokens = summary.rollouts / steps, summary.tokens / steps
    card = (exported / "README.md").read_text(encoding="utf-8")
    assert f"| cost per labeled step | {rollouts:.1f} rollouts, {tokens:.1f} tokens |" in card
    stats = sum((e.stats for e in dataset_shards(mc_run)), start=ShardStats())
    per_step = stats.rollout_tokens / steps
    per_error = stats.rollout_tokens / summary.labels["rows_with_error"]
    assert summary.rollout_tokens_per_located_error == round(per_error, 2)
    assert f"| rollout tokens | {per_step:.1f} a labeled step, {per_error:.1f} a located first error |" in card


def test_the_card_names_the_labeler_revision_its_folder_recorded(mc_run, exported, tmp_path):
    """A folder labeled by a search with a revision (`LABELER_REVISIONS`) says which one in its card;
    one whose search has none (this per-step MC run) has no such row."""
    assert "labeler revision" not in (exported / "README.md").read_text()
    run = tmp_path / "run"
    shutil.copytree(mc_run, run)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(manifest | {"labeler_revision": "changepoint 2026-12-04.2"}))
    export_to_dir(run, tmp_path / "repo", ["trl"], test_fraction=0.2)
    assert re.search(
        r"\| labeler revision \| `changepoint 2026-12-04.2` \|", (tmp_path / "repo" / "README.md").read_text()
    )


def test_tokens_in_messages_are_text_not_byte_level_spellings():
    """'ки' in a byte-level BPE: the tokens' own strings spell UTF-8 bytes as Latin-1 ('Ðº')."""
    whole = qwen_like_bpe()
    assert _pieces(whole, whole.encode("\nки", add_special_tokens=False)) == ["\n", "ки"]
    bytes_only = ascii_only_bpe()  # no merges for Cyrillic: one token a byte
    pieces = _pieces(bytes_only, bytes_only.encode("ки", add_special_tokens=False))
    assert pieces == ["\\xd0", "\\xba", "\\xd0", "\\xb8"]
    assert not any(re.search("[Ðº¸]", p) for p in pieces)
