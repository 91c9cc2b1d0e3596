"""A view's export as Parquet with train/test splits (split by a hash of the problem id).

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
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from prm_synth.export.rows import (
    CHAINS_COLUMN,
    CONFIDENCE_COLUMN,
    CONSENSUS_CONFIDENCE_COLUMN,
    DEFAULT_MARKER,
    SOFT_SOURCES,
    Marker,
    Row,
    SkipRow,
    SplitCounts,
    with_soft_targets,
)
from prm_synth.export.views import SOFT_VIEWS, VIEWS
from prm_synth.store.readers import iter_tables

SPLITS = ("train", "test")


DEFAULT_MAX_ROWS_PER_FILE = 100_000


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
        # Arrow bytes of the rows written: what `datasets` records as the split's `num_bytes` when it
        # loads these files (it sums the tables' nbytes), so the card can state it exactly.
        self.num_bytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._rows_in_part = 0

    def write(self, table: pa.Table) -> None:
        while table.num_rows:
            if self._writer is None or self._rows_in_part >= self.max_rows:
                self._open()
            take = min(table.num_rows, self.max_rows - self._rows_in_part)
            assert self._writer is not None
            part = table.slice(0, take)
            self._writer.write_table(part)
            self.num_bytes += part.nbytes
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


@dataclass(frozen=True)
class ViewExport:
    """One view written: its counts per split, skipped rows by reason, files, and the card's example row."""

    view: str
    columns: list[str]
    splits: dict[str, SplitCounts]
    skipped: dict[str, int]
    data_files: dict[str, str]
    marker: Marker | None  # the step marker, in the views that carry one
    min_confidence: float
    soft: str | None
    example: dict[str, Any] | None

    @property
    def rows(self) -> int:
        return sum(split.rows for split in self.splits.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "view": self.view,
            "columns": list(self.columns),
            "splits": {name: asdict(split) for name, split in self.splits.items()},
            "rows": self.rows,
            "skipped": dict(self.skipped),
            "data_files": dict(self.data_files),
            "marker": None if self.marker is None else self.marker.as_dict(),
            "min_confidence": self.min_confidence,
            "soft": self.soft,
            "example": self.example,
        }


def export_view(
    dataset_dir: str | Path,
    fmt: str,
    out_dir: str | Path,
    test_fraction: float = 0.1,
    seed: int = 0,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    marker: Marker = DEFAULT_MARKER,
    min_confidence: float = 0.0,
    soft: str | None = None,
) -> ViewExport:
    """Write view `fmt` of the dataset in `dataset_dir` to `out_dir/<fmt>/<split>-*.parquet`.

    `min_confidence` > 0 keeps only labels whose `p_good` meets it (see `with_min_confidence`).
    `soft` ("p_good" or "mc", views trl and openrlhf): float targets instead of labels (`with_soft_targets`).

    Streams one record shard at a time (memory holds one shard and one Parquet row group). Returns
    the counts of what was written: rows, problems, steps, bad steps, label sources and confidence
    coverage per split, skipped rows by reason, the files, and the first row (the card's example).
    """
    if fmt not in VIEWS:
        raise ValueError(f"unknown view {fmt!r}; choose from {', '.join(VIEWS)}")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    view = VIEWS[fmt]
    if soft is not None and (view.soft_column is None or soft not in SOFT_SOURCES):
        raise ValueError(f"soft targets ({soft}) go to the {' and '.join(SOFT_VIEWS)} views only, not {fmt}")
    schema = view.schema(soft)
    folder = Path(out_dir) / fmt
    folder.mkdir(parents=True, exist_ok=True)
    _clear_view_folder(folder)
    splits = SPLITS if test_fraction > 0 else ("train",)
    writers = {s: _SplitWriter(folder, s, schema, max_rows_per_file) for s in splits}
    counts = {s: SplitCounts() for s in splits}
    skipped: Counter[str] = Counter()
    example: dict[str, Any] | None = None
    try:
        for table in iter_tables(dataset_dir, "data"):
            out: dict[str, list[dict[str, Any]]] = {s: [] for s in splits}
            # A problem lives in exactly one shard, so per-shard sets count problems with flat memory.
            problems: dict[str, set[str]] = {s: set() for s in splits}
            for raw in _rows(table):
                base = raw if soft is None else with_soft_targets(raw, soft)
                row = view.with_min_confidence(base, min_confidence)
                try:
                    view_rows = view.build(row, marker)
                except SkipRow as e:
                    skipped[_skip_reason(e.reason, raw, base, row)] += 1
                    continue
                split = split_of(row["problem_id"], test_fraction, seed)
                out[split] += view_rows
                example = example or view_rows[0]
                problems[split].add(row["problem_id"])
                view.count(counts[split], row, base, view_rows)
            for split, rows in out.items():
                counts[split].problems += len(problems[split])
                if rows:
                    writers[split].write(pa.Table.from_pylist(rows, schema=schema))
        for split, writer in writers.items():
            counts[split].files = [f"{fmt}/{name}" for name in writer.finish()]
            counts[split].num_bytes = writer.num_bytes
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    return ViewExport(
        view=fmt,
        columns=schema.names,
        splits=counts,
        skipped=dict(skipped),
        data_files={s: f"{fmt}/{s}-*" for s in splits},
        marker=marker if view.marked else None,
        min_confidence=min_confidence,
        soft=soft,
        example=example,
    )


def _skip_reason(reason: str, raw: Row, base: Row, row: Row) -> str:
    """Why a row was skipped, naming the filter that took its first label: the soft targets (`base`:
    a first step without one) or the minimum confidence (`row`)."""
    if reason != "no_labeled_steps":
        return reason
    if raw["labels"][:1] not in ([], [None]) and base["labels"][0] is None:
        return "no_soft_target"
    if base["labels"][:1] not in ([], [None]) and row["labels"][0] is None:
        return "below_min_confidence"
    return reason


_READ_COLUMNS = ["id", "problem_id", "question", "steps", "labels", "label_source", "mc_values"]


def iter_record_rows(dataset_dir: str | Path) -> Iterable[list[dict[str, Any]]]:
    """The record rows a view reads, one shard at a time."""
    for table in iter_tables(dataset_dir, "data"):
        yield _rows(table)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    # Only the columns a view reads: converting the whole record to Python would double the work.
    read = (*_READ_COLUMNS, CONFIDENCE_COLUMN, CONSENSUS_CONFIDENCE_COLUMN, CHAINS_COLUMN)
    columns = [c for c in read if c in table.column_names]
    return table.select(columns).to_pylist()
