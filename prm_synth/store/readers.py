"""Reading a finished output folder.

Readers (`iter_tables`, `iter_records`, `data_files`, and so `summary`, the views and export) take
the shard list from the markers and check every file against its marker's sha256 before using it:
a damaged, truncated or replaced file raises `CorruptShardError` naming it (a re-run of the same
config redoes that shard). Counts of rows are taken from the checked data, never from a marker.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from prm_synth.store.layout import (
    MANIFEST,
    CorruptShardError,
    DatasetError,
    NotAnOutputFolderError,
    ShardEntry,
    shard_name,
)


def read_manifest(root: str | Path) -> dict[str, Any]:
    path = Path(root) / MANIFEST
    if not path.exists():
        raise NotAnOutputFolderError(f"no {MANIFEST} in {root}: not a prm-synth output folder")
    try:
        manifest = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        raise DatasetError(
            f"{path} is damaged ({type(e).__name__}: {e}); re-run the same config into {root} to rebuild it"
        ) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config_fingerprint"), str):
        raise DatasetError(f"{path} is not a prm-synth manifest; re-run the same config into {root} to rebuild it")
    return manifest


def dataset_shards(root: str | Path) -> list[ShardEntry]:
    """The finished shards of a dataset, from their markers (the source of truth), in shard order.

    Only the markers of the manifest's config count; a marker that cannot be read raises DatasetError."""
    root = Path(root)
    fingerprint = read_manifest(root)["config_fingerprint"]
    entries = []
    for marker in sorted((root / "shards").glob("shard-*.json")):
        try:
            entry = ShardEntry.from_json(json.loads(marker.read_bytes()))
        except (OSError, ValueError, TypeError, RecursionError) as e:
            raise DatasetError(
                f"shard marker {marker} is damaged ({type(e).__name__}); re-run the same config into {root} "
                "to redo that shard"
            ) from None
        if entry.config_fingerprint == fingerprint:
            entries.append(entry)
    return sorted(entries, key=lambda e: e.shard)


def verified_buffer(root: Path, entry: ShardEntry, rel: str) -> pa.Buffer:
    """The bytes of one shard file, checked against its marker's sha256 (memory-mapped, read once)."""
    path = root / rel
    marker = root / "shards" / f"{shard_name(entry.shard)}.json"
    redo = f"re-run the same config into {root} to redo the shard"
    expected = entry.sha256.get(rel) if isinstance(entry.sha256, dict) else None
    if expected is None:
        raise CorruptShardError(f"{marker} holds no checksum for {rel}; {redo}")
    try:
        buffer = pa.memory_map(str(path), "r").read_buffer()
    except (OSError, pa.ArrowException) as e:
        raise CorruptShardError(f"{path} cannot be read ({type(e).__name__}: {e}); {redo}") from None
    if hashlib.sha256(buffer).hexdigest() != expected:
        raise CorruptShardError(
            f"{path} does not match the checksum in its marker {marker} (damaged, truncated or changed "
            f"after it was written); {redo}"
        )
    return buffer


def read_stream(buffer: pa.Buffer, path: Path) -> pa.Table:
    try:
        with pa.ipc.open_stream(buffer) as reader:
            return reader.read_all()
    except pa.ArrowException as e:  # checksum right, content not Arrow: the marker was made to match
        raise CorruptShardError(f"{path} is not a readable Arrow stream ({e})") from None


def shard_file(entry: ShardEntry, kind: str) -> str:
    if kind not in ("data", "rejected"):
        raise ValueError(f"kind must be 'data' or 'rejected', not {kind!r}")
    return entry.data if kind == "data" else entry.rejected_file


def iter_tables(root: str | Path, kind: str = "data") -> Iterator[pa.Table]:
    """One table per finished shard, in shard order (kind: "data" or "rejected"), each checked first."""
    root = Path(root)
    for entry in dataset_shards(root):
        rel = shard_file(entry, kind)
        yield read_stream(verified_buffer(root, entry, rel), root / rel)


def iter_records(root: str | Path, kind: str = "data") -> Iterator[dict[str, Any]]:
    """Rows of the finished shards as dicts, streaming shard by shard."""
    for table in iter_tables(root, kind):
        yield from table.to_pylist()


def data_files(root: str | Path, kind: str = "data") -> list[str]:
    """Paths to pass to `datasets.load_dataset("arrow", data_files=...)`, each checked first."""
    root = Path(root)
    out = []
    for entry in dataset_shards(root):
        rel = shard_file(entry, kind)
        verified_buffer(root, entry, rel)
        out.append(str(root / rel))
    return out
