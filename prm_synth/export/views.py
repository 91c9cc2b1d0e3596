"""Trainer-ready views of a finished dataset, and their export as Parquet with train/test splits.

A view turns one record row (a dict per RECORD_SCHEMA) into one row of a trainer's format. All four
views share one rule for which steps are supervised (`supervised_steps`):

    walk the steps in order; an unlabeled step (label null) ends the row before it, a bad step
    (label False) ends the row after it. What is left is zero or more good steps, optionally
    followed by exactly one bad step, the first error.

Why: a label after the first error says nothing reliable. Under the hard rule a later prefix still
holds the error, and its MC value only measures whether the policy happened to recover, so training
on it teaches the model to forgive mistakes. A null label means the step was never measured; a
guess would be worse than leaving it out, and a row cannot skip a step (the later steps sit on top
of it in the text). A row whose first step is unlabeled has nothing to supervise and is skipped.

Step text is stripped of surrounding whitespace: the lossless split keeps each step's newline, and
every format adds its own separator after a step. Views never change the record files.

Export writes the layout `datasets.push_to_hub` creates for a config, one folder per view:

    OUT/<view>/train-00000-of-00002.parquet
    OUT/<view>/test-00000-of-00001.parquet

so `load_dataset("parquet", data_files={"train": "OUT/trl/train-*.parquet"})` reads it, and with the
README `configs:` metadata written by prm_synth.export.card, `load_dataset("OUT", "trl")` does too.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from prm_synth.shards import iter_tables

STEP_TAG = "ки"  # Math-Shepherd's step tag; also OpenRLHF's placeholder token in its Math-Shepherd example
QWEN_STEP_TOKEN = "<extra_0>"  # Qwen2.5-Math-PRM scores the hidden state at this token after each step
SPLITS = ("train", "test")
DEFAULT_MAX_ROWS_PER_FILE = 100_000

Row = Mapping[str, Any]


class SkipRow(ValueError):
    """A record that a view cannot represent; `reason` is a short code counted by export_view."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- the shared rule
def supervised_steps(row: Row) -> tuple[list[str], list[bool]]:
    """The steps a view supervises and their labels (see the module docstring for the rule)."""
    steps: list[str] = []
    labels: list[bool] = []
    for text, label in zip(row["steps"], row["labels"], strict=True):
        if label is None:
            break
        steps.append(text.strip())
        labels.append(bool(label))
        if not label:
            break
    if not steps:
        raise SkipRow("no_labeled_steps")
    return steps, labels


def _ids(row: Row) -> dict[str, str]:
    # Kept in every view: trainers ignore extra columns, and they tie a view row back to its record.
    return {"id": row["id"], "problem_id": row["problem_id"]}


def _refuse_marker(marker: str, question: str, steps: list[str]) -> None:
    # A marker inside the text would add a label position the labels do not have.
    if marker in question or any(marker in s for s in steps):
        raise SkipRow("marker_in_text")


def _sign(label: bool) -> str:
    return "+" if label else "-"


# ---------------------------------------------------------------- the views
def to_trl(row: Row) -> dict[str, Any]:
    """TRL stepwise supervision: `prompt`, `completions` (one string per step), `labels` (bool per step).

    TRL's PRMTrainer joins prompt and steps itself, appending its `step_separator` (default "\\n") to
    each step and putting the step's label on the separator's last token.
    """
    steps, labels = supervised_steps(row)
    return {"prompt": row["question"].strip(), "completions": steps, "labels": labels, **_ids(row)}


def to_math_shepherd(row: Row, step_tag: str = STEP_TAG) -> dict[str, Any]:
    """Math-Shepherd: `input` is "question step1 ки\\nstep2 ки…", `label` the same text with +/- for ки."""
    steps, labels = supervised_steps(row)
    question = row["question"].strip()
    _refuse_marker(step_tag, question, steps)
    return {
        "input": question + " " + "\n".join(f"{s} {step_tag}" for s in steps),
        "label": question + " " + "\n".join(f"{s} {_sign(lab)}" for s, lab in zip(steps, labels, strict=True)),
        **_ids(row),
    }


def to_openrlhf(row: Row, placeholder_token: str = STEP_TAG) -> dict[str, Any]:
    """OpenRLHF ProcessRewardDataset: `input` with the placeholder after each step, `value` a list of +/-.

    Train with `--input_key input --label_key value --placeholder_token ки --reward_tokens + -`.
    """
    steps, labels = supervised_steps(row)
    question = row["question"].strip()
    _refuse_marker(placeholder_token, question, steps)
    return {
        "input": question + "\n" + "\n".join(f"{s} {placeholder_token}" for s in steps),
        "value": [_sign(lab) for lab in labels],
        **_ids(row),
    }


def to_qwen(row: Row, step_token: str = QWEN_STEP_TOKEN) -> dict[str, Any]:
    """Qwen2.5-Math-PRM: `query`, `response` with <extra_0> after each step, `labels` 1 good / 0 bad."""
    steps, labels = supervised_steps(row)
    question = row["question"].strip()
    _refuse_marker(step_token, question, steps)
    return {
        "query": question,
        "response": "".join(s + step_token for s in steps),
        "labels": [int(lab) for lab in labels],
        **_ids(row),
    }


_ID_FIELDS = [pa.field("id", pa.string()), pa.field("problem_id", pa.string())]

VIEWS: dict[str, Callable[[Row], dict[str, Any]]] = {
    "trl": to_trl,
    "math-shepherd": to_math_shepherd,
    "openrlhf": to_openrlhf,
    "qwen": to_qwen,
}

# Fixed Parquet schemas: every file of a view has the same columns even when a shard is empty.
VIEW_SCHEMAS: dict[str, pa.Schema] = {
    "trl": pa.schema(
        [
            pa.field("prompt", pa.string()),
            pa.field("completions", pa.list_(pa.string())),
            pa.field("labels", pa.list_(pa.bool_())),
            *_ID_FIELDS,
        ]
    ),
    "math-shepherd": pa.schema([pa.field("input", pa.string()), pa.field("label", pa.string()), *_ID_FIELDS]),
    "openrlhf": pa.schema([pa.field("input", pa.string()), pa.field("value", pa.list_(pa.string())), *_ID_FIELDS]),
    "qwen": pa.schema(
        [
            pa.field("query", pa.string()),
            pa.field("response", pa.string()),
            pa.field("labels", pa.list_(pa.int64())),
            *_ID_FIELDS,
        ]
    ),
}

VIEW_NAMES: tuple[str, ...] = tuple(VIEWS)


# ---------------------------------------------------------------- splitting
def split_of(problem_id: str, test_fraction: float, seed: int = 0) -> str:
    """'train' or 'test', decided by a hash of the problem id alone: every row of a problem lands in
    the same split, on every machine and every re-export."""
    digest = hashlib.sha256(f"{seed}\x00{problem_id}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < test_fraction else "train"


class _SplitWriter:
    """Parquet files of one split, rolled over at max_rows, renamed to their final
    `<split>-00000-of-0000N` names once N is known."""

    def __init__(self, folder: Path, split: str, schema: pa.Schema, max_rows: int) -> None:
        self.folder, self.split, self.schema, self.max_rows = folder, split, schema, max_rows
        self.parts: list[Path] = []
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._rows_in_part = 0

    def write(self, table: pa.Table) -> None:
        while table.num_rows:
            if self._writer is None or self._rows_in_part >= self.max_rows:
                self._open()
            take = min(table.num_rows, self.max_rows - self._rows_in_part)
            assert self._writer is not None
            self._writer.write_table(table.slice(0, take))
            self._rows_in_part += take
            self.rows += take
            table = table.slice(take)

    def _open(self) -> None:
        self._close_part()
        part = self.folder / f".{self.split}-{len(self.parts):05d}.parquet.tmp"
        self.parts.append(part)
        self._writer = pq.ParquetWriter(part, self.schema)
        self._rows_in_part = 0

    def _close_part(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def finish(self) -> list[str]:
        if not self.parts:  # an empty split still gets one (empty) file, so the split exists when loaded
            self._open()
        self._close_part()
        n = len(self.parts)
        names = []
        for i, part in enumerate(self.parts):
            name = f"{self.split}-{i:05d}-of-{n:05d}.parquet"
            os.replace(part, self.folder / name)
            names.append(name)
        return names

    def abort(self) -> None:
        self._close_part()
        for part in self.parts:
            part.unlink(missing_ok=True)


def _clear_view_folder(folder: Path) -> None:
    # Files of an earlier export would otherwise match the `train-*` pattern next to the new ones.
    for split in SPLITS:
        for old in folder.glob(f"{split}-*-of-*.parquet"):
            old.unlink()
    for tmp in folder.glob(".*.parquet.tmp"):
        tmp.unlink()


def export_view(
    dataset_dir: str | Path,
    fmt: str,
    out_dir: str | Path,
    test_fraction: float = 0.1,
    seed: int = 0,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
) -> dict[str, Any]:
    """Write view `fmt` of the dataset in `dataset_dir` to `out_dir/<fmt>/<split>-*.parquet`.

    Streams one record shard at a time (memory holds one shard and one Parquet row group). Returns
    the counts: rows, problems, steps and bad steps per split, skipped rows by reason, the files.
    """
    if fmt not in VIEWS:
        raise ValueError(f"unknown view {fmt!r}; choose from {', '.join(VIEWS)}")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    view, schema = VIEWS[fmt], VIEW_SCHEMAS[fmt]
    folder = Path(out_dir) / fmt
    folder.mkdir(parents=True, exist_ok=True)
    _clear_view_folder(folder)
    splits = SPLITS if test_fraction > 0 else ("train",)
    writers = {s: _SplitWriter(folder, s, schema, max_rows_per_file) for s in splits}
    stats = {s: {"rows": 0, "problems": 0, "steps": 0, "bad_steps": 0} for s in splits}
    skipped: Counter[str] = Counter()
    try:
        for table in iter_tables(dataset_dir, "data"):
            out: dict[str, list[dict[str, Any]]] = {s: [] for s in splits}
            # A problem lives in exactly one shard, so per-shard sets count problems with flat memory.
            problems: dict[str, set[str]] = {s: set() for s in splits}
            for row in _rows(table):
                try:
                    view_row = view(row)
                except SkipRow as e:
                    skipped[e.reason] += 1
                    continue
                split = split_of(row["problem_id"], test_fraction, seed)
                out[split].append(view_row)
                problems[split].add(row["problem_id"])
                _count(stats[split], row)
            for split, rows in out.items():
                stats[split]["problems"] += len(problems[split])
                if rows:
                    writers[split].write(pa.Table.from_pylist(rows, schema=schema))
        files = {s: [f"{fmt}/{name}" for name in w.finish()] for s, w in writers.items()}
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    return {
        "view": fmt,
        "columns": schema.names,
        "splits": {s: {**st, "files": files[s]} for s, st in stats.items()},
        "rows": sum(st["rows"] for st in stats.values()),
        "skipped": dict(skipped),
        "data_files": {s: f"{fmt}/{s}-*" for s in splits},
    }


def _rows(table: pa.Table) -> Iterable[dict[str, Any]]:
    # Only the columns a view reads: converting the whole record to Python would double the work.
    return table.select(["id", "problem_id", "question", "steps", "labels"]).to_pylist()


def _count(acc: dict[str, Any], row: Row) -> None:
    steps, labels = supervised_steps(row)
    acc["rows"] += 1
    acc["steps"] += len(steps)
    acc["bad_steps"] += labels.count(False)
