"""Arrow shards, written atomically, with a manifest that makes runs resumable.

Layout of an output folder:

    OUT/manifest.json            aggregate: config, fingerprint, every finished shard, totals
    OUT/config.yaml              the pipeline config that made it
    OUT/data/shard-00000.arrow   labeled rows (Arrow IPC stream, RECORD_SCHEMA)
    OUT/rejected/shard-00000.arrow  rejected rows with reasons (REJECTED_SCHEMA)
    OUT/shards/shard-00000.json  the shard's commit marker: counts, hashes, stats
    OUT/trees/shard-00000.json   OmegaPRM search trees of the shard (output.save_trees; hashed in its marker)

A shard is finished exactly when its marker exists and its files match the marker's hashes. The
marker is written last (temporary name, fsync, rename), so a run killed at any moment leaves either
a finished shard or one that the next run redoes from scratch. manifest.json is rebuilt from the
markers and is a convenience, never the source of truth.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from prm_synth.schema import RECORD_SCHEMA, REJECTED_SCHEMA

FORMAT = "prm-synth/1"
MANIFEST = "manifest.json"


class OutputMismatchError(RuntimeError):
    """The output folder holds a dataset made with a different config."""


@dataclass
class ShardEntry:
    shard: int
    problems: int
    rows: int
    rejected: int
    data: str
    rejected_file: str
    sha256: dict[str, str]
    config_fingerprint: str
    stats: dict[str, Any] = field(default_factory=dict)
    finished_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def shard_name(index: int) -> str:
    return f"shard-{index:05d}"


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def _table_bytes(rows: list[Mapping[str, Any]], schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(list(rows), schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ShardStore:
    """Reads and writes the shards of one output folder for one config fingerprint."""

    def __init__(self, root: str | Path, fingerprint: str) -> None:
        self.root = Path(root)
        self.fingerprint = fingerprint

    # ------------------------------------------------------------ set-up
    def prepare(self, config_dump: dict[str, Any], config_yaml: str, overwrite: bool = False) -> None:
        """Create the folder, refuse to mix configs, clear half-written temporaries."""
        existing = read_manifest(self.root) if (self.root / MANIFEST).exists() else None
        if existing and existing.get("config_fingerprint") != self.fingerprint:
            if not overwrite:
                raise OutputMismatchError(
                    f"{self.root} holds a dataset made with another config "
                    f"(fingerprint {existing.get('config_fingerprint')}, this config {self.fingerprint}); "
                    "use another --out folder, or --overwrite to replace it"
                )
            self._clear()
        for sub in ("data", "rejected", "shards"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            for tmp in (self.root / sub).glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
        atomic_write_bytes(self.root / "config.yaml", config_yaml.encode())
        if not existing or existing.get("config_fingerprint") != self.fingerprint:
            self.write_manifest(config_dump)

    def _clear(self) -> None:
        for sub in ("data", "rejected", "shards", "trees"):
            for p in (self.root / sub).glob("*"):
                p.unlink()
        (self.root / MANIFEST).unlink(missing_ok=True)

    # ------------------------------------------------------------ writing
    def write_shard(
        self,
        index: int,
        records: list[Mapping[str, Any]],
        rejected: list[Mapping[str, Any]],
        problems: int,
        stats: dict[str, Any] | None = None,
        trees: dict[str, Any] | None = None,
    ) -> ShardEntry:
        """Write the shard's files, then its marker. `trees` (problem id -> OmegaPRM tree as node-link
        JSON) go to trees/shard-NNNNN.json and are part of the shard (hashed in its marker)."""
        name = shard_name(index)
        extra_files = {f"trees/{name}.json": json.dumps(trees, ensure_ascii=False).encode()} if trees else {}
        data_bytes = _table_bytes(records, RECORD_SCHEMA)
        rej_bytes = _table_bytes(rejected, REJECTED_SCHEMA)
        data_rel, rej_rel = f"data/{name}.arrow", f"rejected/{name}.arrow"
        atomic_write_bytes(self.root / data_rel, data_bytes)
        atomic_write_bytes(self.root / rej_rel, rej_bytes)
        hashes = {data_rel: _sha256(data_bytes), rej_rel: _sha256(rej_bytes)}
        for rel, blob in extra_files.items():
            atomic_write_bytes(self.root / rel, blob)
            hashes[rel] = _sha256(blob)
        entry = ShardEntry(
            shard=index,
            problems=problems,
            rows=len(records),
            rejected=len(rejected),
            data=data_rel,
            rejected_file=rej_rel,
            sha256=hashes,
            config_fingerprint=self.fingerprint,
            stats=stats or {},
            finished_at=time.time(),
        )
        # The commit point: once this marker exists, the shard is finished.
        atomic_write_json(self.root / "shards" / f"{name}.json", entry.to_json())
        return entry

    # ------------------------------------------------------------ reading
    def finished(self, verify: bool = True) -> dict[int, ShardEntry]:
        """Shards whose marker exists, matches this config, and (verify) whose files match their hashes."""
        out: dict[int, ShardEntry] = {}
        for marker in sorted((self.root / "shards").glob("shard-*.json")):
            try:
                entry = ShardEntry(**json.loads(marker.read_text()))
            except (ValueError, TypeError):
                continue  # unreadable marker: the shard is redone
            if entry.config_fingerprint != self.fingerprint:
                continue
            if verify and not self._files_match(entry):
                continue
            out[entry.shard] = entry
        return out

    def _files_match(self, entry: ShardEntry) -> bool:
        for rel, digest in entry.sha256.items():
            p = self.root / rel
            if not p.exists() or _sha256(p.read_bytes()) != digest:
                return False
        return True

    def write_manifest(self, config_dump: dict[str, Any] | None = None) -> dict[str, Any]:
        """Rebuild manifest.json from the shard markers."""
        old = read_manifest(self.root) if (self.root / MANIFEST).exists() else {}
        entries = sorted(self.finished(verify=False).values(), key=lambda e: e.shard)
        manifest = {
            "format": FORMAT,
            "config_fingerprint": self.fingerprint,
            "config": config_dump if config_dump is not None else old.get("config", {}),
            "shards": [e.to_json() for e in entries],
            "totals": totals(entries),
            "updated_at": time.time(),
        }
        atomic_write_json(self.root / MANIFEST, manifest)
        return manifest


def totals(entries: Iterable[ShardEntry]) -> dict[str, Any]:
    """Sum counts and numeric stats over shards (nested dicts of counts are summed key by key)."""
    out: dict[str, Any] = {"shards": 0, "problems": 0, "rows": 0, "rejected": 0}
    for e in entries:
        out["shards"] += 1
        out["problems"] += e.problems
        out["rows"] += e.rows
        out["rejected"] += e.rejected
        _add_into(out.setdefault("stats", {}), e.stats)
    return out


def _add_into(acc: dict[str, Any], stats: Mapping[str, Any]) -> None:
    for key, value in stats.items():
        if isinstance(value, Mapping):
            _add_into(acc.setdefault(key, {}), value)
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int | float):
            acc[key] = acc.get(key, 0) + value


def read_manifest(root: str | Path) -> dict[str, Any]:
    path = Path(root) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"no {MANIFEST} in {root}: not a prm-synth output folder")
    return json.loads(path.read_text())


def _read_stream(path: Path) -> pa.Table:
    with pa.ipc.open_stream(pa.memory_map(str(path), "r")) as reader:
        return reader.read_all()


def iter_tables(root: str | Path, kind: str = "data") -> Iterator[pa.Table]:
    """One table per finished shard, in shard order (kind: "data" or "rejected")."""
    manifest = read_manifest(root)
    for entry in manifest["shards"]:
        rel = entry["data"] if kind == "data" else entry["rejected_file"]
        yield _read_stream(Path(root) / rel)


def iter_records(root: str | Path, kind: str = "data") -> Iterator[dict[str, Any]]:
    """Rows of the finished shards as dicts, streaming shard by shard."""
    for table in iter_tables(root, kind):
        yield from table.to_pylist()


def data_files(root: str | Path, kind: str = "data") -> list[str]:
    """Paths to pass to `datasets.load_dataset("arrow", data_files=...)`."""
    manifest = read_manifest(root)
    key = "data" if kind == "data" else "rejected_file"
    return [str(Path(root) / e[key]) for e in manifest["shards"]]
