"""Shards written by an earlier release, brought to today's schema when a run resumes their folder.

A release that adds columns (`consensus_p_good` and `labels_before_consensus` came after 32 columns)
resumes the folders the one before it made. Left as they were, such a folder holds shards of two
schemas, and `datasets.load_dataset("arrow", data_files="OUT/data/*.arrow")`, the line every run prints
last, refuses to cast one to the other. So a run that resumes a folder first upgrades each older shard:
its rows kept as they are, each added column null in them (nothing measured it then), the file
rewritten atomically, then its marker with the new checksum. A run killed between the two leaves a
shard whose file no longer matches its marker: the next run redoes that shard (nothing mixed, nothing
lost; one shard's labeling paid again). A shard whose columns differ otherwise (a column removed or of
another type) is left as it is, with a warning naming it.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from prm_synth.records import RECORD_SCHEMA, REJECTED_SCHEMA
from prm_synth.store.layout import CorruptShardError, ShardEntry, sha256_of, shard_name
from prm_synth.store.readers import read_stream, verified_buffer
from prm_synth.store.shards import ShardStore, atomic_write_bytes, atomic_write_json

log = logging.getLogger(__name__)


def upgrade_shards(store: ShardStore) -> int:
    """Bring every finished shard of the folder to RECORD_SCHEMA / REJECTED_SCHEMA (module doc); returns
    how many shards were rewritten."""
    upgraded = 0
    for entry in store.finished(verify=False).values():
        changed = False
        for rel, schema in ((entry.data, RECORD_SCHEMA), (entry.rejected_file, REJECTED_SCHEMA)):
            changed |= _upgrade_file(store, entry, rel, schema)
        if changed:
            atomic_write_json(store.root / "shards" / f"{shard_name(entry.shard)}.json", entry.to_json())
            upgraded += 1
    if upgraded:
        log.info("%d shard(s) written by an earlier release now have today's columns (their rows kept)", upgraded)
    return upgraded


def _file_schema(path: pa.NativeFile) -> pa.Schema:
    with pa.ipc.open_stream(path) as reader:
        return reader.schema


def _upgrade_file(store: ShardStore, entry: ShardEntry, rel: str, schema: pa.Schema) -> bool:
    """Rewrite one shard file in `schema` when it lacks some of its columns; True when it was rewritten
    (and `entry`'s checksum for it updated)."""
    path = store.root / rel
    try:
        with pa.memory_map(str(path), "r") as source:
            have = _file_schema(source)
    except (OSError, pa.ArrowException):
        return False  # damaged or missing: the shard is redone by the run anyway (its checksum fails)
    if have.equals(schema):
        return False
    missing = [f for f in schema if f.name not in have.names]
    foreign = [f.name for f in have if f.name not in schema.names or schema.field(f.name).type != f.type]
    if foreign or not missing:
        log.warning(
            "%s has columns today's schema does not (%s): left as it is; `datasets` may not load it with the "
            "other shards",
            path,
            ", ".join(foreign) or "another order",
        )
        return False
    try:
        table = read_stream(verified_buffer(store.root, entry, rel), path)
    except CorruptShardError:  # damaged: the run redoes the shard
        return False
    for field in missing:
        table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    table = table.select(schema.names).cast(schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    atomic_write_bytes(path, data)
    entry.sha256[rel] = sha256_of(data)
    return True
