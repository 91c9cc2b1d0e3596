"""A folder made by the previous release (32 columns), resumed now, stays one dataset: its older shards
get today's columns (null in their rows, the rows kept), so `datasets.load_dataset("arrow", ...)`, the
line every run prints last, loads the whole folder."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from _simulated_run import small_pipeline

import flows.synthesize
from prm_synth.config import load_config
from prm_synth.records import RECORD_SCHEMA
from prm_synth.store.layout import sha256_of, shard_name
from prm_synth.store.readers import iter_records
from prm_synth.store.shards import atomic_write_bytes

ADDED = ("consensus_p_good", "labels_before_consensus")  # the columns this release added


def _as_previous_release(out: Path) -> None:
    """Rewrite the folder's shards as the previous release wrote them: without the added columns."""
    for marker in sorted((out / "shards").glob("shard-*.json")):
        entry = json.loads(marker.read_text())
        path = out / entry["data"]
        with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
            table = reader.read_all()
        table = table.drop_columns(list(ADDED))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue().to_pybytes()
        atomic_write_bytes(path, data)
        entry["sha256"][entry["data"]] = sha256_of(data)
        marker.write_text(json.dumps(entry))


def _columns(path: Path) -> list[str]:
    with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
        return reader.schema.names


@pytest.mark.usefixtures("prefect_harness")
def test_a_folder_of_the_previous_release_resumed_now_loads_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "out"
    path = small_pipeline(tmp_path, "old-folder", {"kind": "simulated", "step_error": 0.2, "seed": 0})
    flows.synthesize.synthesize(config=load_config(path), out_dir=str(out), limit=2)  # shard 0 of 2
    _as_previous_release(out)
    old = out / "data" / f"{shard_name(0)}.arrow"
    assert len(_columns(old)) == len(RECORD_SCHEMA) - len(ADDED)
    before = {r["id"]: r for r in iter_records(out)}
    assert before

    summary = flows.synthesize.synthesize(config=load_config(path), out_dir=str(out))  # resumed: shard 1 new
    assert summary.run.shards_skipped == 1 and summary.run.shards_run == 1
    assert _columns(old) == RECORD_SCHEMA.names  # upgraded in place, its marker's checksum with it
    rows = {r["id"]: r for r in iter_records(out)}  # every reader checks the checksum: it matches
    for row_id, row in before.items():  # the old rows kept as they were; the added columns null in them
        assert {k: v for k, v in rows[row_id].items() if k not in ADDED} == row
        assert all(rows[row_id][k] is None for k in ADDED)

    loaded = datasets.load_dataset("arrow", data_files=str(out / "data" / "*.arrow"), split="train")
    assert len(loaded) == len(rows) and set(ADDED) <= set(loaded.column_names)
    again = flows.synthesize.synthesize(config=load_config(path), out_dir=str(out))  # nothing left to upgrade
    assert again.run.shards_skipped == 2 and {r["id"]: r for r in iter_records(out)} == rows
