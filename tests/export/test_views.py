"""Views: the supervised-steps rule, the four formats, Parquet export with problem-level splits,
round trips through `datasets.load_dataset`, and TRL's own PRM tokenization of the TRL view."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os

import pyarrow as pa
import pytest
from _dataset_fixture import TAGGED_ROW, expected_labels, make_dataset
from _tokenizers import demo_tokenizer, qwen_like_bpe

from prm_synth.export.rows import Marker, SkipRow, supervised_steps, to_math_shepherd, to_openrlhf, to_qwen, to_trl
from prm_synth.export.views import VIEW_NAMES, VIEWS
from prm_synth.export.writing import export_view, split_of
from prm_synth.prompting.prompts import render_chain_step

ROW = {
    "id": "r1",
    "problem_id": "p1",
    "question": "What is 2 + 3 - 1?\n",
    "steps": ["2 + 3 = 5.\n", "5 - 1 = 3.\n", "So 3.\n", "The answer is 3.\n"],
    "labels": [True, False, True, None],
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    return root, make_dataset(root)


# ---------------------------------------------------------------- the rule and the formats
@pytest.mark.parametrize(
    ("labels", "kept"),
    [
        ([True, True], [True, True]),
        ([True, False, True], [True, False]),  # a recovered label after the first error is dropped
        ([True, None, True], [True]),  # an unlabeled step ends the row before it
        ([False, None], [False]),
        ([True, True, False, None], [True, True, False]),
    ],
)
def test_supervised_steps_rule(labels, kept):
    row = {"steps": [f"s{i}\n" for i in range(len(labels))], "labels": labels}
    steps, out = supervised_steps(row)
    assert out == kept
    assert steps == [f"s{i}" for i in range(len(kept))]


def test_a_row_without_a_first_label_is_skipped():
    with pytest.raises(SkipRow) as e:
        to_trl({**ROW, "labels": [None, True, True, True]})
    assert e.value.reason == "no_labeled_steps"


def test_the_four_formats_exactly():
    assert to_trl(ROW) == {
        "prompt": "What is 2 + 3 - 1?",
        "completions": ["2 + 3 = 5.", "5 - 1 = 3."],
        "labels": [True, False],
        "id": "r1",
        "problem_id": "p1",
    }
    ms = to_math_shepherd(ROW)
    assert ms["input"] == "What is 2 + 3 - 1? 2 + 3 = 5. ки\n5 - 1 = 3. ки"
    assert ms["label"] == "What is 2 + 3 - 1? 2 + 3 = 5. +\n5 - 1 = 3. -"
    orl = to_openrlhf(ROW)
    assert orl["input"] == "What is 2 + 3 - 1?\n2 + 3 = 5. ки\n5 - 1 = 3. ки"
    assert orl["value"] == ["+", "-"]
    qw = to_qwen(ROW)
    assert qw["system"] == "Please reason step by step, and put your final answer within \\boxed{}."
    assert qw["query"] == "What is 2 + 3 - 1?"
    assert qw["response"] == ["2 + 3 = 5.", "5 - 1 = 3."]  # Qwen's code inserts <extra_0> itself
    assert qw["labels"] == [1, 0]
    for fmt, view in (
        ("trl", to_trl),
        ("math-shepherd", to_math_shepherd),
        ("openrlhf", to_openrlhf),
        ("qwen", to_qwen),
    ):
        assert list(view(ROW)) == VIEWS[fmt].columns.names


def test_a_chosen_marker_replaces_the_default_in_both_marked_views():
    marker = Marker("§", "\n")
    assert to_openrlhf(ROW, marker)["input"] == "What is 2 + 3 - 1?\n2 + 3 = 5.\n§\n5 - 1 = 3.\n§"
    ms = to_math_shepherd(ROW, marker)
    assert ms["input"] == "What is 2 + 3 - 1? 2 + 3 = 5.\n§\n5 - 1 = 3.\n§"
    assert ms["label"] == "What is 2 + 3 - 1? 2 + 3 = 5.\n+\n5 - 1 = 3.\n-"


def test_marker_inside_the_text_is_refused():
    row = {**ROW, "steps": ["a ки b\n", "c\n", "d\n", "e\n"]}
    for view in (to_math_shepherd, to_openrlhf):
        with pytest.raises(SkipRow, match="marker_in_text"):
            view(row)
        assert view(row, Marker("§", "\n"))  # another marker: the row is kept
    assert to_trl(row)["completions"][0] == "a ки b"  # TRL has no in-text marker
    with pytest.raises(SkipRow, match="marker_in_text"):
        to_qwen({**ROW, "steps": ["x <extra_0> y\n", "z\n", "w\n", "v\n"]})


def test_split_is_by_problem_and_deterministic():
    ids = [f"p{i}" for i in range(2000)]
    splits = [split_of(i, 0.1) for i in ids]
    assert splits == [split_of(i, 0.1) for i in ids]
    assert 0.07 < splits.count("test") / len(ids) < 0.13
    assert splits != [split_of(i, 0.1, seed=1) for i in ids]
    assert all(split_of(i, 0.0) == "train" for i in ids)


# ---------------------------------------------------------------- export and round trips
def _expected(rows, fmt):
    out = {}
    for r in rows:
        labels = expected_labels(r)
        if labels is None or (fmt in ("math-shepherd", "openrlhf") and r["id"] == TAGGED_ROW):
            continue
        out[r["id"]] = labels
    return out


def _labels_of(fmt, row):
    if fmt == "trl":
        return row["labels"]
    if fmt == "qwen":
        return [bool(x) for x in row["labels"]]
    if fmt == "openrlhf":
        return [x == "+" for x in row["value"]]
    tags = [w for line in row["label"].split("\n") for w in line.split(" ")[-1:]]
    return [t == "+" for t in tags]


@pytest.mark.parametrize("fmt", VIEW_NAMES)
def test_export_round_trips_through_load_dataset(dataset, tmp_path, fmt):
    from datasets import load_dataset

    root, rows = dataset
    out = tmp_path / "out"
    result = export_view(root, fmt, out, test_fraction=0.3, seed=0)
    expected = _expected(rows, fmt)

    ds = load_dataset(
        "parquet",
        data_files={s: str(out / p) + ".parquet" for s, p in result.data_files.items()},
        cache_dir=str(tmp_path / "cache"),
    )
    assert set(ds) == {"train", "test"}
    got = {}
    for split in ("train", "test"):
        assert ds[split].column_names == VIEWS[fmt].columns.names
        assert len(ds[split]) == result.splits[split].rows
        for r in ds[split]:
            got[r["id"]] = (split, r["problem_id"], _labels_of(fmt, r))
    assert {k: v[2] for k, v in got.items()} == expected
    train = {p for s, p, _ in got.values() if s == "train"}
    test = {p for s, p, _ in got.values() if s == "test"}
    assert train and test and not train & test
    assert result.rows == len(expected)
    steps = sum(len(v) for v in expected.values())
    bad = sum(v.count(False) for v in expected.values())
    assert sum(s.steps for s in result.splits.values()) == steps
    assert sum(s.bad_steps for s in result.splits.values()) == bad
    assert sum(s.problems for s in result.splits.values()) == len({p for _, p, _ in got.values()})
    skipped = sum(1 for r in rows if expected_labels(r) is None)
    assert result.skipped["no_labeled_steps"] == skipped
    if fmt in ("math-shepherd", "openrlhf"):
        assert result.skipped["marker_in_text"] == 1


def test_files_roll_over_and_a_re_export_replaces_them(dataset, tmp_path):
    from datasets import load_dataset

    root, rows = dataset
    out = tmp_path / "out"
    first = export_view(root, "trl", out, test_fraction=0.2, max_rows_per_file=7)
    names = sorted(p.name for p in (out / "trl").glob("train-*"))
    n = len(names)
    assert n > 1 and names == [f"train-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
    export_view(root, "trl", out, test_fraction=0.2)  # one file a split now: the old ones must go
    assert sorted(p.name for p in (out / "trl").iterdir()) == [
        "test-00000-of-00001.parquet",
        "train-00000-of-00001.parquet",
    ]
    ds = load_dataset("parquet", data_files={"train": str(out / "trl/train-*")}, cache_dir=str(tmp_path / "c"))
    assert len(ds["train"]) == first.splits["train"].rows


def test_no_test_split_with_test_fraction_zero(dataset, tmp_path):
    root, _ = dataset
    result = export_view(root, "qwen", tmp_path, test_fraction=0.0)
    assert set(result.splits) == {"train"}
    assert [p.name for p in (tmp_path / "qwen").iterdir()] == ["train-00000-of-00001.parquet"]
    with pytest.raises(ValueError):
        export_view(root, "qwen", tmp_path, test_fraction=1.0)
    with pytest.raises(ValueError):
        export_view(root, "nope", tmp_path)


def test_load_dataset_by_config_name_from_the_repo_folder(dataset, tmp_path):
    """The README `configs:` metadata written with the export makes `load_dataset(folder, view)` work."""
    from datasets import load_dataset

    from prm_synth.export.hub import export_to_dir

    root, rows = dataset
    export_to_dir(root, tmp_path / "repo", test_fraction=0.3, formats=VIEW_NAMES, tokenizer=qwen_like_bpe())
    for fmt in VIEW_NAMES:
        ds = load_dataset(str(tmp_path / "repo"), fmt, cache_dir=str(tmp_path / "cache"))
        assert set(ds) == {"train", "test"}
        # "\nки" was chosen for this tokenizer (" ки" is one other token in context), so the tagged row,
        # whose text holds "ки", is still skipped by the marked views.
        assert sum(len(d) for d in ds.values()) == len(_expected(rows, fmt))
        assert ds["train"].column_names == VIEWS[fmt].columns.names
    default = load_dataset(str(tmp_path / "repo"), cache_dir=str(tmp_path / "cache"))
    assert default["train"].column_names == VIEWS["trl"].columns.names


# ---------------------------------------------------------------- TRL's own tokenization
def _prm_trainer():
    if importlib.util.find_spec("trl") is None:
        pytest.skip("trl is not installed (dev extra)")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # PRMTrainer lives in trl.experimental in TRL 1.x
    try:
        from trl.experimental.prm import PRMTrainer  # TRL 1.0 to 1.13
    except ImportError:
        try:
            from trl import PRMTrainer  # TRL 0.x
        except ImportError:
            pytest.skip("the installed trl has no PRMTrainer (removed in trl 1.14)")
    return PRMTrainer


@pytest.fixture(scope="module")
def smollm2_tokenizer(request):
    return demo_tokenizer(request.config.cache)


def test_trl_prm_tokenize_puts_each_label_on_its_separator(dataset, tmp_path, smollm2_tokenizer):
    from datasets import load_dataset

    prm_trainer = _prm_trainer()
    tok = smollm2_tokenizer
    root, _ = dataset
    export_view(root, "trl", tmp_path, test_fraction=0.3)
    ds = load_dataset("parquet", data_files={"train": str(tmp_path / "trl/train-*")}, cache_dir=str(tmp_path / "c"))
    sep = tok.encode("\n", add_special_tokens=False)
    assert len(sep) == 1
    checked = 0
    for row in ds["train"]:
        out = prm_trainer.tokenize_row(
            row,
            tok,
            step_separator="\n",
            max_length=None,
            max_completion_length=None,
            train_on_last_step_only=False,
            is_eval=False,
        )
        ids, labels = out["input_ids"], out["labels"]
        assert len(ids) == len(labels)
        prompt_len = len(tok(row["prompt"], add_special_tokens=False)["input_ids"]) + (tok.bos_token_id is not None)
        assert all(x == -100 for x in labels[:prompt_len])
        labeled = [i for i, x in enumerate(labels) if x != -100]
        # One labeled token a step, each the separator right after that step, carrying the step's label.
        assert [labels[i] for i in labeled] == [int(x) for x in row["labels"]]
        assert all(ids[i] == sep[0] for i in labeled)
        start = prompt_len
        for pos, step in zip(labeled, row["completions"], strict=True):
            assert tok.decode(ids[start:pos]) == step
            start = pos + 1
        assert start == len(ids)
        checked += 1
    assert checked > 10


# ---------------------------------------------------------------- the registry
CHAIN = "\n".join(render_chain_step(i + 1, "checked.", ok) for i, ok in enumerate([True, False]))
VERIFIED_ROW = {**ROW, "verify_chains": [CHAIN]}


@pytest.mark.parametrize("fmt", list(VIEWS))
def test_each_registered_view_writes_exactly_its_declared_columns_and_says_how_to_read_them(fmt):
    view = VIEWS[fmt]
    assert view.name == fmt
    made = view.build(VERIFIED_ROW if not view.step_labels else ROW, Marker())
    assert made and all(list(r) == view.columns.names for r in made)
    config = view.consumer_config(Marker(), None, None)
    assert config and json.loads(json.dumps(config)) == config
    assert view.card_text(Marker(), None, None).startswith(": ")
    if view.soft_column is not None:  # soft targets change the label column's type only
        soft = view.schema("mc")
        assert soft.names == view.columns.names and soft.field(view.soft_column).type == pa.list_(pa.float64())
    else:
        with pytest.raises(ValueError, match="no soft targets"):
            view.schema("mc")


def test_a_marked_view_carries_the_chosen_marker_in_its_rows_card_and_trainer_config():
    marker = Marker("§", "\n")
    for fmt in (f for f, v in VIEWS.items() if v.marked):
        view = VIEWS[fmt]
        assert all("§" in r["input"] and "ки" not in r["input"] for r in view.build(ROW, marker))
        assert "`\\n§`" in view.card_text(marker, None, None)
        assert "§" in json.dumps(view.consumer_config(marker, None, None), ensure_ascii=False)
